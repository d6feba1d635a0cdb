//! `stepctl run` against a cluster names no default images: without `--image` (or
//! `--image-from`) or `--shim-image` (nor their environment variables) it ends with one line saying
//! what to pass, before it connects to anything, so these runs need no cluster; a malformed
//! `--image-from` or one whose directory cannot name an image is refused as early.

use std::process::Command;

/// Runs `stepctl run` for a cluster that does not exist, with `env` and `args`; returns the exit
/// code and stderr.
fn run(env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stepctl"));
    cmd.env_remove("STEPCTL_IMAGE")
        .env_remove("STEPCTL_SHIM_IMAGE")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .args(["--key-file", "/nonexistent/key", "run"])
        .args(args)
        .args(["--", "true"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("stepctl runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_run_without_images_says_what_to_pass_in_one_line() {
    let (code, err) = run(&[], &["--shim-image", "r/shim@sha256:00"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        "stepctl: no step image: pass --image REF (or set STEPCTL_IMAGE) or --image-from POD:/PATH\n"
    );

    // An image from a step pod: the argument and the image's name are checked first too.
    let shim = ["--shim-image", "r/shim@sha256:00", "--image-from"];
    let (code, err) = run(&[], &[&shim[..], &["build-1"]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        "stepctl: --image-from \"build-1\": want POD:/PATH (an absolute path in the pod)\n"
    );
    let (code, err) = run(&[], &[&shim[..], &["build-1:/out/App"]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("stepctl: /out/App: the image would be named \"App\", which is not an OCI name component"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let (code, err) = run(&[("STEPCTL_IMAGE", "busybox")], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("stepctl: no shim image for --delivery init: pass --shim-image REF or set STEPCTL_SHIM_IMAGE"),
        "{err}"
    );
}

#[test]
fn with_both_images_the_run_goes_on_to_the_cluster() {
    // The images are accepted from the environment; what fails next is the missing key file.
    let env = [
        ("STEPCTL_IMAGE", "busybox"),
        ("STEPCTL_SHIM_IMAGE", "r/shim@sha256:00"),
    ];
    let (code, err) = run(&env, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("image"), "{err}");
    // ConfigMap delivery needs no shim image.
    let (code, err) = run(
        &[("STEPCTL_IMAGE", "busybox")],
        &["--delivery", "configmap"],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("image"), "{err}");
}
