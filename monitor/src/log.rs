//! Where the server's reports go: standard error by default, or a sink the
//! embedding program installs.

/// How much a log line matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// Normal operation: a rank registered, a connection closed in order.
    Info,
    /// Something a person should look at: a timeout fired, a connection was
    /// lost with sections open, a client was refused.
    Warn,
}

type Sink = Box<dyn FnMut(LogLevel, &str) + Send>;

/// The server's log: one line per event.
pub(crate) struct Logger {
    sink: Option<Sink>,
}

impl Logger {
    pub(crate) fn stderr() -> Logger {
        Logger { sink: None }
    }

    pub(crate) fn set(&mut self, sink: Sink) {
        self.sink = Some(sink);
    }

    pub(crate) fn info(&mut self, line: &str) {
        self.write(LogLevel::Info, line);
    }

    pub(crate) fn warn(&mut self, line: &str) {
        self.write(LogLevel::Warn, line);
    }

    fn write(&mut self, level: LogLevel, line: &str) {
        match &mut self.sink {
            Some(sink) => sink(level, line),
            None => {
                let tag = match level {
                    LogLevel::Info => "info",
                    LogLevel::Warn => "warning",
                };
                eprintln!("nodeipc-monitor[{}] {tag}: {line}", std::process::id());
            }
        }
    }
}

impl std::fmt::Debug for Logger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.sink.is_some() {
            "Logger(custom)"
        } else {
            "Logger(stderr)"
        })
    }
}
