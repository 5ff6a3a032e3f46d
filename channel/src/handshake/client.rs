//! The client's side of the handshake.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use nodeipc_fdpass::Credentials;
use nodeipc_proto::handshake::{Accept, FdKind, Logon, PROTOCOL_VERSION};

use super::{MAX_PASSED_FDS, MAX_REPLY};
use crate::payload::Payload;
use crate::{Error, Result, Worker};

/// An accepted logon: what the server said, and the descriptors it passed,
/// each with the kind `Accept.fds` gave it.
#[derive(Debug)]
pub struct Session {
    /// The server's `Accept`.
    pub accept: Accept,
    /// The descriptors, in the order `accept.fds` describes them.
    pub fds: Vec<(FdKind, OwnedFd)>,
    /// Who the server is (it runs as our uid: checked).
    pub server: Credentials,
}

impl Session {
    /// Takes the descriptor of `kind` out of the session.
    pub fn take(&mut self, kind: FdKind) -> Option<OwnedFd> {
        let index = self.fds.iter().position(|(k, _)| *k == kind)?;
        Some(self.fds.remove(index).1)
    }

    /// The channel's name, as the server's `Accept` gives it (its semaphore
    /// prefix): named semaphores are found by it.
    pub fn channel_name(&self) -> Option<&str> {
        self.accept
            .geometry
            .as_ref()
            .map(|g| g.semaphore_prefix.as_str())
    }

    /// Joins the channel as worker `rank` over the passed regions, under the
    /// name the server gave. The messages are the worker's type, as for
    /// [`Worker::from_fds`] (`let worker: Worker = …` for `execute.proto`,
    /// `into_worker::<Raw, Raw>` for bytes).
    ///
    /// # Errors
    /// [`Error::Handshake`] (the layer's `Handshake`, naming what is
    /// missing) if the server passed no request or response region, or no
    /// channel geometry; otherwise as [`Worker::from_fds`].
    pub fn into_worker<Req: Payload, Resp: Payload>(
        mut self,
        rank: u32,
        timeout: Duration,
    ) -> Result<Worker<Req, Resp>> {
        let server_pid = self.server.pid;
        let missing = |what: &str| {
            Error::Handshake(nodeipc_handshake::Error::Handshake {
                peer: format!("server pid {server_pid}"),
                reason: format!("the accept carries no {what}"),
            })
        };
        let name = self
            .channel_name()
            .ok_or_else(|| missing("channel geometry"))?
            .to_owned();
        let request = self
            .take(FdKind::RequestRegion)
            .ok_or_else(|| missing("request region"))?;
        let response = self
            .take(FdKind::ResponseRegion)
            .ok_or_else(|| missing("response region"))?;
        Worker::from_fds(&name, rank, request, response, timeout)
    }
}

/// Logs on to the handshake server at `path`: connects (retrying while the
/// server is not up yet or its backlog is full, within `timeout`), checks that the server runs as
/// our uid, sends `logon` and reads the reply with the descriptors attached
/// (at most 16: a channel's regions).
///
/// # Errors
/// [`Error::Handshake`] wrapping the handshake layer's error: `Rejected`
/// with the server's code and reason; `Handshake` for a server of another
/// uid, a protocol version other than ours, a reply that is not one,
/// descriptors that do not match their description, or a server that
/// closed early; `Timeout` naming what was awaited (the connection, the
/// logon's sending, the reply); `FdPass` for a socket that cannot be
/// connected to (`EACCES`, say).
pub fn connect(path: impl AsRef<Path>, logon: &Logon, timeout: Duration) -> Result<Session> {
    let options = nodeipc_handshake::ClientOptions {
        timeout,
        max_fds: MAX_PASSED_FDS,
        max_reply: MAX_REPLY,
    };
    let session = nodeipc_handshake::connect_with(path, logon, &options)?;
    // The channel keeps no session: its server closes the socket after the
    // accept, and dropping the link here closes ours.
    Ok(Session {
        accept: session.accept,
        fds: session.fds.into_iter().map(|d| (d.kind, d.fd)).collect(),
        server: session.server,
    })
}

/// A worker's logon for `rank`, expecting nothing in particular of the channel.
pub fn worker_logon(rank: u32) -> Logon {
    Logon {
        protocol_version: PROTOCOL_VERSION,
        kind: nodeipc_proto::handshake::ClientKind::Worker as i32,
        worker_rank: rank,
        ..Logon::default()
    }
}
