//! Every relative link in the project's Markdown (README, SECURITY, CHANGELOG, docs/, results/,
//! protocol/, tests/) leads to a file that exists, and a `#fragment` to a heading of that file, as
//! GitHub spells heading anchors: a moved file or a renamed heading fails here.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The Markdown files below `dir`, `target/` and hidden directories left out.
fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if p.is_dir() {
            markdown(&p, out);
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of the headings of `text`, code blocks left out.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            code = !code;
        } else if !code && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of the inline links `](target)` of `text`.
fn links(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &text[i + 2..];
            let end = rest.find(|c: char| c == ')' || c.is_whitespace())?;
            Some(&rest[..end])
        })
        .collect()
}

/// The broken relative links of `file`, as `file: link (why)`.
fn broken(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    for link in links(&text) {
        if link.contains("://") || link.starts_with("mailto:") {
            continue;
        }
        let (path, fragment) = link.split_once('#').unwrap_or((link, ""));
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap().join(path)
        };
        if !target.exists() {
            out.push(format!("{}: {link} (no such file)", file.display()));
        } else if !fragment.is_empty() && target.extension().is_some_and(|e| e == "md") {
            let headings = anchors(&std::fs::read_to_string(&target).unwrap());
            if !headings.contains(fragment) {
                out.push(format!("{}: {link} (no such heading)", file.display()));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_leads_somewhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    markdown(root, &mut files);
    assert!(
        files.len() > 20,
        "found only {} Markdown files",
        files.len()
    );
    let bad: Vec<String> = files.iter().flat_map(|f| broken(f)).collect();
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn anchors_are_spelled_as_github_spells_them() {
    assert_eq!(
        anchor(" Cluster: a step's output as a later step's image, shim against registry"),
        "cluster-a-steps-output-as-a-later-steps-image-shim-against-registry"
    );
    assert_eq!(anchor("4.8.1 Deterministic `GET`"), "481-deterministic-get");
    let dir = std::env::temp_dir().join(format!("doc-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let md = dir.join("a.md");
    std::fs::write(
        &md,
        "# Real one\n[ok](#real-one) [bad](#gone) [file](missing.md)\n",
    )
    .unwrap();
    let found = broken(&md);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 2, "{found:?}");
}
