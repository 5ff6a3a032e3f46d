//! [`MonitorServer`]: the rank and control sockets and the single-threaded
//! event loop that serves them.
//!
//! One `poll` waits on everything: the two listening sockets, the rank's
//! connection, the rank's pidfd (an exit is seen at once), the control
//! connections, the clients waiting for the rank slot (only for hang-ups),
//! the shutdown signals and the stop handle's eventfd. Its timeout is the
//! next thing due: the periodic check, an escalation, a waiting client's
//! limit, a connection's deadline, the end of a pause in accepting.
//!
//! Nothing a client does can make the loop spin or hold what another needs:
//! a client is polled for input only while it has no reply waiting
//! (backpressure, see `conn.rs`); every connection must prove itself within
//! the first-message timeout; a listener is not polled while its
//! connections cannot be taken (no control slot free, no descriptor left).

mod accept;
mod rank;
mod serve;

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Listener, Pidfd, Signal};
use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::io::Errno;

use crate::bind::{self, control_socket_path};
use crate::conn::{Conn, Deadlines};
use crate::fastpath::ServerRegion;
use crate::logging::Logger;
use crate::tracker::RankTracker;
use crate::{Error, HealthCheck, LogLevel, MonitorConfig, Result};
use nodeipc_fdpass::StopSignals;

/// Why [`MonitorServer::run`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// One of the [`terminating_signals`](nodeipc_fdpass::terminating_signals)
    /// arrived: its number (a real-time one has no [`Signal`] name).
    Signal(i32),
    /// [`StopHandle::stop`] was called.
    Stopped,
}

impl std::fmt::Display for Shutdown {
    /// `SIGTERM`, or `stopped by its owner`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shutdown::Signal(signal) => f.write_str(&nodeipc_text::signal_name(*signal)),
            Shutdown::Stopped => f.write_str("stopped by its owner"),
        }
    }
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

/// The rank monitor server: binds `PATH` (the rank socket) and
/// `PATH.control` (the launcher's), then [`run`](MonitorServer::run)s until
/// stopped or signalled, removing both files when done.
///
/// The crate's example (its README) runs one on a thread.
pub struct MonitorServer {
    rank_socket: Listener,
    control_socket: Listener,
    wake: Arc<OwnedFd>,
    signals: Option<StopSignals>,
    health_checks: Vec<Box<dyn HealthCheck>>,
    log: Logger,
    /// The state machine: what the rank said and what it is owed.
    tracker: RankTracker,
    /// The registered rank's process: set exactly while the tracker has a
    /// rank (see [`sync_process`](MonitorServer::sync_process)).
    process: Option<Process>,
    /// The connection holding the rank slot.
    conn: Option<Conn>,
    /// Clients waiting for the rank slot, parked (nothing read).
    waiting: VecDeque<Conn>,
    controls: Vec<Conn>,
    next_check: Instant,
    /// Accepting is paused until then: the process ran out of descriptors
    /// or memory, and the listening sockets would stay readable.
    accept_paused_until: Option<Instant>,
    /// When the current shortage began and how many accepts it refused.
    shortage: Option<(Instant, u64)>,
}

/// What the server holds of the registered rank's process: signals go only
/// through its pidfd; its heartbeat region, if it got one.
#[derive(Debug)]
struct Process {
    pidfd: Pidfd,
    region: Option<ServerRegion>,
}

impl std::fmt::Debug for MonitorServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonitorServer")
            .field("socket", &self.rank_socket.path())
            .field("state", &self.tracker.state())
            .field("config", self.tracker.config())
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
            rank_socket,
            control_socket,
            wake: Arc::new(wake),
            signals: None,
            health_checks: Vec::new(),
            log: Logger::new(),
            tracker: RankTracker::new(config),
            process: None,
            conn: None,
            waiting: VecDeque::new(),
            controls: Vec::new(),
            next_check,
            accept_paused_until: None,
            shortage: None,
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
        self.tracker.config()
    }

    /// A handle that stops [`run`](MonitorServer::run) from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            wake: Arc::clone(&self.wake),
        }
    }

    /// Shuts down in order on any of the
    /// [`terminating_signals`](nodeipc_fdpass::terminating_signals) (SIGTERM,
    /// SIGINT, SIGHUP, SIGUSR1, ...): blocks them in the calling thread and
    /// reads them from a `signalfd` in the loop ([`StopSignals`]). Call it
    /// from the thread that will call `run`, before starting any other
    /// thread (threads started later inherit the mask); the previous mask
    /// is restored when the server is dropped.
    ///
    /// # Errors
    /// [`Error::Io`] from `pthread_sigmask` or `signalfd`.
    pub fn handle_shutdown_signals(&mut self) -> Result<()> {
        if self.signals.is_none() {
            self.signals = Some(StopSignals::install().map_err(|e| Error::io("signalfd", "", e))?);
        }
        Ok(())
    }

    /// As [`handle_shutdown_signals`](MonitorServer::handle_shutdown_signals),
    /// with signals the caller blocked already: a monitor process blocks
    /// them before its sockets exist, so that none can kill it with its
    /// socket files still in place.
    pub fn set_shutdown_signals(&mut self, signals: StopSignals) {
        self.signals = Some(signals);
    }

    /// Adds a check polled at every periodic check; a failure terminates
    /// the rank like a timeout.
    pub fn add_health_check(&mut self, check: impl HealthCheck + 'static) {
        self.health_checks.push(Box::new(check));
    }

    /// Sends log lines to `sink` instead of the `log` facade (where they go
    /// by default, target `nodeipc_monitor`); the rate limit applies alike.
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
            "serving on {} (control {}), check every {}",
            self.rank_socket.path().display(),
            self.control_socket.path().display(),
            nodeipc_text::duration(self.config().check_interval)
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
        // A pause that is over is forgotten: kept, its past end would make
        // every later poll return at once.
        if self.accept_paused_until.is_some_and(|at| now >= at) {
            self.accept_paused_until = None;
        }
        self.expire_connections(now);
        self.promote_waiter();
        self.expire_waiters(now);
        if now >= self.next_check {
            self.periodic_check(now);
            self.next_check = now + self.config().check_interval;
        } else if self.tracker.next_due().is_some_and(|at| now >= at) {
            // An escalation does not wait for the periodic check.
            let action = self.tracker.check(now);
            self.execute(action);
        }
        self.log.tick(now);
        Ok(None)
    }

    /// The limits every connection lives by.
    fn deadlines(&self) -> Deadlines {
        Deadlines {
            first_message: self.config().first_message_timeout,
            reply: self.config().reply_timeout,
        }
    }

    /// Until the next thing that is due: the periodic check, a waiting
    /// client's limit, an escalation, a connection's deadline, the end of a
    /// pause in accepting, a log summary.
    fn poll_timeout(&self, now: Instant) -> Duration {
        let mut deadline = self.next_check;
        let mut consider = |at: Option<Instant>| {
            if let Some(at) = at {
                deadline = deadline.min(at);
            }
        };
        consider(
            self.waiting
                .front()
                .and_then(|w| w.since.checked_add(self.config().connection_wait)),
        );
        consider(self.tracker.next_due());
        consider(self.conn.as_ref().and_then(Conn::deadline));
        for c in self.controls.iter().chain(&self.waiting) {
            consider(c.deadline());
        }
        consider(self.accept_paused_until);
        consider(self.log.next_due());
        // Only a moment still to come: a slot that can be given up now is
        // given up when a newcomer wakes the loop, not by waking it.
        consider(self.control_slot_frees_at(now).filter(|at| *at > now));
        deadline.saturating_duration_since(now)
    }

    fn wait(&self, timeout: Duration) -> Result<Ready> {
        let now = Instant::now();
        let accepting = self.accept_paused_until.is_none_or(|at| now >= at);
        let mut fds = Vec::with_capacity(8 + self.waiting.len() + self.controls.len());
        // A listener not to be accepted from is asked for nothing, so that
        // its pending connections do not wake the loop over and over.
        let listen = |yes: bool| {
            if yes {
                PollFlags::IN
            } else {
                PollFlags::empty()
            }
        };
        fds.push(PollFd::new(&self.rank_socket, listen(accepting)));
        fds.push(PollFd::new(
            &self.control_socket,
            listen(accepting && self.control_room(now)),
        ));
        fds.push(PollFd::new(&*self.wake, PollFlags::IN));
        let signals_at = self.signals.as_ref().map(|s| {
            fds.push(PollFd::new(s, PollFlags::IN));
            fds.len() - 1
        });
        let conn_at = self.conn.as_ref().map(|c| {
            fds.push(PollFd::new(c, c.poll_flags()));
            fds.len() - 1
        });
        let pidfd_at = self.process.as_ref().map(|p| {
            fds.push(PollFd::new(&p.pidfd, PollFlags::IN));
            fds.len() - 1
        });
        let controls_at = fds.len();
        for c in &self.controls {
            fds.push(PollFd::new(c, c.poll_flags()));
        }
        let waiting_at = fds.len();
        for w in &self.waiting {
            // Parked: no events asked, only a hang-up or an error is reported.
            fds.push(PollFd::new(w, w.poll_flags()));
        }
        match rustix::event::poll(&mut fds, Some(&nodeipc_shm::wait::timespec(timeout))) {
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
            && let Some(signal) = self.signals.as_ref().and_then(StopSignals::read)
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

    /// Orderly shutdown: connections closed (open sections reported),
    /// a pending escalation carried out, socket files removed on drop.
    fn close(&mut self, reason: Shutdown) {
        self.log.info(&format!("shutting down: {reason}"));
        if self.tracker.escalation_pending()
            && let (Some(process), Some(rank)) = (&self.process, self.tracker.rank())
        {
            let _ = process.pidfd.send_signal(Signal::KILL);
            self.log.warn(&format!(
                "rank pid {} had not exited after its termination signal: SIGKILL sent at shutdown",
                rank.pid
            ));
        }
        self.tracker.close(Instant::now());
        self.drain_notes();
        self.sync_process();
        self.conn = None;
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
