//! Clients that attack the monitor process as a whole: garbage connections
//! by the hundred and lines quoting what clients sent (the log must not
//! grow with them), and more connections
//! than the process has descriptors (accepting pauses; the registered rank
//! is still watched and killed on its timeout; the monitor keeps serving).

use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    InProcess, LOG_BURST, Proc, Served, config, helper, helper_command, raw, wait_status,
};
use nodeipc_monitor::{
    MAX_LOG_LINE, MAX_SECTION_NAME, MAX_SECTIONS, MonitorClient, MonitorConfig, RankInfo,
    RankState, control_socket_path,
};
use nodeipc_testkit::{TempDir, Watchdog, spawn_child};

#[test]
fn regression_garbage_connections_do_not_grow_the_log_without_bound() {
    let _dog = Watchdog::new("log_flood", Duration::from_secs(60));
    let served = Served::spawn("mon-logflood", &config("{}"));
    let control = control_socket_path(&served.socket);
    // Let the start-up lines land first.
    served.status();
    let before = served.log().len();
    let garbage = b"GET / HTTP/1.1\r\nHost: monitor\r\n\r\n";
    for i in 0..200 {
        let path = if i % 2 == 0 { &served.socket } else { &control };
        let mut stream = raw::connect(path);
        stream.write_all(garbage).unwrap();
        // Answered (an oversize "frame": "GET " read as a length), then closed.
        let cause = raw::error_cause(&mut stream);
        assert!(cause.contains("exceeds the limit"), "{cause}");
        raw::read_to_close(&mut stream);
    }
    served.status();
    let log = served.log();
    let grown = log.len() - before;
    // Before the fix: ~550 bytes a connection, 110 kB here. Now each kind
    // of line (connection, malformed frame, closed) is written at most
    // LOG_BURST times a window, plus one line saying more are suppressed.
    let kinds = 4;
    let bound = kinds * (LOG_BURST as usize + 1) * 300;
    assert!(
        grown <= bound,
        "the log grew by {grown} bytes for 200 garbage connections (bound {bound}):\n{}",
        &log[before..]
    );
    assert!(
        log.contains("similar ones are suppressed"),
        "{}",
        &log[before..]
    );
}

#[test]
fn regression_a_log_line_quoting_what_a_client_sent_is_cut() {
    let _dog = Watchdog::new("log_line_cap", Duration::from_secs(60));
    let server = InProcess::start(
        "mon-logline",
        MonitorConfig {
            check_interval: Duration::from_millis(50),
            ..MonitorConfig::default()
        },
    );
    let mut rank = MonitorClient::connect(&server.socket, Duration::from_secs(10)).unwrap();
    rank.init(&RankInfo::this_process(0, 0)).unwrap();
    // 64 names of 256 control characters, each escaped to 6 bytes in the
    // log: a 100 kB line when the connection goes, before the fix.
    for i in 0..MAX_SECTIONS {
        let name = format!("{i:02}{}", "\u{1}".repeat(MAX_SECTION_NAME - 2));
        rank.start_section(&name).unwrap();
    }
    drop(rank);
    server.wait_status(Duration::from_secs(10), |s| {
        s.state == RankState::Restarting
    });
    let lines = server.log.lock().unwrap().clone();
    let lost = lines
        .iter()
        .find(|l| l.contains("sections still open"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(lost.ends_with('…'), "{}", lost.len());
    for line in &lines {
        // The sink's own "Warn: " prefix comes on top.
        assert!(
            line.len() <= MAX_LOG_LINE + 8,
            "a line of {} bytes",
            line.len()
        );
    }
    server.finish();
}

#[test]
fn regression_running_out_of_descriptors_pauses_accepting_and_the_rank_is_still_killed() {
    let _dog = Watchdog::new("emfile", Duration::from_secs(90));
    let dir = TempDir::new("mon-emfile");
    let socket = dir.join("rank.sock");
    let config_file = dir.join("monitor.json");
    std::fs::write(
        &config_file,
        r#"{"heartbeat_timeout_ms": 1500, "check_interval_ms": 100}"#,
    )
    .unwrap();
    let log_path = dir.join("monitor.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut command = Command::new(helper());
    command
        .args(["monitor", "serve", "--socket"])
        .arg(&socket)
        .arg("--config")
        .arg(&config_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: runs between fork and exec and only calls setrlimit(2), which
    // is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            let limit = rustix::process::Rlimit {
                current: Some(32),
                maximum: Some(32),
            };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, limit)
                .map_err(std::io::Error::from)
        });
    }
    let mut monitor = spawn_child(&mut command);
    wait_status(&socket, Duration::from_secs(10), |_| true);

    // A rank that beats three times, then hangs: 1.5 s later it must die.
    let mut rank = Proc::spawn(
        helper_command()
            .arg("rank")
            .arg("--socket")
            .arg(&socket)
            .args(["--beats", "3", "--interval-ms", "20"]),
    );
    rank.expect_line("registered", Duration::from_secs(10));
    rank.expect_line("hung", Duration::from_secs(10));
    let hung = Instant::now();

    // More idle connections than the monitor has descriptors left. Before
    // the fix its first failed accept ended it ("accept failed … Too many
    // open files") and nobody watched the rank any more.
    let control = control_socket_path(&socket);
    let mut held = Vec::new();
    for i in 0..96 {
        let path = if i % 3 == 0 { &control } else { &socket };
        held.extend(raw::connect_nonblocking(path));
    }
    assert!(held.len() > 32, "only {} connections went in", held.len());
    // Accepting pauses rather than spins while the listening sockets stay
    // readable: the monitor is nearly idle.
    let hz = raw::ticks_per_second();
    let busy = raw::cpu_over(monitor.id(), Duration::from_secs(1));
    assert!(busy <= hz * 30 / 100, "{busy} ticks in 1 s ({hz} ticks/s)");

    // The timeout still fires: the rank is killed (SIGKILL, the default).
    let status = rank.wait_exit(Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    // Not killed early. The last beat came before the "hung" line was
    // read, by as much as the machine's load delayed the read: the bound
    // leaves room for that.
    assert!(hung.elapsed() >= Duration::from_millis(1000));
    assert!(
        monitor.child().try_wait().unwrap().is_none(),
        "the monitor exited:\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    // Descriptors come back: the status answers again.
    drop(held);
    let status = wait_status(&socket, Duration::from_secs(10), |_| true);
    assert_eq!(status.state, RankState::Terminated, "{status:?}");
    assert!(
        status
            .last_timeout
            .as_deref()
            .is_some_and(|t| t.contains("heartbeat timeout")),
        "{status:?}"
    );
    // And once it is over, the monitor is idle again (a pause that ended
    // must not leave the loop polling with a timeout in the past).
    let idle = raw::cpu_over(monitor.id(), Duration::from_secs(1));
    assert!(
        idle <= hz * 30 / 100,
        "{idle} ticks in 1 s after the shortage"
    );
    let text = std::fs::read_to_string(&log_path).unwrap();
    let pauses = text.matches("accepting pauses").count();
    assert!(
        (1..=LOG_BURST as usize).contains(&pauses),
        "{pauses} pause lines:\n{text}"
    );
    assert!(text.contains("Too many open files"), "{text}");
    // An orderly stop still removes both socket files.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(monitor.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(monitor.wait_timeout(Duration::from_secs(10)).success());
    assert!(!socket.exists() && !control.exists());
}
