//! Where the server's reports go: the [`log`] facade by default (target
//! [`LOG_TARGET`]), so a program embedding the monitor gets them in its own
//! logger; or a sink given to [`MonitorServer::on_log`](crate::MonitorServer::on_log).
//! (A monitor process of its own logs to standard error through
//! `nodeipc-monitor-host`'s `StderrLogger`.)
//!
//! Lines a client can cause at will (a connection, a malformed frame, a
//! refusal) are rate-limited per kind: the first [`LOG_BURST`] of a kind in
//! a [`LOG_WINDOW`] are written, then one line says that more are being
//! suppressed, and when the window ends one line says how many were. A
//! client that connects in a loop cannot fill the disk through the log.

use std::time::{Duration, Instant};

use log::Level;

use crate::limits::truncate;

/// How much a log line matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Normal operation: a rank registered, a connection closed in order.
    Info,
    /// Something a person should look at: a timeout fired, a connection was
    /// lost with sections open, a client was refused.
    Warn,
}

/// Lines of one kind written per window before the rest are suppressed.
pub(crate) const LOG_BURST: u32 = 10;

/// The rate limit's window.
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// Longest log line, in bytes; longer ones are cut, marked with `…`.
pub const MAX_LOG_LINE: usize = 4096;

/// The `log` target of every line the server writes.
pub const LOG_TARGET: &str = "nodeipc_monitor";

impl LogLevel {
    fn to_log(self) -> Level {
        match self {
            LogLevel::Info => Level::Info,
            LogLevel::Warn => Level::Warn,
        }
    }
}

type Sink = Box<dyn FnMut(LogLevel, &str) + Send>;

/// One kind's count in the current window.
struct Window {
    kind: &'static str,
    start: Instant,
    written: u32,
    suppressed: u64,
    level: LogLevel,
}

/// The server's log: one line per event, client-caused ones rate-limited.
pub(crate) struct Logger {
    sink: Option<Sink>,
    windows: Vec<Window>,
}

impl Logger {
    pub(crate) fn new() -> Logger {
        Logger {
            sink: None,
            windows: Vec::new(),
        }
    }

    pub(crate) fn set(&mut self, sink: Sink) {
        self.sink = Some(sink);
    }

    /// A line no client can repeat at will (start, shutdown, a timeout).
    pub(crate) fn info(&mut self, line: &str) {
        self.write(LogLevel::Info, line);
    }

    /// As [`info`](Logger::info), for a warning.
    pub(crate) fn warn(&mut self, line: &str) {
        self.write(LogLevel::Warn, line);
    }

    /// A line a client can cause again and again, rate-limited by `kind`.
    pub(crate) fn info_limited(&mut self, kind: &'static str, line: &str) {
        self.limited(LogLevel::Info, kind, line, Instant::now());
    }

    /// As [`info_limited`](Logger::info_limited), for a warning.
    pub(crate) fn warn_limited(&mut self, kind: &'static str, line: &str) {
        self.limited(LogLevel::Warn, kind, line, Instant::now());
    }

    fn limited(&mut self, level: LogLevel, kind: &'static str, line: &str, now: Instant) {
        self.tick(now);
        let i = match self.windows.iter().position(|w| w.kind == kind) {
            Some(i) => i,
            None => {
                self.windows.push(Window {
                    kind,
                    start: now,
                    written: 0,
                    suppressed: 0,
                    level,
                });
                self.windows.len() - 1
            }
        };
        let w = &mut self.windows[i];
        if now.saturating_duration_since(w.start) >= LOG_WINDOW {
            w.start = now;
            w.written = 0;
        }
        if w.written < LOG_BURST {
            w.written += 1;
            self.write(level, line);
            return;
        }
        w.suppressed += 1;
        w.level = w.level.max(level);
        if w.suppressed == 1 {
            let note = format!(
                "more than {LOG_BURST} {kind} messages within {} s: similar ones are suppressed for the rest of this window",
                LOG_WINDOW.as_secs()
            );
            self.write(level, &note);
        }
    }

    /// Writes the count of every window that has ended with lines suppressed.
    pub(crate) fn tick(&mut self, now: Instant) {
        let mut summaries = Vec::new();
        for w in &mut self.windows {
            if w.suppressed > 0 && now.saturating_duration_since(w.start) >= LOG_WINDOW {
                summaries.push((
                    w.level,
                    format!(
                        "suppressed {} similar {} messages in the last {} s",
                        w.suppressed,
                        w.kind,
                        LOG_WINDOW.as_secs()
                    ),
                ));
                w.start = now;
                w.written = 0;
                w.suppressed = 0;
                w.level = LogLevel::Info;
            }
        }
        for (level, line) in summaries {
            self.write(level, &line);
        }
    }

    /// When [`tick`](Logger::tick) has a count to write, if ever.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.windows
            .iter()
            .filter(|w| w.suppressed > 0)
            .filter_map(|w| w.start.checked_add(LOG_WINDOW))
            .min()
    }

    fn write(&mut self, level: LogLevel, line: &str) {
        // A line can quote what clients sent (64 section names, say) or what
        // a health check read: control characters are escaped, so one
        // record is one line, and each is cut, so that the rate limit bounds
        // the bytes, not just the lines.
        let escaped = nodeipc_text::printable(line);
        let cut;
        let line = if escaped.len() > MAX_LOG_LINE {
            cut = truncate(escaped.into_owned(), MAX_LOG_LINE);
            cut.as_str()
        } else {
            &escaped
        };
        match &mut self.sink {
            Some(sink) => sink(level, line),
            None => log::log!(target: LOG_TARGET, level.to_log(), "{line}"),
        }
    }
}

impl std::fmt::Debug for Logger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.sink.is_some() {
            "Logger(custom)"
        } else {
            "Logger(log facade)"
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::{LogLevel, Logger};

    /// What a check or a client said reaches the log escaped: one record,
    /// one line, no escape sequence for the terminal.
    #[test]
    fn regression_outside_text_in_a_log_line_is_escaped() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        let mut log = Logger::new();
        log.set(Box::new(move |_: LogLevel, line: &str| {
            seen.lock().unwrap().push(line.to_owned());
        }));
        log.warn("health check \"nic\" failed: down\nnodeipc launch: exit 0\u{1b}[2J");
        assert_eq!(
            *lines.lock().unwrap(),
            ["health check \"nic\" failed: down\\nnodeipc launch: exit 0\\u{1b}[2J"]
        );
    }
}
