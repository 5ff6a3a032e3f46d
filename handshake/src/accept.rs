//! [`Acceptor`]: the server side in the shape of Agave's `Server::accept()`
//! — one call returns one session: the client's logon, the objects made
//! for it, and the link that says when it is gone.

use std::path::Path;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use nodeipc_fdpass::Credentials;
use nodeipc_proto::handshake::{Logon, Reject};

use crate::server::{Decide, OnSession};
use crate::{Error, HandshakeOptions, HandshakeServer, HandshakeStats, Offer, PeerLink, Result};

/// An accepted session and what was made for it.
#[derive(Debug)]
pub struct AcceptedSession<S> {
    /// The client's logon, as the decision saw it.
    pub logon: Logon,
    /// Who the client is (`SO_PEERCRED` at connect time).
    pub peer: Credentials,
    /// What the decision made for this client (its queues, its pool
    /// handles, ...), whose descriptors went out with the offer.
    pub made: S,
    /// The session socket and the client's pidfd. Dropping it ends the
    /// session (the client sees end of file).
    pub link: PeerLink,
}

/// A handshake server whose sessions are taken with [`accept`](Acceptor::accept).
///
/// `make` runs once per logon (on that logon's own thread, so a slow or
/// silent client holds up nobody): it rejects, or returns the offer — the
/// descriptors sent to the client — and the objects behind them, which
/// come out of `accept` with the session once the client has them. A
/// session whose client left before taking its descriptors never comes
/// out; what was made for it is dropped.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_handshake::{Acceptor, FdKind, HandshakeOptions, Offer};
///
/// let dir = std::env::temp_dir().join(format!("nodeipc-doc-accept-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let socket = dir.join("logon.sock");
/// let mut server = Acceptor::bind(&socket, HandshakeOptions::default(), |logon, _peer| {
///     let workers = nodeipc_handshake::count(logon, "workers").unwrap_or(0);
///     let (reader, writer) = std::io::pipe().expect("pipe");
///     Ok((Offer::new().fd(FdKind::Other, "events", 0, writer.into()), (workers, reader)))
/// })?;
/// let logon = nodeipc_handshake::logon(&[("workers", 4)], Vec::new());
/// let client = nodeipc_handshake::connect(&socket, &logon, Duration::from_secs(5))?;
/// let session = server.accept(Duration::from_secs(5))?;
/// assert_eq!(session.made.0, 4);
/// assert_eq!(session.peer.pid, std::process::id());
/// assert!(session.link.is_alive());
/// drop(client);
/// assert!(session.link.wait_gone(Duration::from_secs(5)).is_some());
/// # drop(server);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Acceptor<S> {
    server: HandshakeServer,
    sessions: mpsc::Receiver<AcceptedSession<S>>,
}

impl<S: Send + 'static> Acceptor<S> {
    /// Binds `path` (as [`HandshakeServer::bind_sessions`] does) and
    /// answers each logon with `make`.
    ///
    /// # Errors
    /// As [`HandshakeServer::bind_sessions`].
    pub fn bind(
        path: impl AsRef<Path>,
        options: HandshakeOptions,
        make: impl Fn(&Logon, &Credentials) -> std::result::Result<(Offer, S), Reject>
        + Send
        + Sync
        + 'static,
    ) -> Result<Acceptor<S>> {
        let decide: Arc<Decide> = Arc::new(move |logon, peer| {
            make(logon, peer)
                .map(|(offer, made)| (offer, Some(Box::new(made) as Box<dyn std::any::Any + Send>)))
        });
        let (sent, sessions) = mpsc::channel();
        let on_session: Arc<OnSession> = Arc::new(move |session, made| {
            // Every accepted logon's decision made an `S` (see `decide`).
            let Some(Ok(made)) = made.map(|m| m.downcast::<S>()) else {
                return;
            };
            let accepted = AcceptedSession {
                logon: session.logon,
                peer: session.peer,
                made: *made,
                link: session.link,
            };
            // The acceptor may be gone: the session ends with `accepted`.
            let _ = sent.send(accepted);
        });
        let server = HandshakeServer::start(path.as_ref(), options, decide, Some(on_session))?;
        Ok(Acceptor { server, sessions })
    }

    /// The next accepted session, waiting up to `timeout` for one.
    ///
    /// # Errors
    /// [`Error::Timeout`] when no client logged on in time.
    pub fn accept(&mut self, timeout: Duration) -> Result<AcceptedSession<S>> {
        let start = Instant::now();
        self.sessions
            .recv_timeout(timeout)
            .map_err(|_| Error::Timeout {
                peer: format!("handshake server at {}", self.server.path().display()),
                op: "waiting for a client to log on".to_owned(),
                waited: start.elapsed(),
            })
    }

    /// The next accepted session if one is waiting.
    pub fn try_accept(&mut self) -> Option<AcceptedSession<S>> {
        self.sessions.try_recv().ok()
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        self.server.path()
    }

    /// Counts of accepted, rejected and dropped logons so far.
    pub fn stats(&self) -> HandshakeStats {
        self.server.stats()
    }
}

impl<S> std::fmt::Debug for Acceptor<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor")
            .field("server", &self.server)
            .finish()
    }
}
