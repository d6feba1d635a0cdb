//! `stepctl run --input NAME=POD:/PATH --output PATH`: a step's inputs pulled into its pod (all at
//! once, directly from the pods that produced them, through stepctl if the step's pod cannot reach
//! them) before its command starts, and its output directories created and kept with the pod.

use anyhow::{Context, Result, bail};
use client::ShimClient;
use controller::transfer::{self, How};
use futures_util::future::try_join_all;

use super::{Target, random_suffix};

/// Where inputs land when the run names no `--dir`.
pub const DEFAULT_DIR: &str = "/tmp/build";

/// One `--input`.
#[derive(Debug, PartialEq, Eq)]
pub struct Input {
    name: String,
    pod: String,
    path: String,
}

/// Parses `NAME=POD:/PATH`.
pub fn parse(s: &str) -> Result<Input> {
    let Some((name, rest)) = s.split_once('=') else {
        bail!("--input {s:?}: want NAME=POD:/PATH");
    };
    let Some((pod, path)) = rest.split_once(':') else {
        bail!("--input {s:?}: want NAME=POD:/PATH");
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || pod.is_empty() {
        bail!("--input {s:?}: NAME must be one path component and POD a pod name");
    }
    if !path.starts_with('/') {
        bail!("--input {s:?}: PATH must be absolute");
    }
    Ok(Input {
        name: name.to_owned(),
        pod: pod.to_owned(),
        path: path.to_owned(),
    })
}

impl Input {
    /// The pod the input is pulled from.
    pub fn pod(&self) -> &str {
        &self.pod
    }
}

/// Pulls every input into `dir/NAME` of `step` at once and creates the output directories.
pub async fn prepare(
    target: &Target,
    step: &ShimClient,
    dir: &str,
    inputs: &[String],
    outputs: &[String],
    how: How,
) -> Result<()> {
    let inputs: Vec<Input> = inputs.iter().map(|s| parse(s)).collect::<Result<_>>()?;
    let pulls = inputs.iter().map(|input| async move {
        let src = target.shim(Some(&input.pod)).await?;
        // The directory's contents land in dir/NAME.
        let path = format!("{}/", input.path.trim_end_matches('/'));
        let to = format!("{}/{}", dir.trim_end_matches('/'), input.name);
        let id = format!("in-{}-{}", input.name, random_suffix());
        let started = std::time::Instant::now();
        let c = transfer::copy(&src, &path, step, &to, &id, how)
            .await
            .with_context(|| format!("input {} from {}:{}", input.name, input.pod, input.path))?;
        let secs = started.elapsed().as_secs_f64().max(1e-3);
        eprintln!(
            "stepctl: input {} ({} bytes, {:.1} MB/s, {}{})",
            input.name,
            c.bytes,
            c.bytes as f64 / secs / 1e6,
            if c.direct {
                "pulled directly"
            } else {
                "through stepctl"
            },
            c.fallback
                .as_deref()
                .map(|w| format!(" after: {w}"))
                .unwrap_or_default()
        );
        anyhow::Ok(())
    });
    try_join_all(pulls).await?;
    // An empty archive (its end marker alone) creates a directory.
    for out in outputs {
        step.files_in_bytes(out, bytes::Bytes::from(vec![0u8; 1024]))
            .await
            .with_context(|| format!("creating output {out}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_parse_and_bad_ones_are_refused() {
        let i = parse("src=get-1:/build/out").unwrap();
        assert_eq!(
            (i.name.as_str(), i.pod.as_str(), i.path.as_str()),
            ("src", "get-1", "/build/out")
        );
        for bad in [
            "src",
            "src=pod",
            "=pod:/x",
            "a/b=pod:/x",
            "src=pod:rel",
            "..=p:/x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
