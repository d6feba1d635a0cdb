//! The guard against hand-made streams: it must stop a huge extension header after reading its
//! 512-byte header, follow pax `size` overrides exactly as the `tar` crate does, and pass a normal
//! stream through unchanged.
#![allow(
    clippy::unwrap_used,
    reason = "a test should fail loudly where its setup breaks"
)]

use std::io::{self, Read};

use tar::{EntryType, Header};

use super::{Exceeded, Guard, Limits};

const LIMITS: Limits = Limits {
    max_bytes: 1 << 20,
    max_header_bytes: 4096,
    direct_min: 8 << 20,
};

/// A reader yielding `prefix`, then zeros forever, counting what was read.
struct Endless {
    prefix: Vec<u8>,
    at: usize,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len();
        for b in buf.iter_mut() {
            *b = self.prefix.get(self.at).copied().unwrap_or(0);
            self.at += 1;
        }
        Ok(n)
    }
}

fn header(kind: EntryType, name: &str, size: u64) -> Vec<u8> {
    let mut h = Header::new_gnu();
    h.set_path(name).unwrap();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_cksum();
    h.as_bytes().to_vec()
}

/// Drains a guarded stream through the `tar` crate; returns the error and the guard.
fn drain(stream: impl Read) -> (io::Result<()>, Guard<impl Read>) {
    let mut guard = Guard::new(stream, LIMITS);
    let result = (|| {
        let mut archive = tar::Archive::new(&mut guard);
        for entry in archive.entries()? {
            io::copy(&mut entry?, &mut io::sink())?;
        }
        Ok(())
    })();
    (result, guard)
}

#[test]
fn huge_long_names_and_pax_headers_stop_at_their_header() {
    for (kind, what) in [
        (EntryType::GNULongName, "GNU long name"),
        (EntryType::GNULongLink, "GNU long link"),
        (EntryType::XHeader, "pax header"),
    ] {
        let endless = Endless {
            prefix: header(kind, "././@LongLink", 1 << 40),
            at: 0,
        };
        let (result, guard) = drain(endless);
        assert!(result.is_err());
        assert_eq!(guard.exceeded, Some(Exceeded::Header(what, 1 << 40)));
        assert!(guard.total <= 64 * 1024, "read {} bytes", guard.total);
    }
}

#[test]
fn the_stream_cap_counts_every_byte() {
    let endless = Endless {
        prefix: header(EntryType::Regular, "big", 1 << 40),
        at: 0,
    };
    let (result, guard) = drain(endless);
    assert!(result.is_err());
    assert_eq!(guard.exceeded, Some(Exceeded::Stream(LIMITS.max_bytes)));
}

#[test]
fn a_pax_size_override_is_followed_like_the_tar_crate_does() {
    // A pax header says the next member has 1024 bytes though its header says 0; those bytes look
    // like a huge long-name header, which the guard must treat as contents, not a header.
    let mut s = Vec::new();
    let record = b"13 size=1024\n";
    s.extend(header(EntryType::XHeader, "pax", record.len() as u64));
    s.extend(record);
    s.resize(1024, 0);
    s.extend(header(EntryType::Regular, "f", 0));
    s.extend(header(EntryType::GNULongName, "././@LongLink", 1 << 40));
    s.resize(s.len() + 512, 0);
    // Then a real long name over the cap: found.
    s.extend(header(EntryType::GNULongName, "././@LongLink", 5000));
    s.resize(s.len() + 8192, 0);
    let (result, guard) = drain(&s[..]);
    assert!(result.is_err());
    assert_eq!(
        guard.exceeded,
        Some(Exceeded::Header("GNU long name", 5000))
    );
}

#[test]
fn a_normal_stream_passes_unchanged() {
    let mut b = tar::Builder::new(Vec::new());
    let long = "d/".repeat(200) + "file";
    let mut h = Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o644);
    b.append_data(&mut h, &long, &b"abc"[..]).unwrap();
    let tar = b.into_inner().unwrap();
    let mut guard = Guard::new(&tar[..], LIMITS);
    let mut names = Vec::new();
    for entry in tar::Archive::new(&mut guard).entries().unwrap() {
        let mut entry = entry.unwrap();
        names.push(entry.path_bytes().into_owned());
        io::copy(&mut entry, &mut io::sink()).unwrap();
    }
    assert_eq!(names, [long.into_bytes()]);
    assert!(guard.exceeded.is_none());
    assert!(!guard.hit_end, "stopped at the end marker");
}

#[test]
fn a_long_chain_of_sparse_extension_blocks_is_refused() {
    let mut h = Header::new_gnu();
    h.set_path("sparse").unwrap();
    h.set_entry_type(EntryType::GNUSparse);
    h.set_size(0);
    h.as_gnu_mut().unwrap().isextended[0] = 1;
    h.set_cksum();
    let mut s = h.as_bytes().to_vec();
    let mut ext = [0u8; 512];
    ext[504] = 1; // another extension block follows
    for _ in 0..100 {
        s.extend(ext);
    }
    let (result, guard) = drain(&s[..]);
    assert!(result.is_err());
    assert!(
        matches!(guard.exceeded, Some(Exceeded::Header("GNU sparse map", _))),
        "{:?}",
        guard.exceeded
    );
}
