//! The caps of an upload, enforced on the raw stream before the `tar` crate sees it.
//!
//! The `tar` crate reads a GNU long name or link (`L`, `K`) and a pax header (`x`) whole into
//! memory, whatever size its header declares, and keeps every GNU sparse extension block's map in
//! memory too. [`Guard`] sits between the request body and the `tar` crate and follows the stream's
//! structure block by block, with the same parsers the crate uses (the header's size field, the pax
//! `size` record that overrides it, the sparse extension flag), so it knows where every header is.
//! A header declaring an extension larger than `max_header_bytes`, a chain of sparse extension
//! blocks longer than that, or a stream longer than `max_bytes` fails the read *before* the header
//! is handed over: nothing has been allocated for it. The failure is remembered in
//! [`Guard::exceeded`], so the caller answers 413 rather than "corrupt".
//!
//! It also notes whether the stream reached its end: the `tar` crate stops at the first all-zero
//! block without reading further, so reaching the end means the end-of-archive marker was missing.

use std::io::{self, Read};

use tar::{EntryType, GnuExtSparseHeader, Header, PaxExtensions};

use super::FilesError;

/// Size of a tar block.
const BLOCK: u64 = 512;

/// The caps of one upload, and the file size from which its writes bypass the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the tar stream, headers included; also the largest apparent size of one file
    /// (a sparse file's holes count there).
    pub max_bytes: u64,
    /// Bytes of one extension header's contents (GNU long name or link, pax header) and of one
    /// entry's GNU sparse extension blocks.
    pub max_header_bytes: u64,
    /// Files at least this large are written with `O_DIRECT` (`STEPSHIM_FILES_DIRECT_MIN_BYTES`,
    /// see `contents.rs`); 0: never. Their contents go from the buffer to the disk, not copied
    /// into the page cache first. On a VM whose free memory goes back to the host (virtio-balloon
    /// free page reporting, as on this project's cluster node) the page-cache copy faults in fresh
    /// host pages and took half of a pull's CPU (about 2 CPU s per GiB into a pod's overlay, and as
    /// much for GNU `tar -x`; `dd` of 4 GiB there: 4.9 system CPU s, 0.6 with `O_DIRECT`). Smaller
    /// files (a source tree's) stay in the page cache, where the next step reads them; a large
    /// file is read from the disk the first time.
    pub direct_min: u64,
}

/// The documented defaults (`protocol::settings`, as the configuration parses them).
#[cfg(test)]
impl Default for Limits {
    fn default() -> Self {
        crate::Config::defaults().files.limits()
    }
}

/// Which cap a stream went over, for the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exceeded {
    /// The stream is longer than `max_bytes`.
    Stream(u64),
    /// An extension header (named) declares more than `max_header_bytes`.
    Header(&'static str, u64),
}

impl Exceeded {
    /// The error answered for this cap exceeded.
    pub(crate) fn into_error(self, limits: &Limits) -> FilesError {
        FilesError::TooLarge(match self {
            Exceeded::Stream(cap) => format!("the upload is larger than {cap} bytes"),
            Exceeded::Header(what, size) => format!(
                "a {what} of {size} bytes is larger than the {} bytes allowed",
                limits.max_header_bytes
            ),
        })
    }
}

/// Where in the stream the next byte belongs.
#[derive(Debug)]
enum Phase {
    /// Collecting a 512-byte header.
    Header,
    /// Collecting a GNU sparse extension block; `data` is the entry's contents that follow.
    SparseExt { data: u64 },
    /// An entry's contents (`left` bytes, collected when it is a pax header) then `pad` bytes.
    Data { left: u64, pad: u64, pax: bool },
}

/// A reader enforcing [`Limits`] on a tar stream (see the module header).
#[derive(Debug)]
pub(crate) struct Guard<R> {
    inner: R,
    limits: Limits,
    /// Bytes passed through so far.
    total: u64,
    block: [u8; BLOCK as usize],
    filled: usize,
    phase: Phase,
    /// The contents of the pax header being read.
    pax: Vec<u8>,
    /// The `size` of the pending pax header, which the next member's contents have.
    pax_size: Option<u64>,
    /// Bytes of sparse extension blocks of the current entry.
    sparse_ext: u64,
    /// The cap the stream went over, if it did.
    pub(crate) exceeded: Option<Exceeded>,
    /// Whether the inner reader reached its end.
    pub(crate) hit_end: bool,
}

impl<R: Read> Guard<R> {
    /// Guards `inner` with `limits`.
    pub(crate) fn new(inner: R, limits: Limits) -> Self {
        Guard {
            inner,
            limits,
            total: 0,
            block: [0; BLOCK as usize],
            filled: 0,
            phase: Phase::Header,
            pax: Vec::new(),
            pax_size: None,
            sparse_ext: 0,
            exceeded: None,
            hit_end: false,
        }
    }

    /// Follows `bytes` through the stream's structure; an error names the cap exceeded.
    fn follow(&mut self, mut bytes: &[u8]) -> Result<(), Exceeded> {
        while !bytes.is_empty() {
            match &mut self.phase {
                Phase::Data { left, pad, pax } => {
                    let n = (*left + *pad).min(bytes.len() as u64) as usize;
                    let content = (*left).min(n as u64) as usize;
                    if *pax {
                        self.pax.extend_from_slice(&bytes[..content]);
                    }
                    *left -= content as u64;
                    *pad -= (n - content) as u64;
                    bytes = &bytes[n..];
                    if *left == 0 && *pad == 0 {
                        if *pax {
                            self.pax_size = pax_size(&self.pax);
                            self.pax = Vec::new();
                        }
                        self.phase = Phase::Header;
                    }
                }
                Phase::Header | Phase::SparseExt { .. } => {
                    let n = (self.block.len() - self.filled).min(bytes.len());
                    self.block[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
                    self.filled += n;
                    bytes = &bytes[n..];
                    if self.filled == self.block.len() {
                        self.filled = 0;
                        self.block_done()?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A whole block was collected in the header or sparse extension phase.
    fn block_done(&mut self) -> Result<(), Exceeded> {
        if let Phase::SparseExt { data } = self.phase {
            self.sparse_ext += BLOCK;
            if self.sparse_ext > self.limits.max_header_bytes {
                return Err(Exceeded::Header("GNU sparse map", self.sparse_ext));
            }
            let mut ext = GnuExtSparseHeader::new();
            ext.as_mut_bytes().copy_from_slice(&self.block);
            if !ext.is_extended() {
                self.phase = data_phase(data, false);
            }
            return Ok(());
        }
        if self.block.iter().all(|b| *b == 0) {
            return Ok(()); // end-of-archive marker (or padding): the tar crate stops here
        }
        let header = Header::from_byte_slice(&self.block);
        let kind = header.entry_type();
        // An unreadable size: the tar crate refuses the header, so the stream ends here.
        let Ok(declared) = header.entry_size() else {
            return Ok(());
        };
        let extension = match kind {
            EntryType::GNULongName => Some("GNU long name"),
            EntryType::GNULongLink => Some("GNU long link"),
            EntryType::XHeader => Some("pax header"),
            EntryType::XGlobalHeader => Some("pax global header"),
            _ => None,
        };
        let recognized = header.as_gnu().is_some() || header.as_ustar().is_some();
        if let Some(what) = extension {
            if declared > self.limits.max_header_bytes {
                return Err(Exceeded::Header(what, declared));
            }
            let pax = kind == EntryType::XHeader && recognized;
            let consumed_by_crate = pax
                || (recognized && matches!(kind, EntryType::GNULongName | EntryType::GNULongLink));
            if !consumed_by_crate {
                // Handed to the caller as a member, which consumes a pending pax header.
                self.pax_size = None;
            }
            self.phase = data_phase(declared, pax);
            return Ok(());
        }
        // A member: a pending pax `size` overrides its header's, then is used up.
        let size = self.pax_size.take().unwrap_or(declared);
        self.sparse_ext = 0;
        let extended =
            kind == EntryType::GNUSparse && header.as_gnu().is_some_and(|gnu| gnu.is_extended());
        self.phase = if extended {
            Phase::SparseExt { data: size }
        } else {
            data_phase(size, false)
        };
        Ok(())
    }
}

/// The phase for `size` bytes of contents padded to a block.
fn data_phase(size: u64, pax: bool) -> Phase {
    let pad = (BLOCK - size % BLOCK) % BLOCK;
    if size == 0 {
        return Phase::Header;
    }
    Phase::Data {
        left: size,
        pad,
        pax,
    }
}

/// The `size` record of a pax header, read exactly as the `tar` crate reads it: the first record
/// named `size`, given up on at the first malformed record before it.
fn pax_size(data: &[u8]) -> Option<u64> {
    for record in PaxExtensions::new(data) {
        let record = record.ok()?;
        if record.key() != Ok("size") {
            continue;
        }
        return record.value().ok()?.parse().ok();
    }
    None
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // The error itself says nothing: `extract_with` answers from `exceeded`.
        let refused = || io::Error::from(io::ErrorKind::FileTooLarge);
        if self.exceeded.is_some() {
            return Err(refused());
        }
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.hit_end = true;
        }
        self.total += n as u64;
        let checked = if self.total > self.limits.max_bytes {
            Err(Exceeded::Stream(self.limits.max_bytes))
        } else {
            self.follow(&buf[..n])
        };
        match checked {
            Ok(()) => Ok(n),
            Err(exceeded) => {
                self.exceeded = Some(exceeded);
                Err(refused())
            }
        }
    }
}

#[cfg(test)]
mod tests;
