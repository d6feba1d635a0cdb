//! Process lifecycle against the real shim binary: exit codes, signal deaths, output order, idempotent
//! spawn, conflicts, missing executables, environment, directories, group signals and the terminal.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::Duration;

use common::{Shim, follow, run, sh};
use protocol::{Exit, FrameType, SpawnRequest, State, TtySize};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_signal_deaths_are_reported() {
    let shim = Shim::start();
    for (i, code) in [0, 1, 255].into_iter().enumerate() {
        let ran = run(
            &shim.client,
            &format!("code{i}"),
            &sh(&format!("exit {code}")),
        )
        .await;
        assert_eq!(ran.exit, Some(Exit::code(code)));
        let p = shim.client.get(&format!("code{i}")).await.unwrap();
        assert_eq!(p.state, State::Exited);
        assert_eq!(p.exit, Some(Exit::code(code)));
        assert!(p.exited_at.is_some());
    }
    let ran = run(&shim.client, "killed", &sh("kill -KILL $$")).await;
    assert_eq!(ran.exit, Some(Exit::signal(9)));
    let ran = run(&shim.client, "segv", &sh("kill -SEGV $$")).await;
    assert_eq!(ran.exit.unwrap().status, 128 + 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_and_stderr_keep_their_order() {
    let shim = Shim::start();
    // The process writes its next line only after the test has seen the previous one (a line of
    // stdin each time), so the order it wrote them is an order the shim could see.
    let script = "for i in 1 2 3 4 5; do echo out$i; read x; echo err$i >&2; read x; done";
    let c = &shim.client;
    c.spawn(
        "order",
        &SpawnRequest {
            stdin: true,
            ..sh(script)
        },
    )
    .await
    .unwrap();
    let mut out = c.output("order", 0, true).await.unwrap();
    let mut sent = 0u64;
    let mut ran = common::Ran::default();
    while let Some(f) = out.next().await.unwrap() {
        match f.kind {
            FrameType::Stdout | FrameType::Stderr => {
                ran.frames.push((f.kind, f.payload));
                let ack = c.stdin("order", sent, "go\n".into(), false).await;
                sent = ack.map_or(sent, |a| a.stdin_offset);
            }
            FrameType::Exit => ran.exit = serde_json::from_slice(&f.payload).ok(),
            _ => {}
        }
    }
    let seq: Vec<String> = ran
        .frames
        .iter()
        .map(|(k, d)| {
            format!(
                "{}:{}",
                if *k == FrameType::Stdout { 1 } else { 2 },
                String::from_utf8_lossy(d).trim()
            )
        })
        .collect();
    let want: Vec<String> = (1..=5)
        .flat_map(|i| [format!("1:out{i}"), format!("2:err{i}")])
        .collect();
    assert_eq!(seq, want);
    assert_eq!(ran.exit, Some(Exit::code(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_is_idempotent_conflicts_are_409_and_missing_executables_422() {
    let shim = Shim::start();
    let spec = sh("echo once; sleep 0.2");
    let (p1, created1) = shim.client.spawn("same", &spec).await.unwrap();
    let (p2, created2) = shim.client.spawn("same", &spec).await.unwrap();
    assert!(created1 && !created2);
    assert_eq!(
        p1.pid, p2.pid,
        "a retried spawn must not start a second process"
    );
    let err = shim
        .client
        .spawn("same", &sh("echo other"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::SpecConflict));
    let ran = follow(&shim.client, "same").await;
    assert_eq!(ran.stdout, b"once\n");
    // Same spec after exit is still the same process.
    let (p3, created3) = shim.client.spawn("same", &spec).await.unwrap();
    assert!(!created3 && p3.pid == p1.pid);

    for path in [
        "/nonexistent/bin",
        "no-such-command-anywhere",
        "/etc/passwd",
        "/tmp",
    ] {
        let err = shim
            .client
            .spawn(
                "missing",
                &SpawnRequest {
                    path: path.into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Some(protocol::ErrorCode::ExecutableNotFound),
            "{path}: {err}"
        );
    }
    let err = shim.client.get("missing").await.unwrap_err();
    assert_eq!(
        err.code(),
        Some(protocol::ErrorCode::ProcessNotFound),
        "a failed spawn records nothing"
    );
    let bad_user = SpawnRequest {
        user: Some("no-such-user-here".into()),
        ..sh("true")
    };
    assert_eq!(
        shim.client.spawn("u", &bad_user).await.unwrap_err().code(),
        Some(protocol::ErrorCode::InvalidSpawn)
    );
    // The id is free after a failed spawn.
    let ran = run(&shim.client, "missing", &sh("exit 4")).await;
    assert_eq!(ran.exit, Some(Exit::code(4)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_directory_path_lookup_and_user() {
    let shim = Shim::start_with(
        &[("STEPSHIM_DATA_DIR", "/tmp"), ("SHIM_OWN_VAR", "inherited")],
        None,
    );
    let dir = std::env::temp_dir().join(format!("stepshim-dir-{}/a/b", common::random_hex(4)));
    let spec = SpawnRequest {
        path: "sh".into(),
        args: vec![
            "-c".into(),
            "pwd; echo $FOO $SHIM_OWN_VAR; env | grep -c ^STEPSHIM_ || true; id -u".into(),
        ],
        env: vec!["FOO=bar".into(), "FOO=baz".into()],
        dir: Some(dir.to_string_lossy().into_owned()),
        user: Some("65534:65534".into()),
        ..Default::default()
    };
    let ran = run(&shim.client, "env", &spec).await;
    let out = String::from_utf8(ran.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        dir.to_string_lossy(),
        "dir is created and entered"
    );
    assert_eq!(
        lines[1], "baz inherited",
        "later env entries win; the shim's env is inherited"
    );
    assert_eq!(lines[2], "0", "no STEPSHIM_* variable leaks into processes");
    assert_eq!(lines[3], "65534", "user is switched");
    std::fs::remove_dir_all(dir.parent().unwrap().parent().unwrap()).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_the_whole_process_group() {
    let shim = Shim::start();
    // The shell starts a background child and waits; TERM to the group kills both.
    let spec = sh("sleep 300 & echo child $!; wait");
    shim.client.spawn("group", &spec).await.unwrap();
    let mut out = shim.client.output("group", 0, true).await.unwrap();
    let first = out.next().await.unwrap().unwrap();
    let text = String::from_utf8(first.payload.to_vec()).unwrap();
    let child: i32 = text.trim().strip_prefix("child ").unwrap().parse().unwrap();
    let p = shim.client.signal("group", "term").await.unwrap();
    assert_eq!(p.state, State::Running);
    let p = shim.client.wait("group", 10).await.unwrap();
    assert_eq!(p.exit.unwrap().signal, Some(15));
    common::eventually(Duration::from_secs(5), "grandchild to die", || {
        !common::alive(child)
    })
    .await;
    let err = shim.client.signal("group", "TERM").await.unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::NotRunning));
    assert_eq!(
        shim.client
            .signal("group", "NOPE")
            .await
            .unwrap_err()
            .code(),
        Some(protocol::ErrorCode::InvalidSignal)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tty_reports_its_size_and_follows_resize() {
    let shim = Shim::start();
    let spec = SpawnRequest {
        tty: Some(TtySize { cols: 80, rows: 24 }),
        ..sh("stty size; test -t 1 && echo is-a-tty; read line; stty size; echo got $line")
    };
    shim.client.spawn("tty", &spec).await.unwrap();
    let mut out = shim.client.output("tty", 0, true).await.unwrap();
    let mut seen = String::new();
    while !seen.contains("is-a-tty") {
        let f = out.next().await.unwrap().expect("output before exit");
        seen.push_str(&String::from_utf8_lossy(&f.payload));
    }
    assert!(seen.contains("24 80"), "{seen:?}");
    shim.client
        .resize(
            "tty",
            TtySize {
                cols: 132,
                rows: 50,
            },
        )
        .await
        .unwrap();
    shim.client
        .stdin("tty", 0, "hello\n".into(), false)
        .await
        .unwrap();
    let ran = follow(&shim.client, "tty").await;
    let all = String::from_utf8_lossy(&ran.stdout);
    assert!(all.contains("50 132"), "{all:?}");
    assert!(all.contains("got hello"), "{all:?}");
    assert!(
        ran.frames.iter().all(|(k, _)| *k == FrameType::Stdout),
        "a tty has one stream"
    );
    assert_eq!(ran.exit, Some(Exit::code(0)));
    let err = shim
        .client
        .resize("tty", TtySize { cols: 1, rows: 1 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::NotRunning));
    run(&shim.client, "notty", &sh("true")).await;
    assert_eq!(
        shim.client
            .resize("notty", TtySize { cols: 1, rows: 1 })
            .await
            .unwrap_err()
            .code(),
        Some(protocol::ErrorCode::NoTty)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_needs_force_while_running_and_frees_the_id() {
    let shim = Shim::start();
    shim.client.spawn("long", &sh("sleep 300")).await.unwrap();
    assert_eq!(
        shim.client.delete("long", false).await.unwrap_err().code(),
        Some(protocol::ErrorCode::StillRunning)
    );
    shim.client.delete("long", true).await.unwrap();
    assert_eq!(
        shim.client.get("long").await.unwrap_err().code(),
        Some(protocol::ErrorCode::ProcessNotFound)
    );
    let ran = run(&shim.client, "long", &sh("echo reused")).await;
    assert_eq!(ran.stdout, b"reused\n");
    shim.client.delete("long", false).await.unwrap();
    assert!(shim.client.list().await.unwrap().is_empty());
    assert_eq!(
        shim.client.delete("long", false).await.unwrap_err().code(),
        Some(protocol::ErrorCode::ProcessNotFound)
    );
}
