//! [`StderrLogger`]: the `log` facade's logger for a monitor process of its
//! own (`nodeipc monitor serve`, a process [`spawn_monitor`](crate::spawn_monitor)
//! started): one line per record on standard error. The server's own rate
//! limit on lines a client can cause applies before a line gets here.

use std::io::Write;

use log::{Level, LevelFilter, Log, Metadata, Record};
use nodeipc_monitor::LOG_TARGET;

/// A `log` logger that writes each record at `Info` or above as one line
/// on standard error: `nodeipc-monitor[PID] info: …` (or `warning:`) for
/// the monitor's lines, `TARGET[PID] LEVEL: …` for others. What a monitor
/// process of its own logs through: [`serve`](crate::serve) and
/// [`run_if_server`](crate::run_if_server) install it unless the program
/// installed a logger first, and the `nodeipc` command installs it.
#[derive(Clone, Copy, Debug, Default)]
pub struct StderrLogger;

static STDERR_LOGGER: StderrLogger = StderrLogger;

impl StderrLogger {
    /// Makes it the process's logger at level `Info`, unless a logger is
    /// installed already (then that one is kept, with its level): `true`
    /// when this call installed it.
    pub fn install() -> bool {
        let installed = log::set_logger(&STDERR_LOGGER).is_ok();
        if installed {
            log::set_max_level(LevelFilter::Info);
        }
        installed
    }
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Info
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let pid = std::process::id();
        let tag = match record.level() {
            Level::Error => "error",
            Level::Warn => "warning",
            _ => "info",
        };
        let who = if record.target() == LOG_TARGET {
            "nodeipc-monitor"
        } else {
            record.target()
        };
        // Not `eprintln!`: it panics when standard error is a pipe whose
        // reader has gone, and a lost log line must not take the monitor
        // down with it. One `write` per line (the lock and a formatted
        // line), so lines of processes sharing the file never interleave.
        // Escaped: a record of another target may quote anything.
        let text = record.args().to_string();
        let line = format!(
            "{}[{pid}] {tag}: {}\n",
            nodeipc_text::Printable(who),
            nodeipc_text::Printable(&text)
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}
