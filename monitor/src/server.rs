//! [`MonitorServer`]: the rank and control sockets and the single-threaded
//! event loop that serves them.
//!
//! One `poll` waits on everything: the two listening sockets, the rank's
//! connection, the rank's pidfd (an exit is seen at once), the control
//! connections, the clients waiting for the rank slot (only for hang-ups),
//! the shutdown signals and the stop handle's eventfd. Its timeout is the
//! next periodic check, escalation or waiting client's deadline.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Credentials, Signal};
use nodeipc_proto::monitor as pb;
use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::io::Errno;

use crate::bind::{self, control_socket_path};
use crate::conn::{Conn, Incoming, PeerStart, start_time_of};
use crate::log::Logger;
use crate::session::{Registered, Termination};
use crate::signals::ShutdownSignals;
use crate::{Error, HealthCheck, LogLevel, MonitorConfig, RankState, Result};
use nodeipc_fdpass::Listener;

/// Most control connections served at once; more are refused with a reason.
const MAX_CONTROL_CONNECTIONS: usize = 16;

/// Most clients waiting for the rank slot at once; more are refused at once.
const MAX_WAITING: usize = 16;

/// Why [`MonitorServer::run`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// One of SIGTERM, SIGINT, SIGUSR1, SIGUSR2 arrived.
    Signal(Signal),
    /// [`StopHandle::stop`] was called.
    Stopped,
}

/// Stops a running server from another thread; cheap to clone.
#[derive(Clone, Debug)]
pub struct StopHandle {
    wake: Arc<OwnedFd>,
}

impl StopHandle {
    /// Asks the server to shut down: its `run` returns [`Shutdown::Stopped`]
    /// after removing its socket files.
    pub fn stop(&self) {
        let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
    }
}

/// A client waiting for the rank slot; its frames are not read until it gets it.
struct Waiting {
    stream: UnixStream,
    peer: Credentials,
    /// As [`Conn::peer_start`], read when it connected.
    peer_start: PeerStart,
    since: Instant,
}

/// The rank monitor server: binds `PATH` (the rank socket) and
/// `PATH.control` (the launcher's), then [`run`](MonitorServer::run)s until
/// stopped or signalled, removing both files when done.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_monitor::{MonitorClient, MonitorConfig, MonitorServer, RankInfo, RankState};
///
/// let dir = std::env::temp_dir().join(format!("monitor-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
/// let server = MonitorServer::bind(dir.join("rank0.sock"), MonitorConfig::default())?;
/// let stop = server.stop_handle();
/// let running = std::thread::spawn(move || server.run());
///
/// let mut client = MonitorClient::connect(dir.join("rank0.sock"), Duration::from_secs(5))?;
/// client.init(&RankInfo::this_process(0, 0))?;
/// client.heartbeat()?;
/// assert_eq!(client.status()?.state, RankState::Running);
///
/// stop.stop();
/// running.join().unwrap()?;
/// assert!(!dir.join("rank0.sock").exists());
/// # std::fs::remove_dir(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MonitorServer {
    pub(crate) config: MonitorConfig,
    rank_socket: Listener,
    control_socket: Listener,
    wake: Arc<OwnedFd>,
    signals: Option<ShutdownSignals>,
    pub(crate) health_checks: Vec<Box<dyn HealthCheck>>,
    pub(crate) log: Logger,
    pub(crate) state: RankState,
    pub(crate) conn: Option<Conn>,
    pub(crate) rank: Option<Registered>,
    pub(crate) termination: Option<Termination>,
    pub(crate) last_timeout: Option<String>,
    waiting: VecDeque<Waiting>,
    controls: Vec<Conn>,
    next_check: Instant,
}

impl std::fmt::Debug for MonitorServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonitorServer")
            .field("socket", &self.rank_socket.path())
            .field("state", &self.state)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl MonitorServer {
    /// Binds the rank socket at `socket` and the control socket beside it
    /// (`socket` + `.control`), both 0600. Their directory must be ours and
    /// not writable by group or others; a stale socket file (nobody
    /// listening) is replaced, a live one is an error, a symlink is refused.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config`; [`Error::UnsafeDirectory`],
    /// [`Error::NotADirectory`], [`Error::SymlinkRefused`],
    /// [`Error::NotASocket`], [`Error::AlreadyServing`],
    /// [`Error::PathTooLong`], [`Error::Io`].
    pub fn bind(socket: impl AsRef<Path>, config: MonitorConfig) -> Result<MonitorServer> {
        config.validate()?;
        let socket = socket.as_ref();
        let rank_socket = bind::bind(socket)?;
        let control_socket = bind::bind(&control_socket_path(socket))?;
        let wake = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| Error::io("eventfd", "", e))?;
        let next_check = Instant::now() + config.check_interval;
        Ok(MonitorServer {
            config,
            rank_socket,
            control_socket,
            wake: Arc::new(wake),
            signals: None,
            health_checks: Vec::new(),
            log: Logger::stderr(),
            state: RankState::Waiting,
            conn: None,
            rank: None,
            termination: None,
            last_timeout: None,
            waiting: VecDeque::new(),
            controls: Vec::new(),
            next_check,
        })
    }

    /// The rank socket's path.
    pub fn socket_path(&self) -> &Path {
        self.rank_socket.path()
    }

    /// The control socket's path.
    pub fn control_path(&self) -> &Path {
        self.control_socket.path()
    }

    /// The configuration in force (timeouts change with `UpdateConfig`).
    pub fn config(&self) -> &MonitorConfig {
        &self.config
    }

    /// A handle that stops [`run`](MonitorServer::run) from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            wake: Arc::clone(&self.wake),
        }
    }

    /// Shuts down in order on SIGTERM, SIGINT, SIGUSR1 or SIGUSR2: blocks
    /// them in the calling thread and reads them from a `signalfd` in the
    /// loop. Call it from the thread that will call `run`, before starting
    /// any other thread (threads started later inherit the mask); the
    /// previous mask is restored when the server is dropped.
    ///
    /// # Errors
    /// [`Error::Io`] from `pthread_sigmask` or `signalfd`.
    pub fn handle_shutdown_signals(&mut self) -> Result<()> {
        if self.signals.is_none() {
            self.signals = Some(ShutdownSignals::install()?);
        }
        Ok(())
    }

    pub(crate) fn set_signals(&mut self, signals: ShutdownSignals) {
        self.signals = Some(signals);
    }

    /// Adds a check polled at every periodic check; a failure terminates
    /// the rank like a timeout.
    pub fn add_health_check(&mut self, check: impl HealthCheck + 'static) {
        self.health_checks.push(Box::new(check));
    }

    /// Sends log lines to `sink` instead of standard error.
    pub fn on_log(&mut self, sink: impl FnMut(LogLevel, &str) + Send + 'static) {
        self.log.set(Box::new(sink));
    }

    /// Serves until stopped or signalled, then closes every connection and
    /// removes the socket files. A termination with escalation still
    /// pending gets its `SIGKILL` at once.
    ///
    /// # Errors
    /// [`Error::Io`] when `poll` or `accept` fail for a reason other than a
    /// client's.
    pub fn run(mut self) -> Result<Shutdown> {
        self.log.info(&format!(
            "serving on {} (control {}), check every {:?}",
            self.rank_socket.path().display(),
            self.control_socket.path().display(),
            self.config.check_interval
        ));
        let reason = loop {
            if let Some(reason) = self.turn()? {
                break reason;
            }
        };
        self.close(reason);
        Ok(reason)
    }

    /// One turn of the loop: wait, then handle what is ready and what is due.
    fn turn(&mut self) -> Result<Option<Shutdown>> {
        let timeout = self.poll_timeout(Instant::now());
        let ready = self.wait(timeout)?;
        if let Some(reason) = self.take_shutdown(&ready) {
            return Ok(Some(reason));
        }
        if ready.rank_pidfd {
            self.on_rank_exit();
        }
        if ready.rank_conn {
            self.serve_rank();
        }
        self.serve_controls(&ready.controls);
        self.drop_hung_up_waiters(&ready.waiting);
        if ready.control_listener {
            self.accept_controls()?;
        }
        if ready.rank_listener {
            self.accept_ranks()?;
        }
        let now = Instant::now();
        self.promote_waiter();
        self.expire_waiters(now);
        self.escalate_if_due(now);
        if now >= self.next_check {
            self.periodic_check(now);
            self.next_check = now + self.config.check_interval;
        }
        Ok(None)
    }

    fn poll_timeout(&self, now: Instant) -> Duration {
        let mut deadline = self.next_check;
        if let Some(first) = self.waiting.front() {
            deadline = deadline.min(first.since + self.config.connection_wait);
        }
        if let Some(at) = self.termination.as_ref().and_then(|t| t.escalate_at) {
            deadline = deadline.min(at);
        }
        deadline.saturating_duration_since(now)
    }

    fn wait(&self, timeout: Duration) -> Result<Ready> {
        let mut fds = Vec::with_capacity(8 + self.waiting.len() + self.controls.len());
        fds.push(PollFd::new(&self.rank_socket, PollFlags::IN));
        fds.push(PollFd::new(&self.control_socket, PollFlags::IN));
        fds.push(PollFd::new(&*self.wake, PollFlags::IN));
        let signals_at = self.signals.as_ref().map(|s| {
            fds.push(PollFd::new(s, PollFlags::IN));
            fds.len() - 1
        });
        let conn_at = self.conn.as_ref().map(|c| {
            fds.push(PollFd::new(c, c.poll_flags()));
            fds.len() - 1
        });
        let pidfd_at = self.rank.as_ref().map(|r| {
            fds.push(PollFd::new(&r.pidfd, PollFlags::IN));
            fds.len() - 1
        });
        let controls_at = fds.len();
        for c in &self.controls {
            fds.push(PollFd::new(c, c.poll_flags()));
        }
        let waiting_at = fds.len();
        for w in &self.waiting {
            // No events asked: only a hang-up or an error is reported.
            fds.push(PollFd::new(&w.stream, PollFlags::empty()));
        }
        let spec = rustix::time::Timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&spec)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(Error::io("poll", "", e)),
        }
        let fired = |i: usize| !fds[i].revents().is_empty();
        Ok(Ready {
            rank_listener: fired(0),
            control_listener: fired(1),
            wake: fired(2),
            signals: signals_at.is_some_and(fired),
            rank_conn: conn_at.is_some_and(fired),
            rank_pidfd: pidfd_at.is_some_and(fired),
            controls: (0..self.controls.len())
                .map(|i| fired(controls_at + i))
                .collect(),
            waiting: (0..self.waiting.len())
                .map(|i| fired(waiting_at + i))
                .collect(),
        })
    }

    fn take_shutdown(&mut self, ready: &Ready) -> Option<Shutdown> {
        if ready.signals
            && let Some(signal) = self.signals.as_ref().and_then(ShutdownSignals::read)
        {
            return Some(Shutdown::Signal(signal));
        }
        if ready.wake {
            let mut buf = [0u8; 8];
            let _ = rustix::io::read(&*self.wake, &mut buf);
            return Some(Shutdown::Stopped);
        }
        None
    }

    /// Reads, answers and, when it is done, drops the rank connection.
    fn serve_rank(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.flush();
        conn.fill();
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return;
            };
            let Some(incoming) = conn.next::<pb::ClientMessage>() else {
                break;
            };
            let reply = match incoming {
                Incoming::Message(msg) => self.handle_rank_message(msg),
                Incoming::Malformed(cause) | Incoming::Oversize(cause) => {
                    let pid = self.conn.as_ref().map_or(0, |c| c.peer.pid);
                    self.log
                        .warn(&format!("rank connection (pid {pid}): {cause}"));
                    Some((error(cause), None))
                }
            };
            if let (Some((msg, fd)), Some(conn)) = (reply, self.conn.as_mut()) {
                conn.send(&msg, fd);
            }
        }
        if self.conn.as_ref().is_some_and(Conn::finished) {
            self.connection_lost("the rank closed its connection");
        }
    }

    fn serve_controls(&mut self, ready: &[bool]) {
        for i in 0..self.controls.len() {
            if !ready.get(i).copied().unwrap_or(false) {
                continue;
            }
            self.controls[i].flush();
            self.controls[i].fill();
            while let Some(incoming) = self.controls[i].next::<pb::ControlRequest>() {
                let reply = match incoming {
                    Incoming::Message(msg) => self.handle_control(msg),
                    Incoming::Malformed(cause) | Incoming::Oversize(cause) => error(cause),
                };
                self.controls[i].send(&reply, None);
            }
        }
        self.controls.retain(|c| !c.finished());
    }

    fn handle_control(&mut self, request: pb::ControlRequest) -> pb::ServerMessage {
        use pb::control_request::Request;
        match request.request {
            Some(Request::Status(_)) => status_reply(self.status()),
            Some(Request::CloseConnection(_)) => {
                if self.conn.is_none() {
                    return error("no rank connection to close".to_owned());
                }
                self.connection_lost("the launcher closed the rank connection");
                ok(pb::Ok::default())
            }
            None => error(
                "empty ControlRequest: exactly one of close_connection, status must be set"
                    .to_owned(),
            ),
        }
    }

    fn accept_controls(&mut self) -> Result<()> {
        while let Some(stream) = bind::accept(&self.control_socket)? {
            let Some((stream, peer)) = self.check_peer(stream, "control") else {
                continue;
            };
            let mut conn = Conn::new(stream, peer);
            if self.controls.len() >= MAX_CONTROL_CONNECTIONS {
                conn.send(
                    &error(format!(
                        "{MAX_CONTROL_CONNECTIONS} control connections are open already; retry later"
                    )),
                    None,
                );
                continue;
            }
            self.controls.push(conn);
        }
        Ok(())
    }

    fn accept_ranks(&mut self) -> Result<()> {
        while let Some(stream) = bind::accept(&self.rank_socket)? {
            let Some((stream, peer)) = self.check_peer(stream, "rank") else {
                continue;
            };
            if self.conn.is_none() && self.waiting.is_empty() {
                self.log
                    .info(&format!("rank connection from pid {}", peer.pid));
                self.conn = Some(Conn::rank(stream, peer, start_time_of(&peer)));
            } else if self.waiting.len() >= MAX_WAITING {
                let cause = format!(
                    "refused: {MAX_WAITING} clients already wait for the rank connection, which {}",
                    self.holder()
                );
                self.refuse(stream, peer, cause);
            } else {
                self.waiting.push_back(Waiting {
                    stream,
                    peer,
                    peer_start: start_time_of(&peer),
                    since: Instant::now(),
                });
            }
        }
        Ok(())
    }

    /// The peer's credentials if it runs as our uid; refused (with the reason
    /// sent to it) otherwise.
    fn check_peer(
        &mut self,
        stream: UnixStream,
        socket: &str,
    ) -> Option<(UnixStream, Credentials)> {
        match nodeipc_fdpass::require_peer_uid(&stream, &[]) {
            Ok(peer) => Some((stream, peer)),
            Err(e) => {
                self.log.warn(&format!("{socket} socket: {e}"));
                let unknown = Credentials {
                    pid: 0,
                    uid: u32::MAX,
                    gid: u32::MAX,
                };
                Conn::new(stream, unknown).send(&error(e.to_string()), None);
                None
            }
        }
    }

    fn refuse(&mut self, stream: UnixStream, peer: Credentials, cause: String) {
        self.log.warn(&format!("client pid {}: {cause}", peer.pid));
        Conn::new(stream, peer).send(&error(cause), None);
    }

    /// Who holds the rank slot, for refusals.
    fn holder(&self) -> String {
        match (&self.conn, &self.rank) {
            (Some(_), Some(rank)) => format!(
                "global rank {} (pid {}) holds",
                rank.info.global_rank, rank.info.pid
            ),
            (Some(conn), None) => format!("pid {} holds (not yet registered)", conn.peer.pid),
            (None, _) => "nobody holds yet".to_owned(),
        }
    }

    fn drop_hung_up_waiters(&mut self, ready: &[bool]) {
        let mut i = 0;
        self.waiting.retain(|_| {
            let keep = !ready.get(i).copied().unwrap_or(false);
            i += 1;
            keep
        });
    }

    fn promote_waiter(&mut self) {
        // A promoted client may turn out to be gone already: then the next.
        while self.conn.is_none() {
            let Some(w) = self.waiting.pop_front() else {
                return;
            };
            self.log.info(&format!(
                "rank connection from pid {} (waited {} ms)",
                w.peer.pid,
                w.since.elapsed().as_millis()
            ));
            let mut conn = Conn::rank(w.stream, w.peer, w.peer_start);
            conn.fill();
            self.conn = Some(conn);
            // Frames it sent while waiting are answered now.
            self.serve_rank();
        }
    }

    fn expire_waiters(&mut self, now: Instant) {
        let limit = self.config.connection_wait;
        while self
            .waiting
            .front()
            .is_some_and(|w| now.duration_since(w.since) >= limit)
        {
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            let cause = format!(
                "refused: the monitor serves one rank connection at a time and {} it; this connection waited {} ms (limit {} ms)",
                self.holder(),
                now.duration_since(w.since).as_millis(),
                limit.as_millis()
            );
            self.refuse(w.stream, w.peer, cause);
        }
    }

    /// The rank connection is gone (closed, lost, or dropped by the
    /// launcher): its state is cleared and the state machine moves on.
    pub(crate) fn connection_lost(&mut self, why: &str) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let pid = conn.peer.pid;
        drop(conn);
        match self.state {
            RankState::Initialized | RankState::Running => {
                let rank = self.rank.take();
                let sections = rank.as_ref().map(Registered::describe_sections);
                let next = if self.config.restart_expected {
                    RankState::Restarting
                } else {
                    RankState::Waiting
                };
                match sections {
                    Some(open) if !open.is_empty() => self.log.warn(&format!(
                        "{why} (pid {pid}) with sections still open: {open}; state cleared, now {next:?}"
                    )),
                    _ => self.log.info(&format!(
                        "{why} (pid {pid}); state cleared, now {next:?}"
                    )),
                }
                self.state = next;
            }
            // A termination in progress keeps the rank's pidfd until it exits.
            RankState::TimedOut => self.log.info(&format!(
                "{why} (pid {pid}) while the rank is being terminated"
            )),
            _ => self.log.info(&format!("{why} (pid {pid})")),
        }
    }

    /// Orderly shutdown: connections closed (open sections reported),
    /// a pending escalation carried out, socket files removed on drop.
    fn close(&mut self, reason: Shutdown) {
        self.log.info(&format!("shutting down: {reason:?}"));
        if self
            .termination
            .as_ref()
            .is_some_and(|t| t.escalate_at.is_some())
            && let Some(rank) = &self.rank
        {
            let _ = rank.pidfd.send_signal(Signal::KILL);
            self.log.warn(&format!(
                "rank pid {} had not exited after its termination signal: SIGKILL sent at shutdown",
                rank.info.pid
            ));
        }
        if let Some(rank) = &self.rank {
            let open = rank.describe_sections();
            if !open.is_empty() {
                self.log
                    .warn(&format!("shutting down with sections still open: {open}"));
            }
        }
        self.state = RankState::Closed;
        self.conn = None;
        self.rank = None;
        self.waiting.clear();
        self.controls.clear();
    }
}

/// What one `poll` reported.
struct Ready {
    rank_listener: bool,
    control_listener: bool,
    wake: bool,
    signals: bool,
    rank_conn: bool,
    rank_pidfd: bool,
    controls: Vec<bool>,
    waiting: Vec<bool>,
}

/// Longest cause an `Error` reply carries, in bytes.
const MAX_CAUSE: usize = 4096;

pub(crate) fn error(mut cause: String) -> pb::ServerMessage {
    if cause.len() > MAX_CAUSE {
        let mut end = MAX_CAUSE - 3;
        while !cause.is_char_boundary(end) {
            end -= 1;
        }
        cause.truncate(end);
        cause.push('…');
    }
    pb::ServerMessage {
        msg: Some(pb::server_message::Msg::Error(pb::Error { cause })),
    }
}

pub(crate) fn ok(ok: pb::Ok) -> pb::ServerMessage {
    pb::ServerMessage {
        msg: Some(pb::server_message::Msg::Ok(ok)),
    }
}

pub(crate) fn status_reply(status: crate::MonitorStatus) -> pb::ServerMessage {
    pb::ServerMessage {
        msg: Some(pb::server_message::Msg::Status(status.to_proto())),
    }
}
