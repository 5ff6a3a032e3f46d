//! A binary of its own, not a module of `tests/it/`: it installs the
//! process's one `log` logger (`log::set_logger`), which would then take the
//! lines of every test running beside it in one binary.
//!
//! A program that embeds the monitor gets its lines in its own `log`
//! logger (target `nodeipc_monitor`), rate-limited as before; a sink given
//! to `on_log` takes them instead; and `StderrLogger` never displaces the
//! program's logger.

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use log::{Level, LevelFilter, Log, Metadata, Record};
use nodeipc_monitor::{LOG_TARGET, MonitorConfig, MonitorServer};
use nodeipc_monitor_host::StderrLogger;
use nodeipc_testkit::{TempDir, Watchdog};

/// The server's rate limit on log lines a client can cause: lines of one
/// kind per window (the README's "Logging").
const LOG_BURST: u32 = 10;

/// The program's own logger: keeps every record.
struct Capture(Mutex<Vec<(Level, String, String)>>);

impl Log for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &Record<'_>) {
        self.0.lock().unwrap().push((
            record.level(),
            record.target().to_owned(),
            record.args().to_string(),
        ));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

fn lines_containing(fragment: &str) -> Vec<(Level, String, String)> {
    CAPTURE
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, line)| line.contains(fragment))
        .cloned()
        .collect()
}

/// Sends `count` undecodable frames on one rank connection, reading each
/// reply, then lets the server go.
fn serve_garbage(server: MonitorServer, count: usize) {
    let socket = server.socket_path().to_owned();
    let stop = server.stop_handle();
    let running = std::thread::spawn(move || server.run());
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut scratch = Vec::new();
    for _ in 0..count {
        stream.write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).unwrap();
        let _: nodeipc_proto::monitor::ServerMessage =
            nodeipc_proto::read_frame(&mut stream, nodeipc_monitor::MAX_FRAME, &mut scratch)
                .unwrap();
    }
    stop.stop();
    running.join().unwrap().unwrap();
}

#[test]
fn the_monitor_logs_through_the_programs_logger() {
    let _dog = Watchdog::new("log_facade", Duration::from_secs(60));
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(LevelFilter::Trace);
    assert!(
        !StderrLogger::install(),
        "the program's logger must be kept"
    );

    let dir = TempDir::new("mon-logfacade");
    let server = MonitorServer::bind(dir.join("rank.sock"), MonitorConfig::default()).unwrap();
    serve_garbage(server, 3 * LOG_BURST as usize);

    let serving = lines_containing("serving on");
    assert_eq!(serving.len(), 1, "{serving:?}");
    assert_eq!(serving[0].0, Level::Info);
    assert_eq!(serving[0].1, LOG_TARGET);
    let malformed = lines_containing("holds no valid message");
    assert_eq!(
        malformed.len(),
        LOG_BURST as usize,
        "rate-limited: {malformed:?}"
    );
    assert!(
        malformed
            .iter()
            .all(|(level, target, _)| *level == Level::Warn && target == LOG_TARGET)
    );
    assert_eq!(lines_containing("similar ones are suppressed").len(), 1);
    assert_eq!(lines_containing("shutting down").len(), 1);

    // A sink given to on_log takes the lines instead.
    let before = CAPTURE.0.lock().unwrap().len();
    let mut server = MonitorServer::bind(dir.join("sink.sock"), MonitorConfig::default()).unwrap();
    let sunk = std::sync::Arc::new(Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&sunk);
    server.on_log(move |_, line| sink.lock().unwrap().push(line.to_owned()));
    serve_garbage(server, 2);
    assert_eq!(
        CAPTURE.0.lock().unwrap().len(),
        before,
        "nothing through the facade"
    );
    let sunk = sunk.lock().unwrap();
    assert!(
        sunk.iter().any(|l| l.contains("holds no valid message")),
        "{sunk:?}"
    );
}
