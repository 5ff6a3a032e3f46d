//! One rank monitor per local rank, each a `MonitorServer` on a thread of
//! the launcher (measured against monitor processes in the README): the
//! launcher hears each monitor's log lines directly, so it knows when a
//! monitor terminated its rank and why, and when a rank registered.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nodeipc_monitor::{
    ControlClient, HealthCheck, LogLevel, MonitorConfig, MonitorServer, MonitorStatus, RankState,
    Shutdown, StopHandle,
};

use crate::{Error, Result};

/// What a monitor's log told the launcher about the current round.
#[derive(Debug, Default)]
pub(crate) struct Heard {
    /// The monitor terminated the rank: the timeout or check, elapsed and limit.
    pub(crate) fired: Option<String>,
    /// The rank registered (`Init`) this round.
    pub(crate) registered: bool,
}

/// A monitor thread and what the launcher needs to talk to it.
pub(crate) struct Monitor {
    socket: PathBuf,
    stop: StopHandle,
    thread: Option<JoinHandle<nodeipc_monitor::Result<Shutdown>>>,
    heard: Arc<Mutex<Heard>>,
}

/// The marker of the monitor's termination line, before which its cause is.
const FIRED: &str = "; terminating global rank";
/// The start of the monitor's lines about its rank's exit.
const EXITED: &str = "rank pid ";
/// The start of the monitor's registration line.
const REGISTERED: &str = "registered global rank";

impl Monitor {
    /// Binds `socket` (and its `.control`) and serves it on a new thread.
    pub(crate) fn start(
        local_rank: u32,
        socket: &Path,
        config: &MonitorConfig,
        checks: Vec<Box<dyn HealthCheck>>,
        stderr: bool,
    ) -> Result<Monitor> {
        let mut server = MonitorServer::bind(socket, config.clone())
            .map_err(|source| Error::Monitor { local_rank, source })?;
        for check in checks {
            server.add_health_check(BoxedCheck(check));
        }
        let heard = Arc::new(Mutex::new(Heard::default()));
        let sink = Arc::clone(&heard);
        server.on_log(move |level, line| {
            let mut heard = sink.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((cause, _)) = line.split_once(FIRED) {
                heard.fired = Some(cause.to_owned());
            } else if line.starts_with(REGISTERED) {
                heard.registered = true;
            } else if level == LogLevel::Warn && stderr && !line.starts_with(EXITED) {
                // (The rank's exit is the launcher's own event line.)
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "nodeipc launch: monitor of local rank {local_rank}: {}",
                    nodeipc_text::Printable(line)
                );
            }
        });
        let stop = server.stop_handle();
        let thread = std::thread::Builder::new()
            .name(format!("monitor-{local_rank}"))
            .spawn(move || server.run())
            .map_err(|e| Error::io("spawn a monitor thread", e))?;
        Ok(Monitor {
            socket: socket.to_owned(),
            stop,
            thread: Some(thread),
            heard,
        })
    }

    /// The rank socket's path.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// Forgets what was heard in the previous round; returns it.
    pub(crate) fn take_heard(&self) -> Heard {
        std::mem::take(&mut *self.heard.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether the monitor has terminated its rank this round, and why.
    pub(crate) fn fired(&self) -> Option<String> {
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .fired
            .clone()
    }

    /// Whether the rank has registered this round (by its log line, or,
    /// should that line have been rate-limited away, by its status).
    pub(crate) fn registered(&self, timeout: Duration) -> bool {
        if self
            .heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .registered
        {
            return true;
        }
        self.status(timeout)
            .is_ok_and(|s| matches!(s.state, RankState::Initialized | RankState::Running))
    }

    /// The monitor's status through its control socket.
    pub(crate) fn status(&self, timeout: Duration) -> nodeipc_monitor::Result<MonitorStatus> {
        ControlClient::connect(&self.socket, timeout)?.status()
    }

    /// Tells the monitor its rank is gone for this round (`close_connection`):
    /// the monitor drops the rank's connection and waits for the next.
    pub(crate) fn close_connection(&self, timeout: Duration) -> nodeipc_monitor::Result<()> {
        ControlClient::connect(&self.socket, timeout)?.close_connection()
    }

    /// Whether the server has stopped on its own (it never should while
    /// the launch runs: a failed `poll`, say); its result, once.
    pub(crate) fn ended(&mut self) -> Option<String> {
        if !self.thread.as_ref().is_some_and(|t| t.is_finished()) {
            return None;
        }
        let thread = self.thread.take()?;
        Some(match thread.join() {
            Ok(Ok(shutdown)) => format!("stopped ({shutdown})"),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "its thread panicked".to_owned(),
        })
    }

    /// Stops the server and waits for its thread; the socket files go.
    pub(crate) fn stop(&mut self) {
        self.stop.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `add_health_check` takes a concrete type; the launcher's checks are boxed.
struct BoxedCheck(Box<dyn HealthCheck>);

impl HealthCheck for BoxedCheck {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn check(
        &mut self,
        rank: &nodeipc_monitor::RankContext<'_>,
    ) -> std::result::Result<(), String> {
        self.0.check(rank)
    }
}
