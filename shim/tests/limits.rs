//! The contract at its edges, against the real binary: only `GET /healthz` is open, request bodies
//! are objects, any signal number answers `invalid_signal`, caps on remembered processes and spec
//! sizes, 503 when out of descriptors, concurrent spawns of one id, a FIFO planted as
//! `/etc/passwd`, children's `oom_score_adj`, and a shim that a same-uid step cannot read.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::{Duration, Instant};

use common::{Shim, error_code, raw, run, sh};
use protocol::{Exit, SpawnRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_open_for_get_only() {
    let shim = Shim::start();
    let t = Some(shim.token.as_str());
    for (method, token) in [("POST", None), ("DELETE", None), ("DELETE", t), ("PUT", t)] {
        let (status, head, body) = raw(&shim.addr, method, "/healthz", token, b"").await;
        assert_eq!(status, 405, "{method} /healthz with {token:?}");
        assert_eq!(error_code(&body), "method_not_allowed");
        assert!(head.to_ascii_lowercase().contains("allow: get"), "{head}");
    }
    let (status, _, body) = raw(&shim.addr, "GET", "/healthz", None, b"").await;
    assert_eq!((status, body.as_slice()), (200, b"ok\n".as_slice()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrays_are_not_objects_and_huge_signal_numbers_are_signals() {
    let shim = Shim::start();
    let t = Some(shim.token.as_str());
    let tty = SpawnRequest {
        tty: Some(protocol::TtySize { cols: 80, rows: 24 }),
        ..sh("sleep 30")
    };
    shim.client.spawn("t", &tty).await.unwrap();
    let cases: [(&str, &str, &[u8], &str); 6] = [
        (
            "PUT",
            "/v1/processes/arr",
            br#"["/bin/echo",["x"]]"#,
            "invalid_json",
        ),
        (
            "PUT",
            "/v1/processes/arr",
            br#"{"path":"/bin/true","tty":[80,24]}"#,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/processes/t/signal",
            br#"["WINCH"]"#,
            "invalid_json",
        ),
        ("POST", "/v1/processes/t/resize", b"[80,24]", "invalid_json"),
        (
            "POST",
            "/v1/processes/t/signal",
            br#"{"signal":4294967311}"#,
            "invalid_signal",
        ),
        (
            "POST",
            "/v1/processes/t/signal",
            br#"{"signal":1e40}"#,
            "invalid_signal",
        ),
    ];
    for (method, path, body, code) in cases {
        let (status, _, resp) = raw(&shim.addr, method, path, t, body).await;
        assert_eq!(
            (status, error_code(&resp)),
            (400, code.to_owned()),
            "{method} {path} {}",
            String::from_utf8_lossy(body)
        );
    }
    // Nothing was spawned by the array, and the tty process was neither signalled nor resized.
    assert!(shim.client.get("arr").await.is_err());
    let p = shim.client.get("t").await.unwrap();
    assert_eq!(p.state, protocol::State::Running);
    shim.client.delete("t", true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_processes_and_spec_sizes_are_capped() {
    let shim = Shim::start_with(
        &[
            ("STEPSHIM_MAX_PROCESSES", "3"),
            ("STEPSHIM_MAX_SPEC_BYTES", "2048"),
        ],
        None,
    );
    let big = SpawnRequest {
        path: "/bin/true".into(),
        args: vec!["x".repeat(3000)],
        ..Default::default()
    };
    let e = shim.client.spawn("big", &big).await.unwrap_err();
    assert_eq!(e.code(), Some(protocol::ErrorCode::BodyTooLarge), "{e}");
    for i in 0..3 {
        run(&shim.client, &format!("p{i}"), &sh("true")).await;
    }
    let e = shim.client.spawn("p3", &sh("true")).await.unwrap_err();
    assert_eq!(e.code(), Some(protocol::ErrorCode::Unavailable), "{e}");
    // A retry of a remembered id still answers; deleting one makes room.
    assert!(!shim.client.spawn("p0", &sh("true")).await.unwrap().1);
    shim.client.delete("p0", false).await.unwrap();
    run(&shim.client, "p3", &sh("true")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_id_spawned_concurrently_starts_once_and_ids_spawn_side_by_side() {
    let shim = Shim::start();
    let same = (0..16).map(|_| {
        let c = shim.client.clone();
        tokio::spawn(async move { c.spawn("same", &sh("sleep 30")).await.unwrap() })
    });
    let mut created = 0;
    let mut pids = std::collections::HashSet::new();
    for h in same.collect::<Vec<_>>() {
        let (p, new) = h.await.unwrap();
        created += usize::from(new);
        pids.insert(p.pid);
    }
    assert_eq!((created, pids.len()), (1, 1));
    let many = (0..16).map(|i| {
        let c = shim.client.clone();
        tokio::spawn(async move { c.spawn(&format!("id{i}"), &sh("exit 0")).await.unwrap() })
    });
    for h in many.collect::<Vec<_>>() {
        assert!(h.await.unwrap().1);
    }
    shim.client.delete("same", true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_answers_503_and_recovers() {
    let shim = Shim::start_with(&[], Some(&["prlimit", "--nofile=48:48"]));
    let t = Some(shim.token.as_str());
    let body = serde_json::to_vec(&sh("exec sleep 30")).unwrap();
    let mut answer = (0, String::new());
    let mut spawned = 0;
    for i in 0..40 {
        let (status, _, resp) =
            raw(&shim.addr, "PUT", &format!("/v1/processes/s{i}"), t, &body).await;
        if status != 201 {
            answer = (status, error_code(&resp));
            break;
        }
        spawned += 1;
    }
    eprintln!("out of descriptors after {spawned} spawns: {answer:?}");
    assert_eq!(
        answer,
        (503, "unavailable".to_owned()),
        "after {spawned} spawns"
    );
    for i in 0..spawned {
        shim.client.delete(&format!("s{i}"), true).await.unwrap();
    }
    run(&shim.client, "after", &sh("true")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_as_etc_passwd_does_not_hang_the_shim() {
    let dir = std::env::temp_dir().join(format!("stepshim-fifo-{}", common::random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("passwd");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // A private mount namespace where /etc/passwd is the FIFO (nobody ever writes to it).
    let script = format!("mount --bind {} /etc/passwd && exec \"$0\"", fifo.display());
    let shim = Shim::start_with(
        &[],
        Some(&[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ]),
    );
    let started = Instant::now();
    let spec = SpawnRequest {
        user: Some("nobody".into()),
        ..sh("id -u")
    };
    let e = shim.client.spawn("u", &spec).await.unwrap_err();
    assert_eq!(e.code(), Some(protocol::ErrorCode::InvalidSpawn), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let (status, _, _) = raw(&shim.addr, "GET", "/healthz", None, b"").await;
    assert_eq!(status, 200);
    let ran = run(&shim.client, "ok", &sh("echo fine")).await;
    assert_eq!(ran.stdout, b"fine\n");
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_uid_step_cannot_read_the_shim_and_children_are_oom_first() {
    // The shim runs as nobody, like its steps, so only non-dumpability protects it.
    let shim = Shim::start_as_nobody();
    // The spawned process's own value: a shim that is not root can set it only once the child has
    // exec'd, so what the program forks in its first microseconds may still carry the old one
    // (PROTOCOL.md 4.2); the image binary is fast enough to show that race.
    let ran = run(
        &shim.client,
        "peek",
        &sh("id -u; sleep 0.2; cat /proc/$$/oom_score_adj; cat /proc/$PPID/environ >/dev/null && echo read"),
    )
    .await;
    let out = String::from_utf8_lossy(&ran.stdout).into_owned();
    let err = String::from_utf8_lossy(&ran.stderr).into_owned();
    assert_eq!(out, "65534\n1000\n", "stderr: {err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert_ne!(ran.exit, Some(Exit::code(0)));
    let adj = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", shim.pid())).unwrap();
    assert_ne!(
        adj.trim(),
        "1000",
        "the shim itself must stay below its children"
    );
}
