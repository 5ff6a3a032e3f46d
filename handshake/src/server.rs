//! [`HandshakeServer`]: answers logons on a Unix socket, each on a thread of
//! its own, never blocked by a client that says nothing, and hands each
//! accepted session's link to the caller.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use nodeipc_fdpass::{Credentials, ForkGeneration, Listener};
use nodeipc_proto::handshake::{Logon, LogonReply, PROTOCOL_VERSION, RejectCode, logon_reply};
use rustix::event::{PollFd, PollFlags};

use crate::offer::{Decision, Offer, reject};
use crate::wire::send_reply;
use crate::{Error, PeerLink, Result};

/// How often the accept loop looks at its stop flag while nobody connects:
/// how late a stop is noticed, at worst.
const ACCEPT_TICK: Duration = Duration::from_millis(50);

/// How the server treats clients.
#[derive(Clone, Debug)]
pub struct HandshakeOptions {
    /// How long a client may take to send its logon, and to take the reply,
    /// before it is dropped.
    pub logon_timeout: Duration,
    /// Logons handled at once; more are rejected as too many. (Sessions
    /// already accepted do not count.)
    pub max_clients: usize,
    /// Uids accepted besides our own.
    pub allowed_uids: Vec<u32>,
    /// The largest `Logon` frame read, in bytes (its `request` included).
    pub max_logon: usize,
}

impl Default for HandshakeOptions {
    fn default() -> Self {
        HandshakeOptions {
            logon_timeout: Duration::from_secs(2),
            max_clients: 64,
            allowed_uids: Vec::new(),
            max_logon: crate::MAX_LOGON,
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
    /// Connections the server holds right now: taken from the socket's
    /// backlog and not yet answered and closed (or handed on as a session).
    /// Once the three counts above
    /// cover every connection made and this is 0, the server holds no
    /// descriptor of any of them.
    pub in_progress: usize,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    rejected: AtomicU64,
    dropped: AtomicU64,
    active: AtomicUsize,
}

/// An accepted session, on the server's side: the client's logon, who it
/// is, and the link that tells when it is gone. Dropping it closes the
/// session (the client sees end of file).
#[derive(Debug)]
pub struct ServerSession {
    /// The client's logon, as its decision saw it.
    pub logon: Logon,
    /// Who the client is (`SO_PEERCRED` at connect time).
    pub peer: Credentials,
    /// The session socket and the client's pidfd.
    pub link: PeerLink,
}

/// What a decision made for the session besides its offer (the objects
/// [`accept`](crate::Acceptor::accept) hands over), type-erased.
pub(crate) type Made = Option<Box<dyn std::any::Any + Send>>;
pub(crate) type Decide = dyn Fn(&Logon, &Credentials) -> Result<(Offer, Made), nodeipc_proto::handshake::Reject>
    + Send
    + Sync;
pub(crate) type OnSession = dyn Fn(ServerSession, Made) + Send + Sync;

/// A server answering logons at a socket path, on a thread of its own.
///
/// The socket is bound with [`Listener`] (0600, in a directory we own, a
/// stale socket replaced, a symlink refused); every client's uid is checked
/// (`SO_PEERCRED`); each connection is handled on a short-lived thread with a
/// logon timeout, so a client that says nothing, sends garbage or leaves
/// early costs nothing but itself. The protocol version is checked before
/// the decision function sees a logon. Dropping the server stops it and
/// removes the socket file; sessions already handed out stay open. In a
/// child forked since it started, dropping it only drops the child's copy:
/// no thread is joined (the parent's threads do not exist there) and the
/// parent's server keeps serving.
pub struct HandshakeServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    acceptor: Option<JoinHandle<()>>,
    /// The process that started it (and its threads).
    born: ForkGeneration,
}

impl HandshakeServer {
    /// Binds `path` and answers logons with `decide`; an accepted client's
    /// connection is closed once its descriptors are sent (no session kept:
    /// the channel's logon).
    ///
    /// # Errors
    /// As [`bind_sessions`](HandshakeServer::bind_sessions).
    pub fn bind(
        path: impl AsRef<Path>,
        options: HandshakeOptions,
        decide: impl Fn(&Logon, &Credentials) -> Decision + Send + Sync + 'static,
    ) -> Result<HandshakeServer> {
        Self::start(path.as_ref(), options, plain(decide), None)
    }

    /// Binds `path`, answers logons with `decide`, and hands every accepted
    /// session to `on_session` (on the logon's own thread: send it on to
    /// wherever the sessions are watched). Several sessions may be open at
    /// once; each lasts until one side drops it or dies.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a zero `logon_timeout` (a socket timeout
    /// of zero means none at all: a silent client would hold its thread
    /// forever) or a zero `max_logon`; [`Error::FdPass`] when the path cannot
    /// be bound safely (see [`Listener::bind`]); [`Error::Io`] if the thread
    /// cannot start.
    pub fn bind_sessions(
        path: impl AsRef<Path>,
        options: HandshakeOptions,
        decide: impl Fn(&Logon, &Credentials) -> Decision + Send + Sync + 'static,
        on_session: impl Fn(ServerSession) + Send + Sync + 'static,
    ) -> Result<HandshakeServer> {
        Self::start(
            path.as_ref(),
            options,
            plain(decide),
            Some(Arc::new(move |session, _| on_session(session))),
        )
    }

    pub(crate) fn start(
        path: &Path,
        options: HandshakeOptions,
        decide: Arc<Decide>,
        on_session: Option<Arc<OnSession>>,
    ) -> Result<HandshakeServer> {
        let path = path.to_owned();
        let invalid = |reason: &str| Error::InvalidConfig {
            server: format!("handshake server at {}", path.display()),
            reason: reason.to_owned(),
        };
        if options.logon_timeout.is_zero() {
            return Err(invalid(
                "logon_timeout is 0: give the clients at least 1 ms to log on",
            ));
        }
        if options.max_logon < nodeipc_proto::LEN_PREFIX {
            return Err(invalid("max_logon is smaller than a frame's length prefix"));
        }
        let listener = Listener::bind(&path).map_err(|source| Error::FdPass {
            context: format!("handshake server at {}", path.display()),
            source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let acceptor = {
            let (stop, counters) = (Arc::clone(&stop), Arc::clone(&counters));
            let server = Shared {
                options,
                decide,
                on_session,
                counters,
            };
            thread::Builder::new()
                .name("nodeipc-handshake".to_owned())
                .spawn(move || accept_loop(listener, Arc::new(server), stop))
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
            born: ForkGeneration::current(),
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
            // Read after the counts: a connection is open here before it is
            // counted, and closed before it leaves this one.
            in_progress: self.counters.active.load(Ordering::Acquire),
        }
    }
}

impl Drop for HandshakeServer {
    fn drop(&mut self) {
        if self.born.is_forked() {
            // A child's copy: the accept thread is the parent's (there is
            // none here to stop or join), and so are the socket and what
            // that thread holds. Leave them all to the parent.
            std::mem::forget(self.acceptor.take());
            return;
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

impl std::fmt::Debug for HandshakeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandshakeServer")
            .field("path", &self.path)
            .field("stats", &self.stats())
            .finish()
    }
}

/// What every logon thread shares.
struct Shared {
    options: HandshakeOptions,
    decide: Arc<Decide>,
    on_session: Option<Arc<OnSession>>,
    counters: Arc<Counters>,
}

fn accept_loop(listener: Listener, shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let counters = &shared.counters;
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
        // Counted from here until the stream is closed, whichever way it
        // goes: `in_progress` says when no connection is held any more.
        counters.active.fetch_add(1, Ordering::AcqRel);
        let mut handlers = handlers.lock().unwrap_or_else(|e| e.into_inner());
        handlers.retain(|h| !h.is_finished());
        if counters.active.load(Ordering::Acquire) > shared.options.max_clients {
            let reason = format!(
                "the server handles {} logons at once already",
                shared.options.max_clients
            );
            counters.rejected.fetch_add(1, Ordering::AcqRel);
            answer(&stream, &rejection(RejectCode::TooManyClients, reason), &[]);
            drop(stream);
            counters.active.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let shared2 = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name("nodeipc-logon".to_owned())
            .spawn(move || {
                serve_one(stream, peer, &shared2);
                shared2.counters.active.fetch_sub(1, Ordering::AcqRel);
            });
        match spawned {
            Ok(handle) => handlers.push(handle),
            // The closure, and the stream in it, is gone with the error.
            Err(_) => {
                counters.dropped.fetch_add(1, Ordering::AcqRel);
                counters.active.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
    // Stopping: let the logons in progress finish (each is bounded by its
    // timeout; a slow `on_session` is the caller's own).
    for handle in handlers.into_inner().unwrap_or_else(|e| e.into_inner()) {
        let _ = handle.join();
    }
}

/// One connection: check the peer, read its logon, answer it, then close
/// it or hand the session on.
fn serve_one(mut stream: UnixStream, peer: Credentials, shared: &Shared) {
    let (options, counters) = (&shared.options, &shared.counters);
    let refuse = |stream: &UnixStream, code: RejectCode, reason: String| {
        counters.rejected.fetch_add(1, Ordering::AcqRel);
        answer(stream, &rejection(code, reason), &[]);
    };
    let ours = rustix::process::geteuid().as_raw();
    if peer.uid != ours && !options.allowed_uids.contains(&peer.uid) {
        let reason = format!("uid {} may not log on to a server of uid {ours}", peer.uid);
        refuse(&stream, RejectCode::PermissionDenied, reason);
        return;
    }
    // Unbounded reads of a client are never an option: a client we cannot
    // bound is dropped (`start` refused the zero that would make this fail).
    if stream
        .set_read_timeout(Some(options.logon_timeout))
        .is_err()
        || stream
            .set_write_timeout(Some(options.logon_timeout))
            .is_err()
    {
        counters.dropped.fetch_add(1, Ordering::AcqRel);
        return;
    }
    let mut scratch = Vec::new();
    let logon =
        match nodeipc_proto::read_frame::<Logon>(&mut stream, options.max_logon, &mut scratch) {
            Ok(logon) => logon,
            Err(nodeipc_proto::Error::Decode(e)) => {
                let reason = format!("the logon frame is not a Logon: {e}");
                refuse(&stream, RejectCode::Malformed, reason);
                return;
            }
            Err(nodeipc_proto::Error::TooLarge { size, max }) => {
                let reason = format!("a {size}-byte logon frame; at most {max} bytes are read");
                refuse(&stream, RejectCode::Malformed, reason);
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
        refuse(&stream, RejectCode::VersionMismatch, reason);
        return;
    }
    let (offer, made) = match (shared.decide)(&logon, &peer) {
        Ok(decided) => decided,
        Err(rejected) => {
            counters.rejected.fetch_add(1, Ordering::AcqRel);
            let reply = LogonReply {
                reply: Some(logon_reply::Reply::Reject(rejected)),
            };
            answer(&stream, &reply, &[]);
            return;
        }
    };
    if offer.accept.fds.len() != offer.descriptors.len() {
        let reason = format!(
            "the server described {} descriptors and offered {}",
            offer.accept.fds.len(),
            offer.descriptors.len()
        );
        refuse(&stream, RejectCode::Internal, reason);
        return;
    }
    let reply = LogonReply {
        reply: Some(logon_reply::Reply::Accept(offer.accept)),
    };
    // Counted before it goes, so a client holding its accept finds it
    // counted; taken back if the client was gone.
    counters.accepted.fetch_add(1, Ordering::AcqRel);
    if !answer(&stream, &reply, &offer.descriptors) {
        counters.accepted.fetch_sub(1, Ordering::AcqRel);
        counters.dropped.fetch_add(1, Ordering::AcqRel);
        return;
    }
    drop(offer.descriptors);
    if let Some(on_session) = &shared.on_session {
        // The session socket is only watched from here on: no timeouts.
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(None);
        let link = PeerLink::new(stream, peer.pid);
        on_session(ServerSession { logon, peer, link }, made);
    }
}

/// A decision that makes nothing besides its offer.
fn plain(decide: impl Fn(&Logon, &Credentials) -> Decision + Send + Sync + 'static) -> Arc<Decide> {
    Arc::new(move |logon, peer| decide(logon, peer).map(|offer| (offer, None)))
}

/// Sends one reply with `fds`; whether it all went.
fn answer(stream: &UnixStream, reply: &LogonReply, fds: &[OwnedFd]) -> bool {
    let fds: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
    send_reply(stream, reply, &fds).is_ok()
}

/// A `LogonReply` carrying a rejection.
fn rejection(code: RejectCode, reason: String) -> LogonReply {
    LogonReply {
        reply: Some(logon_reply::Reply::Reject(reject(code, reason))),
    }
}
