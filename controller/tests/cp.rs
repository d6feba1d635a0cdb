//! `stepctl cp` and `stepctl run --input/--output-dir` against a real local shim (`--local`): local to
//! pod and back, pod to pod directly (a grant and a pull) and through stepctl, and a step whose inputs
//! are pulled before its command runs. Needs the `stepshim` binary beside `stepctl` (`cargo build -p
//! stepshim`) or in `$STEPSHIM_BIN`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn stepctl(args: &[&str]) -> (bool, String, String) {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_stepctl"));
    let shim = std::env::var_os("STEPSHIM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| exe.with_file_name("stepshim"));
    assert!(
        shim.exists(),
        "no stepshim at {} (cargo build -p stepshim)",
        shim.display()
    );
    let out = Command::new(&exe)
        .arg("--local")
        .arg("--shim-bin")
        .arg(&shim)
        .args(args)
        .output()
        .expect("stepctl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn same(a: &Path, b: &Path) {
    for rel in ["big", "sub/a.txt", "run.sh"] {
        assert_eq!(
            std::fs::read(a.join(rel)).unwrap(),
            std::fs::read(b.join(rel)).unwrap(),
            "{rel}"
        );
    }
    let mode = std::fs::metadata(b.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(b.join("link")).unwrap(),
        Path::new("sub/a.txt")
    );
}

#[test]
fn cp_both_ways_pod_to_pod_and_run_inputs() {
    let t = std::env::temp_dir().join(format!("stepctl-cp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    let src = t.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/a.txt"), b"alpha\n").unwrap();
    std::fs::write(
        src.join("big"),
        (0..2_000_000u32)
            .map(|i| (i * 7 % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    std::fs::write(src.join("run.sh"), b"#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("sub/a.txt", src.join("link")).unwrap();
    let p = |rel: &str| t.join(rel).display().to_string();
    let ok = |args: &[&str]| {
        let (ok, out, err) = stepctl(args);
        assert!(ok, "stepctl {args:?}: {err}");
        out
    };
    ok(&[
        "cp",
        &format!("{}/", src.display()),
        &format!("pod:{}", p("pod/in")),
    ]);
    same(&src, &t.join("pod/in"));
    ok(&["cp", &format!("pod:{}/", p("pod/in")), &p("back")]);
    same(&src, &t.join("back"));
    let direct = ok(&[
        "-o",
        "json",
        "cp",
        &format!("a:{}/", p("pod/in")),
        &format!("b:{}", p("pod/direct")),
    ]);
    assert!(direct.contains("\"route\":\"direct\""), "{direct}");
    same(&src, &t.join("pod/direct"));
    let via = ok(&[
        "-o",
        "json",
        "cp",
        "--through-controller",
        &format!("a:{}/", p("pod/in")),
        &format!("b:{}", p("pod/via")),
    ]);
    assert!(via.contains("\"route\":\"controller\""), "{via}");
    same(&src, &t.join("pod/via"));
    // A step with two inputs (pulled before its command) and an output directory.
    let script = format!(
        "./src/run.sh && cmp src/big other/big && cp src/sub/a.txt {}/",
        p("out")
    );
    let (ok_run, _, err) = stepctl(&[
        "run",
        "--input",
        &format!("src=a:{}", p("pod/in")),
        "--input",
        &format!("other=a:{}", p("pod/via")),
        "--output-dir",
        &p("out"),
        "--dir",
        &p("work"),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(ok_run, "{err}");
    assert!(
        err.contains("input src") && err.contains("pulled directly"),
        "{err}"
    );
    assert_eq!(std::fs::read(t.join("out/a.txt")).unwrap(), b"alpha\n");
    // A missing input fails the run before its command.
    let (ok_run, _, err) = stepctl(&[
        "run",
        "--input",
        &format!("x=a:{}", p("nope")),
        "--",
        "true",
    ]);
    assert!(!ok_run && err.contains("input x"), "{err}");
    let _ = std::fs::remove_dir_all(&t);
}
