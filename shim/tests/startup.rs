//! A start-up that fails writes exactly one line on stderr and exits with its status (PROTOCOL.md
//! section 7), even at the most verbose log level: bad configuration (64), a port already taken
//! (64), a starter already gone (69), a ready file that cannot be written (73), and the `install`
//! verb's usage (64) and failure (1).
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::process::{Command, Stdio};

/// Runs the shim with `args` and `env` (plus a token and a debug log) and returns its exit status
/// and its stderr lines.
fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Vec<String>) {
    let mut cmd = Command::new(test_support::shim::binary());
    cmd.args(args)
        .env_clear()
        .env("STEPSHIM_TOKEN_SHA256", "ab".repeat(32))
        .env("STEPSHIM_LOG", "debug")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = cmd.output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    (out.status.code(), err.lines().map(str::to_owned).collect())
}

fn assert_one_line(got: (Option<i32>, Vec<String>), status: i32, says: &str) {
    let (code, lines) = got;
    assert_eq!(code, Some(status), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("stepshim: "), "{lines:?}");
    assert!(lines[0].contains(says), "{lines:?}");
}

#[test]
fn every_start_up_failure_is_one_line_and_its_status() {
    let loopback = [("STEPSHIM_LISTEN", "127.0.0.1:0")];
    assert_one_line(
        run(
            &[],
            &[
                ("STEPSHIM_LISTEN", "127.0.0.1:0"),
                ("STEPSHIM_MAX_PULLS", "0"),
            ],
        ),
        64,
        "STEPSHIM_MAX_PULLS",
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    assert_one_line(run(&[], &[("STEPSHIM_LISTEN", &addr)]), 64, "cannot listen");
    // Not the test's pid: the shim's parent is the test, so any other pid is a starter gone.
    let gone = std::process::id().wrapping_add(1).to_string();
    let mut env = loopback.to_vec();
    env.push(("STEPSHIM_PARENT_PID", &gone));
    assert_one_line(run(&[], &env), 69, "STEPSHIM_PARENT_PID");
    let missing = std::env::temp_dir().join(format!(
        "stepshim-startup-{}/no/such/dir/ready",
        test_support::random_hex(4)
    ));
    let mut env = loopback.to_vec();
    env.push(("STEPSHIM_READY_FILE", missing.to_str().unwrap()));
    assert_one_line(run(&[], &env), 73, "ready file");
    assert_one_line(run(&["install"], &[]), 64, "usage");
    assert_one_line(
        run(&["install", missing.to_str().unwrap()], &[]),
        1,
        "cannot install",
    );
}

#[test]
fn a_tls_seed_is_checked_at_start() {
    let seed = "ab".repeat(32);
    let with = |k, v| run(&[], &[("STEPSHIM_LISTEN", "127.0.0.1:0"), (k, v)]);
    if cfg!(feature = "tls") {
        assert_one_line(with("STEPSHIM_TLS_SEED", "zz"), 64, "STEPSHIM_TLS_SEED");
        let missing = "/nonexistent/stepshim-seed";
        assert_one_line(
            with("STEPSHIM_TLS_SEED_FILE", missing),
            64,
            "STEPSHIM_TLS_SEED_FILE",
        );
    } else {
        // The ConfigMap-sized build has no TLS: it says so rather than serving in clear text.
        assert_one_line(with("STEPSHIM_TLS_SEED", &seed), 64, "built without TLS");
    }
}
