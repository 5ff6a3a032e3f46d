//! The worker side of every channel implementation: a peer process that
//! answers the rounds it was told, then exits.

use std::io;
use std::os::fd::OwnedFd;

use nodeipc_channel::{Raw, Worker};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ForwardResponse, execute_request, execute_response,
};
use nodeipc_shm::Region;
use prost::Message;

use super::{ChannelImpl, GlibcLayout, TIMEOUT, digest, read_glibc_frame};
use crate::bench::glibc_sem::GlibcSemaphore;
use crate::bench::peer;

/// What every worker answers: the sequence and the payload's length.
fn response(request: &ExecuteRequest) -> ExecuteResponse {
    let len = match &request.payload {
        Some(execute_request::Payload::Forward(f)) => f.input.len(),
        _ => 0,
    };
    ExecuteResponse {
        msg_type: request.execute_type,
        sequence: request.sequence,
        result: Some(execute_response::Result::Forward(ForwardResponse {
            output: (len as u32).to_le_bytes().to_vec().into(),
        })),
        ..ExecuteResponse::default()
    }
}

/// A worker: `chan-worker IMPL TAG RANK ROUNDS FDS…`. Answers `ROUNDS` requests
/// plus the warm-up, then exits.
pub(crate) fn peer_main(args: &[&str]) -> io::Result<()> {
    let [which, tag, rank, rounds, rest @ ..] = args else {
        return Err(io::Error::other(format!(
            "bad channel worker arguments {args:?}"
        )));
    };
    let which = ChannelImpl::parse(which)?;
    let rank: u32 = rank.parse().map_err(io::Error::other)?;
    let rounds: u64 = rounds.parse().map_err(io::Error::other)?;
    match (which, rest) {
        (
            ChannelImpl::Nodeipc
            | ChannelImpl::NodeipcNamed
            | ChannelImpl::NodeipcInPlace
            | ChannelImpl::NodeipcInPlacePoll
            | ChannelImpl::NodeipcResponseThread
            | ChannelImpl::CppResponseThread
            | ChannelImpl::CppLockstep,
            [request_arg, response_arg],
        ) => {
            // SAFETY: both descriptors were passed down for our sole use.
            let request_fd: OwnedFd = unsafe { peer::inherited(request_arg)? };
            // SAFETY: as above.
            let response_fd: OwnedFd = unsafe { peer::inherited(response_arg)? };
            if which.in_place() {
                let mut worker: Worker<Raw, Raw> =
                    Worker::from_fds(tag, rank, request_fd, response_fd, TIMEOUT)?;
                worker.set_poll(which.poll());
                for _ in 0..rounds {
                    let request = worker.recv_in_place()?;
                    let answer = digest(request.bytes()).to_le_bytes();
                    request.respond(&answer)?;
                }
            } else {
                let mut worker: Worker =
                    Worker::from_fds(tag, rank, request_fd, response_fd, TIMEOUT)?;
                worker.set_poll(which.poll());
                let mut request = ExecuteRequest::default();
                for _ in 0..rounds {
                    worker.recv_into(&mut request)?;
                    worker.respond(&response(&request))?;
                }
            }
        }
        (ChannelImpl::GlibcLockstep, [region, request_bytes, response_bytes]) => {
            // SAFETY: the region's descriptor was passed down for our sole use.
            let region = Region::from_fd(unsafe { peer::inherited(region)? })?;
            let layout = GlibcLayout {
                request_bytes: request_bytes.parse().map_err(io::Error::other)?,
                response_bytes: response_bytes.parse().map_err(io::Error::other)?,
            };
            let request_sem = GlibcSemaphore::open_wait(&format!("{tag}-req-{rank}"), TIMEOUT)?;
            let response_sem = GlibcSemaphore::open_wait(&format!("{tag}-resp-{rank}"), TIMEOUT)?;
            request_sem.wait()?; // the ready handshake
            response_sem.post()?;
            let at = layout.response_at(rank);
            for _ in 0..rounds {
                request_sem.wait()?;
                let request: ExecuteRequest = read_glibc_frame(&region, 0, layout.request_bytes)?;
                let frame = response(&request).encode_to_vec();
                region.write_at(at, &(frame.len() as u32).to_le_bytes())?;
                region.write_at(at + 4, &frame)?;
                response_sem.post()?;
            }
        }
        (ChannelImpl::UnixSocket, [socket]) => {
            // SAFETY: the socket was passed down for our sole use.
            let mut socket =
                std::os::unix::net::UnixStream::from(unsafe { peer::inherited(socket)? });
            let mut scratch = Vec::new();
            for _ in 0..rounds {
                let request: ExecuteRequest =
                    nodeipc_proto::read_frame(&mut socket, 1 << 30, &mut scratch)
                        .map_err(io::Error::from)?;
                nodeipc_proto::write_frame(&mut socket, &response(&request))
                    .map_err(io::Error::from)?;
            }
        }
        _ => {
            return Err(io::Error::other(format!(
                "bad channel worker arguments {args:?}"
            )));
        }
    }
    Ok(())
}
