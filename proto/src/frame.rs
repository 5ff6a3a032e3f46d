//! Length-prefixed framing: a `u32` little-endian length, then exactly that
//! many bytes of one encoded message.
//!
//! Slice functions ([`encode_frame`], [`decode_frame`], [`frame_len`]) work in
//! place on a buffer such as a shared-memory slot; stream functions
//! ([`write_frame`], [`read_frame`]) move one frame over a socket.

use std::io::{self, Read, Write};

use prost::Message;

use crate::schema::check_wire_types;
use crate::{Error, KnownMessage, Result};

/// Bytes of the length prefix that starts every frame.
pub const LEN_PREFIX: usize = 4;

/// Most `read_frame` reserves for a message before its bytes arrive: beyond
/// this, `scratch` grows with the bytes actually received, so a peer that
/// announces a large frame and sends nothing costs no large allocation.
const READ_RESERVE: usize = 64 * 1024;

/// The largest message a `u32` prefix can announce.
const MAX_BODY: u64 = u32::MAX as u64;

/// Size of the frame holding a message of `body` bytes (saturating, so an
/// absurd length compares as too large instead of wrapping).
fn frame_size(body: usize) -> usize {
    body.saturating_add(LEN_PREFIX)
}

/// The largest frame a `u32` prefix allows, as a `usize` (saturating on
/// targets where it does not fit).
fn max_frame() -> usize {
    usize::try_from(MAX_BODY).map_or(usize::MAX, frame_size)
}

/// The prefix announcing a message of `body` bytes; `TooLarge` when the
/// length does not fit in a `u32`.
fn prefix_for(body: usize) -> Result<[u8; LEN_PREFIX]> {
    u32::try_from(body)
        .map(u32::to_le_bytes)
        .map_err(|_| Error::TooLarge {
            size: frame_size(body),
            max: max_frame(),
        })
}

/// The frame size a prefix announces, refused when above `max`.
fn announced_size(prefix: [u8; LEN_PREFIX], max: usize) -> Result<usize> {
    let body = usize::try_from(u32::from_le_bytes(prefix)).unwrap_or(usize::MAX);
    let size = frame_size(body);
    if size > max {
        return Err(Error::TooLarge { size, max });
    }
    Ok(size)
}

/// Encodes `msg` as one frame at the start of `out`, without allocating, and
/// returns the frame's size in bytes (prefix included). Bytes of `out` past
/// the frame are left untouched.
///
/// # Errors
///
/// [`Error::TooLarge`] when the frame does not fit in `out` (`size` is the
/// frame's size, `max` the length of `out`) or when the message is longer
/// than a `u32` length can announce. Nothing is written to `out` then.
pub fn encode_frame<M: Message>(msg: &M, out: &mut [u8]) -> Result<usize> {
    let body = msg.encoded_len();
    let size = frame_size(body);
    if size > out.len() {
        return Err(Error::TooLarge {
            size,
            max: out.len(),
        });
    }
    let prefix = prefix_for(body)?;
    let (head, rest) = out.split_at_mut(LEN_PREFIX);
    let mut body_buf = &mut rest[..body];
    // `encode` checks the room before writing anything; the room is exactly
    // `encoded_len`, so this cannot fail, but a wrong length must not panic.
    msg.encode(&mut body_buf).map_err(|error| Error::TooLarge {
        size: frame_size(error.required_capacity()),
        max: size,
    })?;
    head.copy_from_slice(&prefix);
    Ok(size)
}

/// Encodes `msg` as one frame in a new `Vec` of exactly the frame's size.
///
/// # Errors
///
/// [`Error::TooLarge`] when the message is longer than a `u32` length can
/// announce; nothing is allocated then.
pub fn encode_frame_to_vec<M: Message>(msg: &M) -> Result<Vec<u8>> {
    let body = msg.encoded_len();
    let prefix = prefix_for(body)?;
    let mut frame = Vec::with_capacity(frame_size(body));
    frame.extend_from_slice(&prefix);
    // A `Vec` grows as needed: this cannot fail.
    msg.encode(&mut frame).map_err(|error| Error::TooLarge {
        size: frame_size(error.required_capacity()),
        max: frame_size(body),
    })?;
    Ok(frame)
}

/// Reads the prefix at the start of `buf` and returns the size of the frame
/// it announces (prefix included), after checking it against `max` and
/// against `buf`. Nothing past the prefix is read.
///
/// # Errors
///
/// [`Error::Truncated`] when `buf` holds fewer than [`LEN_PREFIX`] bytes or
/// fewer than the frame's size; [`Error::TooLarge`] when the frame's size is
/// above `max` (checked first).
pub fn frame_len(buf: &[u8], max: usize) -> Result<usize> {
    let prefix = buf.first_chunk::<LEN_PREFIX>().ok_or(Error::Truncated {
        need: LEN_PREFIX,
        have: buf.len(),
    })?;
    let size = announced_size(*prefix, max)?;
    if size > buf.len() {
        return Err(Error::Truncated {
            need: size,
            have: buf.len(),
        });
    }
    Ok(size)
}

/// Decodes the frame at the start of `buf`, a frame of at most `max` bytes
/// (prefix included). The announced length is checked against `max` and
/// against `buf` before any byte of the message is read; bytes of `buf` past
/// the frame are ignored.
///
/// # Errors
///
/// [`Error::TooLarge`] and [`Error::Truncated`] as for [`frame_len`];
/// [`Error::Decode`] when the message's bytes are not a valid `M` (as for
/// [`decode_message`]).
pub fn decode_frame<M: KnownMessage>(buf: &[u8], max: usize) -> Result<M> {
    let size = frame_len(buf, max)?;
    decode_message(&buf[LEN_PREFIX..size])
}

/// Decodes one message (no length prefix): prost's decoding, after a check
/// of the wire type of every field against the schema where prost makes
/// none (map fields), so that a fault inside a field always comes back
/// naming the message and the field (`Message.field: ...`, innermost first),
/// and a map field on a wrong wire type is refused, as every other field is,
/// instead of throwing the reader out of step with the rest of the message.
///
/// # Errors
///
/// [`Error::Decode`] when the bytes are not a valid `M`.
pub fn decode_message<M: KnownMessage>(body: &[u8]) -> Result<M> {
    check_wire_types::<M>(body)?;
    Ok(M::decode(body)?)
}

/// Writes `msg` to `w` as one frame: the frame is built in one buffer and
/// written with a single `write_all`, so a peer never sees a prefix without
/// its message because of this function. A buffered writer is not flushed.
///
/// # Errors
///
/// [`Error::TooLarge`] when the message is longer than a `u32` length can
/// announce (nothing written); [`Error::Io`] when writing fails, in which
/// case part of the frame may have been written and the stream is no longer
/// usable.
pub fn write_frame<M: Message>(w: &mut impl Write, msg: &M) -> Result<()> {
    let frame = encode_frame_to_vec(msg)?;
    w.write_all(&frame)?;
    Ok(())
}

/// Reads one frame of at most `max` bytes (prefix included) from `r` and
/// decodes it. The announced length is refused when above `max` before
/// anything is allocated; the message's bytes are read into `scratch`, whose
/// allocation is reused from one call to the next. Past the first 64 KiB,
/// `scratch` grows only as the bytes arrive, never on the prefix's word
/// alone.
///
/// # Errors
///
/// - [`Error::Closed`]: the stream ended cleanly before the first byte.
/// - [`Error::Truncated`]: the stream ended inside the frame (`need` is the
///   frame's size, or [`LEN_PREFIX`] inside the prefix; `have` what arrived).
/// - [`Error::TooLarge`]: the announced frame is above `max`.
/// - [`Error::Decode`]: the message's bytes are not a valid `M` (as for
///   [`decode_message`]).
/// - [`Error::Io`]: reading failed (including a read timeout).
///
/// After any error but `Decode` the stream is out of step with the frames and
/// should be closed.
pub fn read_frame<M: KnownMessage>(
    r: &mut impl Read,
    max: usize,
    scratch: &mut Vec<u8>,
) -> Result<M> {
    let mut prefix = [0; LEN_PREFIX];
    match read_full(r, &mut prefix)? {
        0 => return Err(Error::Closed),
        LEN_PREFIX => {}
        have => {
            return Err(Error::Truncated {
                need: LEN_PREFIX,
                have,
            });
        }
    }
    let size = announced_size(prefix, max)?;
    let body = size - LEN_PREFIX;
    scratch.clear();
    scratch.reserve(body.min(READ_RESERVE));
    let got = r.take(body as u64).read_to_end(scratch)?;
    if got < body {
        return Err(Error::Truncated {
            need: size,
            have: LEN_PREFIX + got,
        });
    }
    decode_message(scratch.as_slice())
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(got)
}
