//! The byte stream of an archive (`files/pack.rs`): counts every byte, writes only those at or past
//! the offset a request resumes from, reads a file's contents from where that offset falls in it,
//! and hashes everything but file contents into the tree's [`Validator`] (PROTOCOL.md 4.8.1); the
//! GNU header of an entry is filled here too.

use std::fs::File;
use std::io::{self, ErrorKind, Read, Seek, SeekFrom, Write};

use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

use crate::sys::fs::Stat;

use super::FilesError;

/// Bytes of a tar block.
const BLOCK: u64 = 512;

/// What identifies one tree's stream: its length in bytes and its ETag (quoted, as sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Validator {
    /// Bytes of the whole stream, end-of-archive marker included.
    pub(crate) len: u64,
    /// `"` + 32 hex digits + `"`.
    pub(crate) etag: String,
}

/// Where the stream goes: counts every byte, writes those at or past `skip`, and hashes all but
/// file contents into the ETag.
pub(crate) struct Sink<'w> {
    pub(crate) inner: &'w mut dyn Write,
    pos: u64,
    skip: u64,
    /// No file is opened: only the validator is wanted.
    pub(crate) dry: bool,
    /// Closed on failure so that nothing, the end marker included, follows a partial entry.
    pub(crate) open: bool,
    pub(crate) hash: Sha256,
    buf: Vec<u8>,
}

impl<'w> Sink<'w> {
    /// A sink writing to `inner` what lies at or past byte `skip`; `dry` opens no file.
    pub(crate) fn new(inner: &'w mut dyn Write, skip: u64, dry: bool) -> Self {
        Sink {
            inner,
            pos: 0,
            skip,
            dry,
            open: true,
            hash: Sha256::new(),
            buf: Vec::new(),
        }
    }

    /// Emits `data` (hashed when `meta`), writing what lies past the skip offset.
    pub(crate) fn emit(&mut self, data: &[u8], meta: bool) -> io::Result<()> {
        if !self.open {
            return Err(io::Error::other("the archive was abandoned"));
        }
        if meta {
            self.hash.update(data);
        }
        let len = data.len() as u64;
        if self.pos + len > self.skip && !self.dry {
            let from = usize::try_from(self.skip.saturating_sub(self.pos)).unwrap_or(0);
            self.inner.write_all(&data[from..])?;
        }
        self.pos += len;
        Ok(())
    }

    /// Emits `size` bytes of `file` (read from where the skip offset falls) and the padding.
    pub(crate) fn emit_file(&mut self, file: Option<File>, size: u64) -> io::Result<()> {
        let pad = padding(size);
        match file {
            Some(mut file) if self.pos + size > self.skip => {
                let from = self.skip.saturating_sub(self.pos);
                if from > 0 {
                    file.seek(SeekFrom::Start(from))?;
                }
                self.pos += from;
                let mut data = Exact {
                    inner: file,
                    left: size - from,
                };
                let mut buf = std::mem::take(&mut self.buf);
                buf.resize(64 * 1024, 0);
                let copied = loop {
                    match data.read(&mut buf) {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            if let Err(e) = self.emit(&buf[..n], false) {
                                break Err(e);
                            }
                        }
                        Err(e) => break Err(e),
                    }
                };
                self.buf = buf;
                copied?;
            }
            _ => self.pos += size,
        }
        self.emit(&[0; BLOCK as usize][..pad as usize], false)
    }

    /// The end-of-archive marker: two zero blocks.
    pub(crate) fn end(&mut self) -> Result<(), FilesError> {
        self.emit(&[0; 2 * BLOCK as usize], false)
            .map_err(|e| FilesError::Io {
                context: "finishing the archive".into(),
                source: e,
            })
    }

    /// The validator of the stream as it would end now.
    pub(crate) fn validator_at_end(&self) -> Validator {
        // The end marker is not hashed.
        Validator {
            len: self.pos + 2 * BLOCK,
            etag: etag(self.hash.clone()),
        }
    }

    /// The validator of the stream so far (after [`Sink::end`]: of the whole stream).
    pub(crate) fn validator(&self) -> Validator {
        Validator {
            len: self.pos,
            etag: etag(self.hash.clone()),
        }
    }
}

/// Zeros after `size` bytes of contents up to the next block.
pub(crate) fn padding(size: u64) -> u64 {
    (BLOCK - size % BLOCK) % BLOCK
}

/// The ETag of a hash: its first 16 bytes in hex, quoted.
fn etag(hash: Sha256) -> String {
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Reads exactly `left` bytes of a file: no more if it grew since its size was taken, and an
/// error if it shrank, since the header already promised that size.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "the file shrank while being archived",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A header of type `kind` with the permissions, owner and mtime of `st`, size `size`.
pub(super) fn header(kind: EntryType, st: &Stat, size: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(st.mode);
    header.set_uid(st.uid.into());
    header.set_gid(st.gid.into());
    header.set_mtime(u64::try_from(st.mtime.0).unwrap_or(0));
    header.set_size(size);
    header
}

/// Copies `value` into a header field, truncated to it and padded with NULs.
pub(super) fn fill(field: &mut [u8], value: &[u8]) {
    let n = value.len().min(field.len());
    field[..n].copy_from_slice(&value[..n]);
    field[n..].fill(0);
}
