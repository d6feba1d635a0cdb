//! The configuration's tests: defaults, the file transfer settings, flags over variables, and refusals.

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_need_a_token() {
    assert!(matches!(
        Config::from_sources(env(&[]), vec![]),
        Err(ConfigError::NoToken)
    ));
    let c = Config::from_sources(env(&[("STEPSHIM_INSECURE_NO_AUTH", "1")]), vec![]).unwrap();
    assert_eq!(c.listen.to_string(), "0.0.0.0:7777");
    assert!(c.token_sha256.is_none());
    assert_eq!(c.grace, Duration::from_secs(10));
    assert_eq!((c.max_processes, c.max_connections), (4096, 1024));
    assert_eq!(c.fd_reserve, 1024);
    assert_eq!(
        (c.max_spec_bytes, c.max_header_bytes),
        (256 << 10, 16 << 10)
    );
    assert_eq!(
        (c.auth_timeout, c.oom_score_adj),
        (Duration::from_secs(5), 1000)
    );
    assert_eq!(c.log_flush, Duration::from_millis(100));
    let quick = env(&[
        ("STEPSHIM_INSECURE_NO_AUTH", "1"),
        ("STEPSHIM_LOG_FLUSH_MS", "0"),
    ]);
    assert_eq!(
        Config::from_sources(quick, vec![]).unwrap().log_flush,
        Duration::ZERO
    );
    for (k, v) in [
        ("STEPSHIM_LOG_FLUSH_MS", "10001"),
        ("STEPSHIM_LOG_FLUSH_MS", "-1"),
        ("STEPSHIM_MAX_PROCESSES", "0"),
        ("STEPSHIM_MAX_HEADER_BYTES", "100"),
        ("STEPSHIM_OOM_SCORE_ADJ", "1001"),
        ("STEPSHIM_AUTH_TIMEOUT_SECONDS", "0"),
        ("STEPSHIM_MAX_CONNECTIONS", "many"),
        ("STEPSHIM_FD_RESERVE", "-1"),
    ] {
        let bad = env(&[("STEPSHIM_INSECURE_NO_AUTH", "1"), (k, v)]);
        assert!(Config::from_sources(bad, vec![]).is_err(), "{k}={v}");
    }
    let files = FilesSettings {
        max_bytes: 8 << 30,
        max_header_bytes: 64 << 10,
        direct_min: 8 << 20,
        max_concurrent: 8,
        idle_timeout: Duration::from_secs(60),
        grant_max_concurrent: 4,
        min_rate_bytes: 64 << 10,
        min_rate_interval: Duration::from_secs(30),
    };
    assert_eq!(c.files, files);
    let artifacts = ArtifactsSettings {
        max_grants: 64,
        max_pulls: 8,
        pull_retries: 8,
        max_connections: 256,
        pull_busy_secs: 600,
    };
    assert_eq!(c.artifacts, artifacts);
}

#[test]
fn files_caps_are_read_and_zero_is_refused() {
    let base = [("STEPSHIM_INSECURE_NO_AUTH", "1")];
    let c = Config::from_sources(
        env(&[
            base[0],
            ("STEPSHIM_FILES_MAX_BYTES", "1000"),
            ("STEPSHIM_FILES_MAX_HEADER_BYTES", "512"),
            ("STEPSHIM_FILES_IDLE_TIMEOUT", "0.5"),
            ("STEPSHIM_FILES_DIRECT_MIN_BYTES", "0"),
            ("STEPSHIM_FILES_GRANT_MAX_CONCURRENT", "1"),
            ("STEPSHIM_FILES_MIN_RATE_BYTES", "0"),
            ("STEPSHIM_FILES_MIN_RATE_INTERVAL", "2.5"),
        ]),
        vec!["--files-max-concurrent=3".into()],
    )
    .unwrap();
    assert_eq!(
        c.files,
        FilesSettings {
            max_bytes: 1000,
            max_header_bytes: 512,
            direct_min: 0,
            max_concurrent: 3,
            idle_timeout: Duration::from_millis(500),
            grant_max_concurrent: 1,
            min_rate_bytes: 0,
            min_rate_interval: Duration::from_millis(2500),
        }
    );
    for bad in [
        ("STEPSHIM_FILES_MAX_BYTES", "0"),
        ("STEPSHIM_FILES_MAX_CONCURRENT", "-1"),
        ("STEPSHIM_FILES_IDLE_TIMEOUT", "0"),
        ("STEPSHIM_FILES_GRANT_MAX_CONCURRENT", "0"),
        ("STEPSHIM_FILES_MIN_RATE_BYTES", "-1"),
        ("STEPSHIM_FILES_MIN_RATE_INTERVAL", "0"),
    ] {
        assert!(Config::from_sources(env(&[base[0], bad]), vec![]).is_err());
    }
}

#[test]
fn flags_override_variables_and_junk_is_refused() {
    let hex = "ab".repeat(32);
    let c = Config::from_sources(
        env(&[
            ("STEPSHIM_TOKEN_SHA256", &hex),
            ("STEPSHIM_LISTEN", "127.0.0.1:1"),
        ]),
        vec![
            "--listen=127.0.0.1:2".into(),
            "--grace-seconds".into(),
            "0.5".into(),
        ],
    )
    .unwrap();
    assert_eq!(c.listen.port(), 2);
    assert_eq!(c.token_sha256, Some([0xab; 32]));
    assert_eq!(c.grace, Duration::from_millis(500));
    for bad in [
        env(&[("STEPSHIM_TOKEN_SHA256", "abc")]),
        env(&[("STEPSHIM_TOKEN_SHA256", &hex), ("STEPSHIM_LISTEN", "nope")]),
        env(&[
            ("STEPSHIM_TOKEN_SHA256", &hex),
            ("STEPSHIM_GRACE_SECONDS", "-1"),
        ]),
        env(&[
            ("STEPSHIM_TOKEN_SHA256", &hex),
            ("STEPSHIM_DATA_DIR", "relative"),
        ]),
        env(&[("STEPSHIM_TOKEN_SHA256_FILE", "/nonexistent/token")]),
    ] {
        assert!(Config::from_sources(bad, vec![]).is_err());
    }
    assert!(matches!(
        Config::from_sources(
            env(&[("STEPSHIM_TOKEN_SHA256", &hex)]),
            vec!["--bogus".into()]
        ),
        Err(ConfigError::UnknownArgument(_))
    ));
}

#[test]
fn properties_caps_are_read_and_out_of_range_is_refused() {
    let base = ("STEPSHIM_INSECURE_NO_AUTH", "1");
    let defaults = Config::from_sources(env(&[base]), vec![]).unwrap();
    let want = crate::properties::Limits {
        max_count: 256,
        max_name_bytes: 255,
        max_value_bytes: 1 << 20,
        max_bytes: 4 << 20,
    };
    assert_eq!(defaults.properties, want);
    let c = Config::from_sources(
        env(&[
            base,
            ("STEPSHIM_PROPERTIES_MAX_COUNT", "3"),
            ("STEPSHIM_PROPERTIES_MAX_NAME_BYTES", "16"),
            ("STEPSHIM_PROPERTIES_MAX_BYTES", "2000"),
        ]),
        vec!["--properties-max-value-bytes=1000".into()],
    )
    .unwrap();
    let want = crate::properties::Limits {
        max_count: 3,
        max_name_bytes: 16,
        max_value_bytes: 1000,
        max_bytes: 2000,
    };
    assert_eq!(c.properties, want);
    for bad in [
        ("STEPSHIM_PROPERTIES_MAX_COUNT", "0"),
        ("STEPSHIM_PROPERTIES_MAX_COUNT", "65537"),
        ("STEPSHIM_PROPERTIES_MAX_NAME_BYTES", "4097"),
        ("STEPSHIM_PROPERTIES_MAX_VALUE_BYTES", "0"),
        ("STEPSHIM_PROPERTIES_MAX_VALUE_BYTES", "1073741825"),
        ("STEPSHIM_PROPERTIES_MAX_BYTES", "-1"),
    ] {
        assert!(
            Config::from_sources(env(&[base, bad]), vec![]).is_err(),
            "{bad:?}"
        );
    }
}
