//! `stepctl run`'s pod options that exclude each other or cannot make a pod are refused in one line
//! and a non-zero exit, before any cluster is contacted (the kubeconfig named does not exist).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// `stepctl run` with `args` and a step image, shim image and command: exit code and stderr.
fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stepctl"))
        .env_remove("STEPCTL_VIA")
        .args(["--kubeconfig", "/nonexistent/kubeconfig", "run"])
        .args(["--image", "busybox", "--shim-image", "shim:dev"])
        .args(args)
        .args(["--", "true"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn bad_combinations_are_refused_in_one_line() {
    let long = "s".repeat(64);
    for (args, want) in [
        (
            &["--cpu", "1", "--cpu-request", "100m"][..],
            "--cpu (request and limit) and --cpu-request (request only) exclude each other",
        ),
        (&["--hermetic", "--name", &long], "must be a label value"),
        (
            &["--hermetic", "--name", "Step_1."],
            "must be a label value",
        ),
        (
            &[
                "--certs-configmap",
                "ca",
                "--image-volume",
                "p:/img=/etc/ssl/certs",
            ],
            "--certs-configmap and --image-volume both mount at /etc/ssl/certs",
        ),
        (&["--certs-configmap", ""], "take a value"),
    ] {
        let (code, err) = run(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            !err.contains("kubeconfig"),
            "{args:?} reached the cluster: {err}"
        );
    }
    // Valid options get as far as the (missing) kubeconfig.
    let key = std::env::temp_dir().join(format!("stepctl-options-key-{}", std::process::id()));
    std::fs::write(&key, [7u8; 32]).unwrap();
    let (code, err) = run(&[
        "--key-file",
        key.to_str().unwrap(),
        "--hermetic",
        "--certs-configmap",
        "ca",
        "--cpu-request",
        "100m",
    ]);
    let _ = std::fs::remove_file(&key);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
}
