//! The one error type of this crate.

use std::io;

/// What can go wrong while framing, unframing or moving a frame.
///
/// Every size counts whole frames, the 4-byte length prefix included, so a
/// message read in a log compares like with like.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A frame is larger than the room for it: the caller's buffer when
    /// encoding, the caller's maximum when decoding or reading, or the
    /// 4 GiB a `u32` length can describe.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Size of the frame, prefix included.
        size: usize,
        /// The largest frame allowed here.
        max: usize,
    },

    /// The bytes end before the frame does: fewer than the 4 bytes of the
    /// prefix, or fewer than the length the prefix announces.
    #[error("truncated frame: {need} bytes needed, only {have} available")]
    Truncated {
        /// Bytes the frame needs, prefix included.
        need: usize,
        /// Bytes there were.
        have: usize,
    },

    /// The frame's bytes are not a valid encoding of the expected message.
    #[error("frame holds no valid message: {0}")]
    Decode(#[from] prost::DecodeError),

    /// Reading or writing the stream failed.
    #[error("frame i/o failed: {0}")]
    Io(#[from] io::Error),

    /// The stream ended cleanly before the first byte of a frame: the peer
    /// closed the connection between messages.
    #[error("connection closed by the peer before the next frame")]
    Closed,
}

impl From<Error> for io::Error {
    /// Keeps an I/O error as it is (errno included); every other error
    /// becomes an `io::Error` of the closest kind that wraps it (`UnexpectedEof`
    /// for `Truncated` and `Closed`, `InvalidData` otherwise).
    fn from(error: Error) -> io::Error {
        match error {
            Error::Io(source) => source,
            other => {
                let kind = match &other {
                    Error::Truncated { .. } | Error::Closed => io::ErrorKind::UnexpectedEof,
                    _ => io::ErrorKind::InvalidData,
                };
                io::Error::new(kind, other)
            }
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
