//! The reply on the wire: one `LogonReply` frame carrying the first
//! `SCM_MAX_FD` descriptors on its first byte, then one 4-byte word per
//! further batch, holding that batch's count, the batch on its first byte.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nodeipc_fdpass::SCM_MAX_FD;
use nodeipc_proto::handshake::LogonReply;

/// Why a reply could not be sent.
#[derive(Debug)]
pub(crate) enum SendError {
    Encode,
    FdPass,
}

/// Sends `reply` with `fds`, in as many batches as `SCM_MAX_FD` needs.
pub(crate) fn send_reply(
    stream: &UnixStream,
    reply: &LogonReply,
    fds: &[BorrowedFd<'_>],
) -> Result<(), SendError> {
    let frame = nodeipc_proto::encode_frame_to_vec(reply).map_err(|_| SendError::Encode)?;
    let (first, rest) = fds.split_at(fds.len().min(SCM_MAX_FD));
    nodeipc_fdpass::send_fds(stream, &frame, first).map_err(|_| SendError::FdPass)?;
    for batch in rest.chunks(SCM_MAX_FD) {
        // A batch is at most SCM_MAX_FD (253) long: it fits a u32.
        let word = (batch.len() as u32).to_le_bytes();
        nodeipc_fdpass::send_fds(stream, &word, batch).map_err(|_| SendError::FdPass)?;
    }
    Ok(())
}

/// The batches `total` descriptors travel in: the first's size, then how
/// many more follow.
pub(crate) fn first_batch(total: usize) -> usize {
    total.min(SCM_MAX_FD)
}

/// Receives one continuation batch of exactly `expected` descriptors.
///
/// Returns the count word and the descriptors (which the caller checks).
pub(crate) fn recv_batch(
    stream: &UnixStream,
    expected: usize,
) -> nodeipc_fdpass::Result<(u32, Vec<OwnedFd>)> {
    let mut word = [0u8; 4];
    let fds = nodeipc_fdpass::recv_fds_exact(stream, &mut word, expected.min(SCM_MAX_FD))?;
    Ok((u32::from_le_bytes(word), fds))
}
