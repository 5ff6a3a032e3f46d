//! Real ranks (helper processes) against a real monitor process: each
//! timeout terminates the rank with the configured signal, within timeout +
//! check interval + 1 s.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use crate::common::{Served, config};
use nodeipc_monitor::RankState;
use nodeipc_testkit::Watchdog;

const LINE: Duration = Duration::from_secs(20);
const CHECK: Duration = Duration::from_millis(100);

/// Waits for the rank to die, checks the signal and the delay since `since`
/// against `timeout` (not before half of it, not after timeout + check + 1 s).
fn assert_killed(
    served: &Served,
    rank: &mut common::Proc,
    since: Instant,
    timeout: Duration,
    signal: i32,
) -> Duration {
    let status = rank.wait_exit(timeout + CHECK + Duration::from_secs(10));
    let elapsed = since.elapsed();
    assert_eq!(status.signal(), Some(signal), "rank ended with {status:?}");
    assert!(
        elapsed <= timeout + CHECK + Duration::from_secs(1),
        "killed after {elapsed:?}; limit {timeout:?} + {CHECK:?} + 1 s\n{}",
        served.log()
    );
    assert!(
        elapsed >= timeout / 2,
        "killed after {elapsed:?}, before its timeout {timeout:?}"
    );
    elapsed
}

fn terminated(served: &Served, fragment: &str) {
    let status = served.wait_status(Duration::from_secs(5), |s| s.state == RankState::Terminated);
    let last = status.last_timeout.clone().unwrap_or_default();
    assert!(
        last.contains(fragment),
        "last_timeout {last:?} lacks {fragment:?}"
    );
    assert!(last.contains("limit"), "{last:?}");
    assert!(status.rank.is_none(), "{status:?}");
    let log = served.log();
    assert!(log.contains(fragment), "log lacks {fragment:?}:\n{log}");
    assert!(log.contains("SIGCONT"), "{log}");
}

#[test]
fn a_rank_that_stops_heartbeating_is_killed() {
    let _dog = Watchdog::new(
        "a_rank_that_stops_heartbeating_is_killed",
        Duration::from_secs(60),
    );
    let served = Served::spawn("mon-hb", &config(r#"{"heartbeat_timeout_ms": 300}"#));
    let mut rank = served.rank(&["--beats", "5", "--then", "hang"]);
    rank.expect_line("registered", LINE);
    rank.expect_line("hung", LINE);
    let since = Instant::now();
    assert_eq!(served.status().heartbeats, 5);
    assert_killed(
        &served,
        &mut rank,
        since,
        Duration::from_millis(300),
        libc::SIGKILL,
    );
    terminated(&served, "heartbeat timeout");
}

#[test]
fn a_rank_that_never_sends_its_first_heartbeat_is_killed() {
    let _dog = Watchdog::new("first_heartbeat", Duration::from_secs(60));
    let served = Served::spawn(
        "mon-init",
        &config(r#"{"initial_heartbeat_timeout_ms": 400, "heartbeat_timeout_ms": 100}"#),
    );
    let mut rank = served.rank(&["--beats", "0", "--then", "hang"]);
    rank.expect_line("registered", LINE);
    let since = Instant::now();
    // The short heartbeat timeout does not apply before the first beat.
    assert_killed(
        &served,
        &mut rank,
        since,
        Duration::from_millis(400),
        libc::SIGKILL,
    );
    terminated(&served, "initial heartbeat timeout");
}

#[test]
fn a_rank_stuck_in_a_section_is_killed_while_it_heartbeats() {
    let _dog = Watchdog::new("stuck_in_section", Duration::from_secs(60));
    let served = Served::spawn(
        "mon-sect",
        &config(
            r#"{"heartbeat_timeout_ms": 2000, "section_timeouts_ms": {"step": 300, "other": 50}}"#,
        ),
    );
    let mut rank = served.rank(&[
        "--section",
        "step",
        "--beats",
        "0",
        "--then",
        "beat-forever",
    ]);
    rank.expect_line("registered", LINE);
    rank.expect_line("in-section", LINE);
    let since = Instant::now();
    rank.expect_line("beating", LINE);
    assert_killed(
        &served,
        &mut rank,
        since,
        Duration::from_millis(300),
        libc::SIGKILL,
    );
    terminated(&served, "section \"step\" timeout");
}

#[test]
fn a_rank_out_of_section_too_long_is_killed() {
    let _dog = Watchdog::new("out_of_section", Duration::from_secs(60));
    let served = Served::spawn(
        "mon-oos",
        &config(r#"{"heartbeat_timeout_ms": 2000, "out_of_section_timeout_ms": 300}"#),
    );
    let mut rank = served.rank(&["--beats", "0", "--then", "beat-forever"]);
    rank.expect_line("registered", LINE);
    let since = Instant::now();
    assert_killed(
        &served,
        &mut rank,
        since,
        Duration::from_millis(300),
        libc::SIGKILL,
    );
    terminated(&served, "out-of-section timeout");
}

#[test]
fn sigterm_escalates_to_sigkill_on_a_rank_that_ignores_it() {
    let _dog = Watchdog::new("escalation", Duration::from_secs(60));
    let served = Served::spawn(
        "mon-esc",
        &config(
            r#"{"heartbeat_timeout_ms": 200, "termination_signal": "SIGTERM", "kill_after_ms": 400}"#,
        ),
    );
    let mut rank = served.rank(&["--ignore-sigterm", "--beats", "2", "--then", "hang"]);
    rank.expect_line("registered", LINE);
    rank.expect_line("hung", LINE);
    let since = Instant::now();
    rank.expect_line("sigterm", Duration::from_secs(5));
    let got_sigterm = since.elapsed();
    let timed_out = served.status();
    assert_eq!(timed_out.state, RankState::TimedOut, "{timed_out:?}");
    let status = rank.wait_exit(Duration::from_secs(10));
    let elapsed = since.elapsed();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert!(
        elapsed >= got_sigterm + Duration::from_millis(300),
        "SIGKILL came {:?} after SIGTERM; grace is 400 ms",
        elapsed - got_sigterm
    );
    assert!(elapsed <= Duration::from_millis(200 + 400) + CHECK + Duration::from_secs(3));
    terminated(&served, "heartbeat timeout");
    assert!(served.log().contains("SIGKILL sent"), "{}", served.log());
}

#[test]
fn a_rank_that_obeys_sigterm_dies_of_it() {
    let _dog = Watchdog::new("sigterm_obeyed", Duration::from_secs(60));
    let served = Served::spawn(
        "mon-term",
        &config(
            r#"{"heartbeat_timeout_ms": 200, "termination_signal": 15, "kill_after_ms": 5000}"#,
        ),
    );
    let mut rank = served.rank(&["--beats", "1", "--then", "hang"]);
    rank.expect_line("registered", LINE);
    rank.expect_line("hung", LINE);
    let since = Instant::now();
    assert_killed(
        &served,
        &mut rank,
        since,
        Duration::from_millis(200),
        libc::SIGTERM,
    );
    terminated(&served, "heartbeat timeout");
}

#[test]
fn a_rank_on_the_shared_memory_path_that_stops_beating_is_killed() {
    let _dog = Watchdog::new("fast_path_hang", Duration::from_secs(60));
    let served = Served::spawn("mon-fast", &config(r#"{"heartbeat_timeout_ms": 300}"#));
    let mut rank = served.rank(&[
        "--fast",
        "--beats",
        "20",
        "--interval-ms",
        "20",
        "--then",
        "hang",
    ]);
    rank.expect_line("registered", LINE);
    // Beating through memory keeps it alive well past the timeout.
    let running = served.wait_status(Duration::from_secs(5), |s| s.heartbeats > 0);
    assert_eq!(running.state, RankState::Running);
    rank.expect_line("hung", LINE);
    let since = Instant::now();
    let status = served.status();
    assert_eq!(status.heartbeats, 20, "{status:?}");
    // The last beats are seen up to one check late: the timeout counts from then.
    assert_killed(
        &served,
        &mut rank,
        since,
        Duration::from_millis(300),
        libc::SIGKILL,
    );
    terminated(&served, "heartbeat timeout");
}

/// The state letter of `/proc/PID/stat` (`T`: stopped), if the process is there.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold anything, ')' too: the state follows the last one.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn a_stopped_rank_is_continued_so_that_its_termination_signal_kills_it() {
    let _dog = Watchdog::new("stopped_rank", Duration::from_secs(60));
    // SIGTERM and no escalation: only SIGCONT can let a stopped rank die.
    let timeout = Duration::from_millis(600);
    let served = Served::spawn(
        "mon-stopped",
        &config(r#"{"heartbeat_timeout_ms": 600, "termination_signal": "SIGTERM"}"#),
    );
    let mut rank = served.rank(&["--beats", "1", "--then", "hang"]);
    rank.expect_line("registered", LINE);
    rank.expect_line("hung", LINE);
    let since = Instant::now();
    let pid = rank.pid();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).expect("a child's pid"),
        rustix::process::Signal::STOP,
    )
    .expect("SIGSTOP to the rank");
    let stopping = Instant::now();
    while process_state(pid) != Some('T') {
        assert!(
            stopping.elapsed() < Duration::from_secs(2),
            "rank pid {pid} not stopped after SIGSTOP: state {:?}",
            process_state(pid)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The rank was stopped before the monitor fired, or this proves nothing.
    let before = served.status();
    assert_eq!(
        before.state,
        RankState::Running,
        "the monitor fired before the rank was stopped: {before:?}"
    );
    assert_eq!(before.kill_after_ms, None, "{before:?}");
    assert_eq!(before.termination_signal, libc::SIGTERM, "{before:?}");

    // A stopped process does not act on SIGTERM until it is continued.
    let limit = timeout + CHECK + Duration::from_secs(1);
    let status = loop {
        if let Some(status) = rank.guard.child().try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            since.elapsed() <= limit + Duration::from_secs(4),
            "rank pid {pid} still alive {:?} after its last heartbeat (state {:?}): \
             the monitor did not continue it before its SIGTERM\n{}",
            since.elapsed(),
            process_state(pid),
            served.log()
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    let elapsed = since.elapsed();
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "the stopped rank ended with {status:?}, not SIGTERM"
    );
    assert!(
        elapsed <= limit,
        "the stopped rank died {elapsed:?} after its last beat; limit {limit:?}\n{}",
        served.log()
    );
    assert!(
        elapsed >= timeout / 2,
        "killed after {elapsed:?}, before its timeout {timeout:?}"
    );
    terminated(&served, "heartbeat timeout");
    let log = served.log();
    assert!(log.contains("with SIGCONT then SIGTERM"), "{log}");
    assert!(
        !log.contains("SIGKILL"),
        "escalation was not configured:\n{log}"
    );
}
