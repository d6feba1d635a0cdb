//! The output log's frame format and codec.
//!
//! A frame is an 8-byte header (type u8, flags u8, reserved u16 = 0, payload length u32 big-endian)
//! followed by the payload. The log of a process is a concatenation of frames; an offset into the log is
//! valid only at a frame boundary. [`Decoder`] consumes an arbitrary split of such a byte stream and
//! yields whole frames, keeping the log offset of the next frame so a client can resume after losing its
//! connection.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use thiserror::Error;

/// Length of a frame header in bytes.
pub const HEADER_LEN: usize = 8;

/// Largest payload the shim ever writes in one frame. Decoders refuse larger lengths, so a corrupt or
/// hostile stream cannot make a client allocate gigabytes.
pub const MAX_PAYLOAD: u32 = 1 << 20;

/// The type byte of a frame. Unknown types are carried through as [`FrameType::Unknown`] so clients can
/// skip them, as the protocol requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    /// Never stored in the log; sent on an idle follow so proxies and clients see the stream is alive.
    Keepalive,
    /// Bytes the process wrote to stdout (or to its terminal, with a tty).
    Stdout,
    /// Bytes the process wrote to stderr.
    Stderr,
    /// The JSON [`crate::types::Exit`] of the process; always the last frame of a log.
    Exit,
    /// A type this version does not know.
    Unknown(u8),
}

impl FrameType {
    /// The wire value of the type.
    pub fn to_u8(self) -> u8 {
        match self {
            FrameType::Keepalive => 0,
            FrameType::Stdout => 1,
            FrameType::Stderr => 2,
            FrameType::Exit => 3,
            FrameType::Unknown(v) => v,
        }
    }

    /// The type for a wire value.
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => FrameType::Keepalive,
            1 => FrameType::Stdout,
            2 => FrameType::Stderr,
            3 => FrameType::Exit,
            other => FrameType::Unknown(other),
        }
    }
}

/// The whole keepalive frame (kind 0, no payload) a follow sends while idle. It is never stored in a
/// log, so it does not move the offset; decoders yield it and clients skip it.
pub const KEEPALIVE_FRAME: [u8; HEADER_LEN] = [0; HEADER_LEN];

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the payload is.
    pub kind: FrameType,
    /// Reserved for future use; version 1 writes 0 and readers ignore it.
    pub flags: u8,
    /// Payload length in bytes.
    pub len: u32,
}

impl FrameHeader {
    /// Encodes the header into its 8 wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let l = self.len.to_be_bytes();
        [self.kind.to_u8(), self.flags, 0, 0, l[0], l[1], l[2], l[3]]
    }

    /// Decodes 8 header bytes, refusing lengths over [`MAX_PAYLOAD`].
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, FrameError> {
        let len = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        if len > MAX_PAYLOAD {
            return Err(FrameError::TooLong { len });
        }
        Ok(FrameHeader {
            kind: FrameType::from_u8(b[0]),
            flags: b[1],
            len,
        })
    }

    /// Size of the whole frame (header plus payload) in the log.
    pub fn frame_len(&self) -> u64 {
        HEADER_LEN as u64 + u64::from(self.len)
    }
}

/// Errors from decoding a frame stream.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    /// A header announced a payload longer than [`MAX_PAYLOAD`]: the stream is corrupt or not a log.
    #[error("frame payload length {len} exceeds the maximum of {MAX_PAYLOAD}")]
    TooLong {
        /// The announced length.
        len: u32,
    },
    /// The stream ended inside a frame.
    #[error("stream ended {missing} bytes short of a whole frame")]
    Truncated {
        /// Bytes still missing for the frame in progress.
        missing: usize,
    },
}

/// One whole frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What the payload is.
    pub kind: FrameType,
    /// Reserved flags byte.
    pub flags: u8,
    /// The payload (a slice of the received bytes when it arrived in one piece).
    pub payload: Bytes,
}

impl Frame {
    /// A frame of the given type and payload, with no flags.
    pub fn new(kind: FrameType, payload: impl Into<Bytes>) -> Self {
        Frame {
            kind,
            flags: 0,
            payload: payload.into(),
        }
    }

    /// The frame header of this frame. Panics never: payloads over `u32::MAX` are impossible here
    /// because callers build frames from bounded reads; the length saturates defensively.
    pub fn header(&self) -> FrameHeader {
        let len = u32::try_from(self.payload.len()).unwrap_or(u32::MAX);
        FrameHeader {
            kind: self.kind,
            flags: self.flags,
            len,
        }
    }

    /// Appends the encoded frame to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.header().encode());
        out.extend_from_slice(&self.payload);
    }

    /// The encoded frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + self.payload.len());
        self.encode_into(&mut v);
        v
    }
}

/// Incremental decoder of a frame stream that starts at log offset `start`.
///
/// Feed it bytes as they arrive with [`Decoder::push_bytes`] (or [`Decoder::push`] for borrowed
/// bytes) and take frames with [`Decoder::next_frame`]. [`Decoder::offset`] is the log offset just
/// past the last frame taken: the offset to resume from. Keepalive frames are yielded too (callers
/// usually skip them) but never advance the offset, because they are not part of the log.
///
/// Received chunks are kept as they came: [`Decoder::next_frame_parts`] hands a payload out as slices
/// of them, never copied; [`Decoder::next_frame`] copies only a payload split across chunks.
#[derive(Debug, Default)]
pub struct Decoder {
    chunks: VecDeque<Bytes>,
    pending: usize,
    offset: u64,
}

impl Decoder {
    /// A decoder for a stream that begins at log offset `start`.
    pub fn new(start: u64) -> Self {
        Decoder {
            chunks: VecDeque::new(),
            pending: 0,
            offset: start,
        }
    }

    /// The log offset just past the last whole frame returned.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Appends received bytes (copied once).
    pub fn push(&mut self, bytes: &[u8]) {
        self.push_bytes(Bytes::copy_from_slice(bytes));
    }

    /// Appends a received chunk without copying it.
    pub fn push_bytes(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.pending += bytes.len();
            self.chunks.push_back(bytes);
        }
    }

    /// Bytes received but not yet returned as a frame.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// The header at the front, if all 8 bytes are here.
    fn peek_header(&self) -> Option<[u8; HEADER_LEN]> {
        if self.pending < HEADER_LEN {
            return None;
        }
        let mut head = [0u8; HEADER_LEN];
        let mut filled = 0;
        for chunk in &self.chunks {
            let n = chunk.len().min(HEADER_LEN - filled);
            head[filled..filled + n].copy_from_slice(&chunk[..n]);
            filled += n;
            if filled == HEADER_LEN {
                break;
            }
        }
        Some(head)
    }

    /// Removes the first `n` pending bytes (`n <= pending`) and appends them to `parts` as slices
    /// of the received chunks, one per chunk they span: nothing is copied.
    fn take_parts(&mut self, n: usize, parts: &mut Vec<Bytes>) {
        self.take_into(n, Some(parts));
    }

    /// Removes the first `n` pending bytes, appending them to `parts` when given.
    fn take_into(&mut self, mut n: usize, mut parts: Option<&mut Vec<Bytes>>) {
        self.pending -= n;
        // Bounded: every pass takes at least one byte or stops.
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let k = front.len().min(n);
            let part = front.split_to(k);
            if let Some(parts) = parts.as_deref_mut() {
                parts.push(part);
            }
            if front.is_empty() {
                self.chunks.pop_front();
            }
            n -= k;
        }
    }

    /// The next whole frame with its payload appended to `parts` as it was received: one slice per
    /// received chunk it spans, never copied (an empty payload appends nothing). `Ok(None)` if more
    /// bytes are needed. Like [`Decoder::next_frame`], it moves the offset only past whole frames.
    pub fn next_frame_parts(
        &mut self,
        parts: &mut Vec<Bytes>,
    ) -> Result<Option<FrameHeader>, FrameError> {
        let Some(head) = self.peek_header() else {
            return Ok(None);
        };
        let header = FrameHeader::decode(&head)?;
        let total = HEADER_LEN + header.len as usize;
        if self.pending < total {
            return Ok(None);
        }
        self.take_into(HEADER_LEN, None);
        self.take_parts(header.len as usize, parts);
        if header.kind != FrameType::Keepalive {
            self.offset += total as u64;
        }
        Ok(Some(header))
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed. Its payload is a slice of the
    /// received bytes when it arrived in one chunk, else gathered into a new buffer (see
    /// [`Decoder::next_frame_parts`] to avoid that copy).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let mut parts = Vec::new();
        let Some(header) = self.next_frame_parts(&mut parts)? else {
            return Ok(None);
        };
        Ok(Some(Frame {
            kind: header.kind,
            flags: header.flags,
            payload: concat(parts),
        }))
    }

    /// Call at end of stream: an error if a frame was cut short.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.pending {
            0 => Ok(()),
            n if n < HEADER_LEN => Err(FrameError::Truncated {
                missing: HEADER_LEN - n,
            }),
            n => {
                let head = self.peek_header().unwrap_or_default();
                let header = FrameHeader::decode(&head)?;
                Err(FrameError::Truncated {
                    missing: header.frame_len() as usize - n,
                })
            }
        }
    }
}

/// One buffer of `parts`: the part itself when there is one, else a copy of them all.
pub fn concat(mut parts: Vec<Bytes>) -> Bytes {
    if parts.len() <= 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut out = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
    for p in &parts {
        out.extend_from_slice(p);
    }
    out.freeze()
}

#[cfg(test)]
mod tests;
