//! Golden files shared with the Go kit (`go/k8s`): the step pod `build_pod` makes for each
//! case of `protocol/testdata/steppod-cases.json`, compared field by field to `steppod-<case>.json`,
//! and each hermetic case's NetworkPolicy to `hermetic-policy-<case>.json`; the token of
//! `token.json`; the readiness verdicts of `progress.json`; and the image-pull Secret
//! of `imagepull-secret.json`. The Go tests check the same files, so both sides build the same pod
//! and Secret, derive the same token and read a status alike.
//!
//! `STEPSHIM_UPDATE_GOLDEN=1` rewrites the pod and token files from this side instead of failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use controller::podspec::{Delivery, StepSpec, build_pod};
use controller::progress::{Progress, progress};
use controller::token::Key;
use k8s_openapi::api::core::v1::{Pod, Toleration};
use serde::Deserialize;
use serde_json::Value;

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../protocol/testdata")
        .join(file)
}

fn read(file: &str) -> Value {
    let path = testdata(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn updating() -> bool {
    std::env::var("STEPSHIM_UPDATE_GOLDEN").is_ok_and(|v| v == "1")
}

fn write(file: &str, v: &Value) {
    let text = serde_json::to_string_pretty(v).unwrap() + "\n";
    std::fs::write(testdata(file), text).unwrap();
}

/// Every path where `got` differs from `want`, with both values.
fn diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let at = |k: &str| {
                if path.is_empty() {
                    k.to_owned()
                } else {
                    format!("{path}.{k}")
                }
            };
            for (k, wv) in w {
                let p = at(k);
                match g.get(k) {
                    Some(gv) => diff(&p, wv, gv, out),
                    None => out.push(format!("{p}: want {wv}, missing")),
                }
            }
            for (k, gv) in g {
                if !w.contains_key(k) {
                    out.push(format!("{}: not wanted, got {gv}", at(k)));
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                diff(&format!("{path}[{i}]"), wv, gv, out);
            }
        }
        _ if want == got => {}
        _ => out.push(format!("{path}: want {want}, got {got}")),
    }
}

/// One case's step description, in the JSON both sides read. Unknown fields are refused so that a
/// field added for one side fails here until this side knows it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Case {
    name: String,
    worker: String,
    token_sha256: String,
    /// The TLS key's seed (hex): the pod serves TLS (PROTOCOL.md 1.1).
    tls_seed: Option<String>,
    spec: SpecIn,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SpecIn {
    name: String,
    image: String,
    build: Option<String>,
    step: Option<String>,
    #[serde(default)]
    env: Vec<EnvIn>,
    cpu: Option<String>,
    cpu_request: Option<String>,
    memory: Option<String>,
    #[serde(default)]
    hermetic: bool,
    certs_config_map: Option<String>,
    run_as_user: Option<i64>,
    run_as_group: Option<i64>,
    #[serde(default)]
    privileged: bool,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerations: Vec<Toleration>,
    #[serde(default)]
    preferred_nodes: Vec<String>,
    service_account: Option<String>,
    #[serde(default)]
    automount_service_account_token: bool,
    image_pull_policy: Option<String>,
    delivery: DeliveryIn,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvIn {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
enum DeliveryIn {
    InitContainer(String),
    ConfigMap(String),
}

impl SpecIn {
    fn into_spec(self) -> StepSpec {
        let delivery = match self.delivery {
            DeliveryIn::InitContainer(image) => Delivery::InitContainer { image },
            DeliveryIn::ConfigMap(name) => Delivery::ConfigMap { name },
        };
        let mut s = StepSpec::new(self.name, self.image, delivery);
        s.build = self.build;
        s.step = self.step;
        s.env = self.env.into_iter().map(|e| (e.name, e.value)).collect();
        s.cpu = self.cpu;
        s.cpu_request = self.cpu_request;
        s.memory = self.memory;
        s.hermetic = self.hermetic;
        s.certs_configmap = self.certs_config_map;
        s.run_as_user = self.run_as_user;
        s.run_as_group = self.run_as_group;
        s.privileged = self.privileged;
        s.node_selector = self.node_selector;
        s.tolerations = self.tolerations;
        s.preferred_nodes = self.preferred_nodes;
        s.service_account = self.service_account;
        s.automount_service_account_token = self.automount_service_account_token;
        s.image_pull_policy = self.image_pull_policy;
        s
    }
}

#[test]
fn step_pods_match_the_golden_files() {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cases {
        cases: Vec<Case>,
    }
    let cases: Cases = serde_json::from_value(read("steppod-cases.json")).unwrap();
    assert!(cases.cases.len() >= 3, "the cases cover both deliveries");
    let mut failures = Vec::new();
    let mut hermetic = 0;
    for case in cases.cases {
        let spec = case.spec.into_spec();
        let pod = build_pod(
            &spec,
            &case.worker,
            &case.token_sha256,
            case.tls_seed.as_deref(),
        );
        let mut outputs = vec![(
            format!("steppod-{}.json", case.name),
            serde_json::to_value(&pod).unwrap(),
        )];
        // A hermetic pod's NetworkPolicy, created with it.
        if spec.hermetic {
            hermetic += 1;
            let policy = controller::hermetic::policy(&case.worker, &spec.name);
            outputs.push((
                format!("hermetic-policy-{}.json", case.name),
                serde_json::to_value(&policy).unwrap(),
            ));
        }
        for (file, got) in outputs {
            if updating() {
                write(&file, &got);
                continue;
            }
            let mut out = Vec::new();
            diff("", &read(&file), &got, &mut out);
            failures.extend(out.into_iter().map(|d| format!("{file}: {d}")));
        }
    }
    assert!(hermetic > 0, "a case is hermetic");
    assert!(
        failures.is_empty(),
        "build_pod differs from the golden files (STEPSHIM_UPDATE_GOLDEN=1 rewrites them; review the diff):\n{}",
        failures.join("\n")
    );
}

#[test]
fn token_matches_the_golden_file() {
    let mut golden = read("token.json");
    let s = |k: &str| golden[k].as_str().unwrap().to_owned();
    let key = Key::from_bytes(hex::decode(s("keyHex")).unwrap()).unwrap();
    let token = key.token(&s("namespace"), &s("pod"));
    let hash = protocol::token::sha256_hex(&token);
    if updating() {
        golden["token"] = token.into();
        golden["tokenSha256"] = hash.into();
        write("token.json", &golden);
        return;
    }
    assert_eq!(
        token,
        s("token"),
        "token of {}/{}",
        s("namespace"),
        s("pod")
    );
    assert_eq!(hash, s("tokenSha256"));
}

#[test]
fn progress_reads_statuses_as_the_table_says() {
    let table = read("progress.json");
    let cases = table["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let mut pod = serde_json::json!({"metadata": {"name": "p"}});
        if !case["status"].is_null() {
            pod["status"] = case["status"].clone();
        }
        let pod: Pod = serde_json::from_value(pod).unwrap();
        let p = progress(Some(&pod));
        let (stage, reason, detail) = match &p {
            Progress::Unknown => ("unknown", "", ""),
            Progress::Scheduling(m) => ("scheduling", "", m.as_str()),
            Progress::Pulling(m) => ("pulling", "", m.as_str()),
            Progress::Starting(m) => ("starting", "", m.as_str()),
            Progress::Ready(ip) => ("ready", "", ip.as_str()),
            Progress::Failed { reason, message } => ("failed", reason.as_str(), message.as_str()),
        };
        let got = serde_json::json!({"stage": stage, "reason": reason, "detail": detail});
        let mut out = Vec::new();
        diff("want", &case["want"], &got, &mut out);
        if let Some(text) = case["text"].as_str()
            && p.to_string() != text
        {
            out.push(format!("text: want {text:?}, got {:?}", p.to_string()));
        }
        failures.extend(out.into_iter().map(|d| format!("{name}: {d}")));
    }
    assert_eq!(progress(None), Progress::Unknown);
    assert!(
        failures.is_empty(),
        "progress differs from protocol/testdata/progress.json:\n{}",
        failures.join("\n")
    );
}

/// The image-pull Secret of `imagepull-secret.json`'s inputs (two images, one served over TLS), as
/// the Go kit's PullSecret makes it.
#[test]
fn image_pull_secret_matches_the_golden_file() {
    let file = "imagepull-secret.json";
    let mut golden = read(file);
    let s = |k: &str| golden[k].as_str().unwrap().to_owned();
    let images: Vec<(String, controller::image::Credentials)> = golden["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let pin = i["pin"].as_str().unwrap();
            let creds = controller::image::Credentials::new(
                (!pin.is_empty()).then_some(pin),
                i["token"].as_str().unwrap(),
            );
            (i["reference"].as_str().unwrap().to_owned(), creds)
        })
        .collect();
    let entries: Vec<_> = images.iter().map(|(r, c)| (r.as_str(), c)).collect();
    let secret = controller::image::pull_secret(&s("worker"), &s("pod"), &entries).unwrap();
    let got = serde_json::to_value(&secret).unwrap();
    if updating() {
        golden["secret"] = got;
        write(file, &golden);
        return;
    }
    let mut out = Vec::new();
    diff("secret", &golden["secret"], &got, &mut out);
    assert!(out.is_empty(), "{file}:\n{}", out.join("\n"));
}
