//! [`HandshakeServer`]: answers logons on a Unix socket, one at a time per
//! connection, never blocked by a client that says nothing.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use nodeipc_fdpass::{Credentials, Listener};
use nodeipc_proto::handshake::{
    Accept, Logon, LogonReply, PROTOCOL_VERSION, PassedFd, Reject, RejectCode, logon_reply,
};
use rustix::event::{PollFd, PollFlags};

use super::MAX_LOGON;
use crate::{Error, Result};

/// How often the accept loop looks at its stop flag while nobody connects:
/// how late a stop is noticed, at worst.
const ACCEPT_TICK: Duration = Duration::from_millis(50);

/// What the server hands an accepted client: the descriptors, described one
/// by one in `Accept.fds`, in the same order.
#[derive(Debug)]
pub struct Offer {
    /// The `Accept` message; its `fds` must describe `descriptors` in order.
    pub accept: Accept,
    /// The descriptors sent with it.
    pub descriptors: Vec<OwnedFd>,
}

/// The server's answer to one logon.
pub type Decision = std::result::Result<Offer, Reject>;

/// How the server treats clients.
#[derive(Clone, Debug)]
pub struct HandshakeOptions {
    /// How long a client may take to send its logon before it is dropped.
    pub logon_timeout: Duration,
    /// Logons handled at once; more are rejected as too many.
    pub max_clients: usize,
    /// Uids accepted besides our own.
    pub allowed_uids: Vec<u32>,
}

impl Default for HandshakeOptions {
    fn default() -> Self {
        HandshakeOptions {
            logon_timeout: Duration::from_secs(2),
            max_clients: 64,
            allowed_uids: Vec::new(),
        }
    }
}

/// What the server has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandshakeStats {
    /// Logons accepted (descriptors sent).
    pub accepted: u64,
    /// Logons rejected with a reason.
    pub rejected: u64,
    /// Connections dropped: silent, garbage, or gone before the answer.
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    rejected: AtomicU64,
    dropped: AtomicU64,
    active: AtomicUsize,
}

/// A server answering logons at a socket path, on a thread of its own.
///
/// The socket is bound with [`Listener`] (0600, in a directory we own, a
/// stale socket replaced, a symlink refused); every client's uid is checked
/// (`SO_PEERCRED`); each connection is handled on a short-lived thread with a
/// logon timeout, so a client that says nothing, sends garbage or leaves
/// early costs nothing but itself. The protocol version is checked before
/// the decision function sees a logon. Dropping the server stops it and
/// removes the socket file.
pub struct HandshakeServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    acceptor: Option<JoinHandle<()>>,
}

type Decide = dyn Fn(&Logon, &Credentials) -> Decision + Send + Sync;

impl HandshakeServer {
    /// Binds `path` and starts answering logons with `decide`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a zero `logon_timeout` (a socket timeout
    /// of zero means none at all: a silent client would hold its thread
    /// forever); [`Error::FdPass`] when the path cannot be bound safely (see
    /// [`Listener::bind`]); [`Error::Io`] if the thread cannot start.
    pub fn bind(
        path: impl AsRef<Path>,
        options: HandshakeOptions,
        decide: impl Fn(&Logon, &Credentials) -> Decision + Send + Sync + 'static,
    ) -> Result<HandshakeServer> {
        let path = path.as_ref().to_owned();
        if options.logon_timeout.is_zero() {
            return Err(Error::InvalidConfig {
                channel: format!("handshake server at {}", path.display()),
                reason: "logon_timeout is 0: give the clients at least 1 ms to log on".to_owned(),
            });
        }
        let listener = Listener::bind(&path).map_err(|source| Error::FdPass {
            context: format!("handshake server at {}", path.display()),
            source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let acceptor = {
            let (stop, counters) = (Arc::clone(&stop), Arc::clone(&counters));
            let decide: Arc<Decide> = Arc::new(decide);
            thread::Builder::new()
                .name("nodeipc-handshake".to_owned())
                .spawn(move || accept_loop(listener, options, decide, stop, counters))
                .map_err(|source| Error::Io {
                    context: format!("handshake server at {}", path.display()),
                    op: "spawn",
                    source,
                })?
        };
        Ok(HandshakeServer {
            path,
            stop,
            counters,
            acceptor: Some(acceptor),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Counts of accepted, rejected and dropped logons so far.
    pub fn stats(&self) -> HandshakeStats {
        HandshakeStats {
            accepted: self.counters.accepted.load(Ordering::Acquire),
            rejected: self.counters.rejected.load(Ordering::Acquire),
            dropped: self.counters.dropped.load(Ordering::Acquire),
        }
    }
}

impl Drop for HandshakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(
    listener: Listener,
    options: HandshakeOptions,
    decide: Arc<Decide>,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
) {
    let options = Arc::new(options);
    let handlers: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());
    while !stop.load(Ordering::SeqCst) {
        let mut polls = [PollFd::new(&listener, PollFlags::IN)];
        let tick = nodeipc_shm::wait::timespec(ACCEPT_TICK);
        if !matches!(rustix::event::poll(&mut polls, Some(&tick)), Ok(n) if n > 0) {
            continue;
        }
        let Ok(Some((stream, peer))) = listener.accept() else {
            continue;
        };
        let mut handlers = handlers.lock().unwrap_or_else(|e| e.into_inner());
        handlers.retain(|h| !h.is_finished());
        if counters.active.load(Ordering::Acquire) >= options.max_clients {
            let reason = format!(
                "the server handles {} logons at once already",
                options.max_clients
            );
            counters.rejected.fetch_add(1, Ordering::AcqRel);
            answer(&stream, &reject(RejectCode::TooManyClients, reason), &[]);
            continue;
        }
        counters.active.fetch_add(1, Ordering::AcqRel);
        let (options, decide, counters2) = (
            Arc::clone(&options),
            Arc::clone(&decide),
            Arc::clone(&counters),
        );
        let spawned = thread::Builder::new()
            .name("nodeipc-logon".to_owned())
            .spawn(move || {
                serve_one(stream, peer, &options, &*decide, &counters2);
                counters2.active.fetch_sub(1, Ordering::AcqRel);
            });
        match spawned {
            Ok(handle) => handlers.push(handle),
            Err(_) => {
                counters.active.fetch_sub(1, Ordering::AcqRel);
                counters.dropped.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
    // Stopping: let the logons in progress finish (each is bounded by its timeout).
    for handle in handlers.into_inner().unwrap_or_else(|e| e.into_inner()) {
        let _ = handle.join();
    }
}

/// One connection: check the peer, read its logon, answer it, close.
fn serve_one(
    mut stream: UnixStream,
    peer: Credentials,
    options: &HandshakeOptions,
    decide: &Decide,
    counters: &Counters,
) {
    let ours = rustix::process::geteuid().as_raw();
    if peer.uid != ours && !options.allowed_uids.contains(&peer.uid) {
        let reason = format!("uid {} may not log on to a server of uid {ours}", peer.uid);
        counters.rejected.fetch_add(1, Ordering::AcqRel);
        answer(&stream, &reject(RejectCode::PermissionDenied, reason), &[]);
        return;
    }
    // Unbounded reads of a client are never an option: a client we cannot
    // bound is dropped (`bind` refused the zero that would make this fail).
    if stream
        .set_read_timeout(Some(options.logon_timeout))
        .is_err()
        || stream
            .set_write_timeout(Some(options.logon_timeout))
            .is_err()
    {
        return;
    }
    let mut scratch = Vec::new();
    let logon = match nodeipc_proto::read_frame::<Logon>(&mut stream, MAX_LOGON, &mut scratch) {
        Ok(logon) => logon,
        Err(nodeipc_proto::Error::Decode(e)) => {
            counters.rejected.fetch_add(1, Ordering::AcqRel);
            answer(
                &stream,
                &reject(
                    RejectCode::Malformed,
                    format!("the logon frame is not a Logon: {e}"),
                ),
                &[],
            );
            return;
        }
        Err(nodeipc_proto::Error::TooLarge { size, max }) => {
            let reason = format!("a {size}-byte logon frame; at most {max} bytes are read");
            counters.rejected.fetch_add(1, Ordering::AcqRel);
            answer(&stream, &reject(RejectCode::Malformed, reason), &[]);
            return;
        }
        // Gone, cut short, or silent past the timeout: nobody to answer.
        Err(_) => {
            counters.dropped.fetch_add(1, Ordering::AcqRel);
            return;
        }
    };
    if logon.protocol_version != PROTOCOL_VERSION {
        let reason = format!(
            "the client speaks handshake protocol version {}, this server {PROTOCOL_VERSION}",
            logon.protocol_version
        );
        counters.rejected.fetch_add(1, Ordering::AcqRel);
        answer(&stream, &reject(RejectCode::VersionMismatch, reason), &[]);
        return;
    }
    let reply = match decide(&logon, &peer) {
        Ok(offer) => {
            if offer.accept.fds.len() != offer.descriptors.len() {
                let reason = "the server described its descriptors wrongly".to_owned();
                counters.rejected.fetch_add(1, Ordering::AcqRel);
                answer(&stream, &reject(RejectCode::Internal, reason), &[]);
                return;
            }
            let reply = LogonReply {
                reply: Some(logon_reply::Reply::Accept(offer.accept)),
            };
            let fds: Vec<_> = offer.descriptors.iter().map(AsFd::as_fd).collect();
            // Counted before it goes, so a client holding its accept finds
            // it counted; taken back if the client was gone.
            counters.accepted.fetch_add(1, Ordering::AcqRel);
            if !answer(&stream, &reply, &fds) {
                counters.accepted.fetch_sub(1, Ordering::AcqRel);
                counters.dropped.fetch_add(1, Ordering::AcqRel);
            }
            return;
        }
        Err(rejection) => LogonReply {
            reply: Some(logon_reply::Reply::Reject(rejection)),
        },
    };
    counters.rejected.fetch_add(1, Ordering::AcqRel);
    answer(&stream, &reply, &[]);
}

/// Sends one reply frame with `fds` attached to its first byte; whether it
/// went. Answers are counted before they are sent, so a client that has
/// its answer finds it in [`HandshakeServer::stats`].
fn answer(stream: &UnixStream, reply: &LogonReply, fds: &[std::os::fd::BorrowedFd<'_>]) -> bool {
    let Ok(frame) = nodeipc_proto::encode_frame_to_vec(reply) else {
        return false;
    };
    nodeipc_fdpass::send_fds(stream, &frame, fds).is_ok()
}

/// A `LogonReply` carrying a rejection.
pub(crate) fn reject(code: RejectCode, reason: String) -> LogonReply {
    LogonReply {
        reply: Some(logon_reply::Reply::Reject(Reject {
            code: code as i32,
            reason,
        })),
    }
}

/// Describes one passed descriptor.
pub(crate) fn passed(kind: nodeipc_proto::handshake::FdKind, size: usize) -> PassedFd {
    PassedFd {
        kind: kind as i32,
        size: size as u64,
    }
}
