//! `nodeipc demo` where the world is not kind: stopped by SIGTERM or SIGINT,
//! run under umask 000 with chmod forbidden, a temporary directory that does
//! not exist, a monitor killed under a worker, a small descriptor limit.
//! Whatever happens, it says why in words that name the cause and leaves
//! nothing in the temporary directory or `/dev/shm`.

use crate::common;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{alive, children, demo_command, demo_dir, monitor_of, stderr, wait_for};
use nodeipc_testkit::{Watchdog, shm_leftovers, spawn_child};
use rustix::process::Signal;

/// Requests enough to run for minutes: the test stops it.
const FOREVER: &str = "100000000";

/// Checks nothing of demo `pid` is left: no directory, no name.
fn assert_nothing_left(pid: u32) {
    let tmp = std::env::temp_dir();
    assert!(
        demo_dir(&tmp, pid).is_none(),
        "the demo left {:?}",
        demo_dir(&tmp, pid)
    );
    let shm = shm_leftovers(&format!("nodeipc-demo-{pid}-"));
    assert!(shm.is_empty(), "the demo left {shm:?} in /dev/shm");
}

/// Waits until demo `pid` serves requests: its directory exists and the
/// logon socket is gone (removed once every worker is in).
fn wait_until_serving(pid: u32) -> std::path::PathBuf {
    let tmp = std::env::temp_dir();
    let mut dir = None;
    wait_for("the demo serving requests", Duration::from_secs(30), || {
        dir = demo_dir(&tmp, pid);
        dir.as_ref()
            .is_some_and(|d| d.join("monitor-0.log").exists() && !d.join("logon.sock").exists())
    });
    dir.expect("found")
}

fn stop_with(signal: Signal, code: i32, name: &str, during_setup: bool) {
    let demo = spawn_child(&mut demo_command(
        &std::env::temp_dir(),
        &["--workers", "2", "--requests", FOREVER],
    ));
    let pid = demo.id();
    let tmp = std::env::temp_dir();
    let helpers = if during_setup {
        wait_for("the demo's directory", Duration::from_secs(30), || {
            demo_dir(&tmp, pid).is_some()
        });
        Vec::new()
    } else {
        let dir = wait_until_serving(pid);
        // Its directory and files as they are while it runs.
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(
            meta.is_dir() && meta.mode() & 0o7777 == 0o700,
            "{:o}",
            meta.mode()
        );
        for rank in 0..2 {
            let log = std::fs::symlink_metadata(dir.join(format!("monitor-{rank}.log"))).unwrap();
            assert!(log.file_type().is_file() && log.mode() & 0o7777 == 0o600);
            let socket =
                std::fs::symlink_metadata(dir.join(format!("monitor-{rank}.sock"))).unwrap();
            assert!(socket.file_type().is_socket());
        }
        children(pid)
    };
    let sent = Instant::now();
    common::signal(pid, signal);
    let out = demo.output_timeout(Duration::from_secs(30));
    let took = sent.elapsed();
    assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.lines().count() == 1 && err.contains(name), "{err:?}");
    let bound = if during_setup { 15 } else { 5 };
    assert!(took < Duration::from_secs(bound), "took {took:?} to stop");
    assert_nothing_left(pid);
    for helper in helpers {
        wait_for(
            "workers and monitors to exit",
            Duration::from_secs(5),
            || !alive(helper),
        );
    }
}

#[test]
fn regression_sigterm_stops_the_demo_in_order_and_leaves_nothing() {
    let _dog = Watchdog::new("demo SIGTERM", Duration::from_secs(120));
    stop_with(Signal::TERM, 143, "SIGTERM", false);
}

/// Any terminating signal stops the demo as SIGTERM does (regression:
/// SIGHUP, a closed terminal, and SIGUSR1 killed it with its directory
/// left behind).
#[test]
fn regression_sighup_and_sigusr1_stop_the_demo_in_order_too() {
    let _dog = Watchdog::new("demo SIGHUP", Duration::from_secs(240));
    stop_with(Signal::HUP, 129, "SIGHUP", false);
    stop_with(Signal::USR1, 138, "SIGUSR1", false);
}

#[test]
fn regression_sigint_during_setup_leaves_nothing() {
    let _dog = Watchdog::new("demo SIGINT", Duration::from_secs(120));
    stop_with(Signal::INT, 130, "SIGINT", true);
}

#[test]
fn regression_a_missing_temporary_directory_is_named() {
    let missing = "/nonexistent-nodeipc-tmpdir";
    let out = spawn_child(&mut demo_command(Path::new(missing), &["--requests", "1"]))
        .output_timeout(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.contains(&format!("{missing}/nodeipc-demo-")) && err.contains("No such file"),
        "{err}"
    );
}

/// A worker whose monitor is killed fails at its next socket heartbeat and
/// says so: the heartbeat to its monitor failed, not a request.
#[test]
fn regression_a_dead_monitor_is_blamed_for_the_failed_heartbeat() {
    let _dog = Watchdog::new("demo dead monitor", Duration::from_secs(120));
    let demo = spawn_child(&mut demo_command(
        &std::env::temp_dir(),
        &["--workers", "2", "--requests", FOREVER],
    ));
    let pid = demo.id();
    let dir = wait_until_serving(pid);
    let monitor = monitor_of(&children(pid), &dir.join("monitor-0.sock")).expect("monitor 0");
    common::signal(monitor, Signal::KILL);
    let out = demo.output_timeout(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let worker_line = err
        .lines()
        .find(|l| l.starts_with("nodeipc: demo worker 0:"))
        .unwrap_or_else(|| panic!("no line from worker 0: {err}"));
    assert!(
        worker_line.contains("heartbeat") && worker_line.contains("monitor-0.sock"),
        "{worker_line}"
    );
    let last = err.lines().last().unwrap();
    assert!(last.contains("worker 0"), "the coordinator blames: {last}");
    assert_nothing_left(pid);
}

/// Under umask 000 with every chmod by path refused (a seccomp filter), the
/// whole demo — its directory and logs, the regions, the rank group's socket
/// directory, every socket — must get its modes in the calls that create
/// them (or, for a socket, on its descriptor before `bind` gives it a name):
/// no path is ever made first and tightened after. Each layer's own part is
/// pinned under the stricter filter that refuses `fchmod` too, where it can
/// be: `demo::files::tests::regression_demo_dir_and_log_modes_are_set_by_the_creating_call`,
/// `barrier/private_dir`, `fs/fs::regression_private_dirs_and_files_get_their_mode_in_the_creating_call`.
#[test]
fn regression_demo_under_umask_000_with_chmod_refused() {
    let _dog = Watchdog::new("demo umask 000", Duration::from_secs(120));
    let mut command = demo_command(
        &std::env::temp_dir(),
        &["--workers", "2", "--requests", "100"],
    );
    // SAFETY: runs between fork and exec: umask and the seccomp filter
    // (prctl and seccomp calls) touch no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0);
            nodeipc_testkit::deny_path_chmod();
            Ok(())
        });
    }
    let demo = spawn_child(&mut command);
    let pid = demo.id();
    let out = demo.output_timeout(Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("left behind    nothing"));
    assert_nothing_left(pid);
}

/// Runs a small demo with at most `limit` descriptors; checks that a
/// failure names its cause (the errno's words) and claims no death.
fn run_with_descriptor_limit(limit: u64) {
    let mut command = demo_command(
        &std::env::temp_dir(),
        &["--workers", "2", "--requests", "100"],
    );
    // SAFETY: setrlimit between fork and exec touches no memory of the parent.
    unsafe {
        command.pre_exec(move || {
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let demo = spawn_child(&mut command);
    let pid = demo.id();
    let out = demo.output_timeout(Duration::from_secs(60));
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(101), "{err}");
    if !out.status.success() {
        assert!(
            err.contains("Too many open files"),
            "ulimit -n {limit}: {err}"
        );
        // A rank that runs out of descriptors itself fails and exits, and
        // its peers then rightly see it die: a death may be claimed only of
        // a process whose own failure, named with its cause, is reported too
        // (a live rank taken for dead is what this guards against). When the
        // demo itself (the coordinator) fails, every worker is killed with it
        // (its parent-death signal), so a worker may rightly see a sibling die
        // before it sees the coordinator leave.
        let coordinator_failed = err.lines().any(|line| {
            line.starts_with("nodeipc: ")
                && !line.starts_with("nodeipc: demo worker")
                && line.contains("Too many open files")
        });
        for claim in err.match_indices("(pid ").filter_map(|(at, _)| {
            let rest = &err[at + 5..];
            let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
            rest[pid.len()..].starts_with(") died").then_some(pid)
        }) {
            assert!(
                coordinator_failed
                    || err.contains(&format!("process {claim}: Too many open files")),
                "ulimit -n {limit}: pid {claim} claimed dead without its own failure: {err}"
            );
        }
        assert!(
            !err.contains("died") || err.contains(") died"),
            "ulimit -n {limit}: a death claimed without naming the process: {err}"
        );
    }
    assert_nothing_left(pid);
}

/// The limits at which the demo's own steps run out (making the channel,
/// its socket, the monitors' logs, starting the monitors).
#[test]
fn a_descriptor_limit_during_setup_is_reported_with_its_cause() {
    let _dog = Watchdog::new("demo ulimit -n setup", Duration::from_secs(120));
    for limit in 4..=14 {
        run_with_descriptor_limit(limit);
    }
}

/// The limits at which the layers below run out once workers log on: the
/// channel's handshake answered "could not duplicate its descriptors"
/// without the errno, and the rank group took `EMFILE` on `/proc/<pid>/stat`
/// for a death ("rank 1 died") of a live rank. A rank that runs out itself
/// and exits is seen dead by its peers, rightly: that claim must come with
/// the rank's own failure.
#[test]
fn regression_a_descriptor_limit_at_logon_is_reported_with_its_cause() {
    let _dog = Watchdog::new("demo ulimit -n logon", Duration::from_secs(120));
    for limit in 15..=20 {
        run_with_descriptor_limit(limit);
    }
}
