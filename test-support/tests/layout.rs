//! Every crate's `lib.rs` opens with a `//! # Layout` list naming each of its modules' jobs
//! (docs/development.md): a module declared in a `lib.rs` and missing from its list fails here,
//! so the lists stay complete as modules come and go.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::path::Path;

/// The workspace's crates, as `Cargo.toml` lists them.
const CRATES: [&str; 8] = [
    "protocol",
    "tls",
    "client",
    "shim",
    "controller",
    "forward",
    "bench",
    "test-support",
];

/// The `//!` lines of the `# Layout` section of `src`, up to the next heading.
fn layout(src: &str) -> String {
    let docs = src.lines().map_while(|l| l.strip_prefix("//!"));
    let mut section = String::new();
    let mut inside = false;
    for line in docs {
        let line = line.trim();
        if line.starts_with('#') {
            inside = line == "# Layout";
            continue;
        }
        if inside {
            section.push_str(line);
            section.push('\n');
        }
    }
    section
}

/// The modules `src` declares at its top level (`mod x;`, `pub mod x;`, `pub(crate) mod x;`),
/// test modules left out.
fn modules(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut test_next = false;
    for line in src.lines() {
        if line.starts_with("#[cfg(test)]") {
            test_next = true;
            continue;
        }
        let decl = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';'))
            && !test_next
        {
            out.push(name.to_owned());
        }
        test_next = false;
    }
    out
}

/// The modules of `src` its Layout section does not name (as `` `name` ``, `` [`name`] `` or
/// `` `name/` ``).
fn unnamed(src: &str) -> Vec<String> {
    let section = layout(src);
    modules(src)
        .into_iter()
        .filter(|m| {
            !section.contains(&format!("`{m}`"))
                && !section.contains(&format!("`{m}/`"))
                && !section.contains(&format!("[`{m}`]"))
        })
        .collect()
}

#[test]
fn every_module_is_in_its_crates_layout_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut missing = Vec::new();
    for krate in CRATES {
        let lib = root.join(krate).join("src/lib.rs");
        let src = std::fs::read_to_string(&lib).unwrap();
        assert!(
            !layout(&src).is_empty(),
            "{} has no `//! # Layout`",
            lib.display()
        );
        for m in unnamed(&src) {
            missing.push(format!("{krate}: {m}"));
        }
    }
    assert!(
        missing.is_empty(),
        "modules missing from their crate's Layout list: {missing:?}"
    );
}

#[test]
fn a_module_left_out_of_the_list_is_found() {
    let src = "//! # Layout\n//! - `a`: one.\n//! - [`b`]: two.\n//!\n//! # Other\n//! `c`\n\nmod a;\npub mod b;\npub(crate) mod c;\n#[cfg(test)]\nmod tests;\n";
    assert_eq!(unnamed(src), ["c"]);
}
