//! Nobody can point the monitor at a process that is not theirs: the pid in
//! `Init` must be the connecting process (`SO_PEERCRED`) or a descendant of
//! it, and only our uid can connect at all.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Proc, Served, config, helper_command};
use nodeipc_monitor::{Error, MonitorClient, RankInfo, RankState};
use nodeipc_testkit::{NOBODY, Watchdog, is_root, skip, spawn_child};

const LINE: Duration = Duration::from_secs(20);

#[test]
fn a_spoofed_pid_is_refused_and_the_named_process_is_untouched() {
    let _dog = Watchdog::new("spoofed_pid", Duration::from_secs(60));
    let served = Served::spawn(
        "mon-spoof",
        &config(r#"{"initial_heartbeat_timeout_ms": 100, "heartbeat_timeout_ms": 100}"#),
    );
    // Someone else's process: a sibling of the spoofing client, not its descendant.
    let mut victim = Proc::spawn(Command::new("sleep").arg("30"));
    let targets = [
        ("a sibling", victim.pid()),
        ("the client's parent", std::process::id()),
        ("the monitor", served.monitor.pid()),
        ("init", 1),
    ];
    for (who, pid) in targets {
        let spoofer = Proc::spawn(
            helper_command()
                .arg("spoof")
                .arg("--socket")
                .arg(&served.socket)
                .arg("--pid")
                .arg(pid.to_string()),
        );
        let line = spoofer.expect_line("", LINE);
        assert!(
            line.starts_with("refused: "),
            "{who} (pid {pid}) was {line:?}"
        );
        assert!(line.contains(&format!("pid {pid} is neither")), "{line}");
        assert!(line.contains("SO_PEERCRED"), "{line}");
    }
    // Well past every timeout and several checks: nothing was signalled.
    std::thread::sleep(Duration::from_millis(600));
    assert!(victim.alive(), "the named process was signalled");
    let status = served.status();
    assert_eq!(status.state, RankState::Waiting, "{status:?}");
    assert_eq!(status.last_timeout, None);
    assert!(served.log().contains("Init refused"), "{}", served.log());
}

#[test]
fn a_descendant_of_the_client_may_be_the_rank_and_is_the_one_killed() {
    let _dog = Watchdog::new("descendant_rank", Duration::from_secs(60));
    let served = Served::spawn(
        "mon-desc",
        &config(r#"{"initial_heartbeat_timeout_ms": 300}"#),
    );
    let mut child = Proc::spawn(Command::new("sleep").arg("30"));
    let mut client = MonitorClient::connect(&served.socket, Duration::from_secs(10)).unwrap();
    let rank = RankInfo {
        pid: child.pid(),
        ..RankInfo::this_process(7, 0)
    };
    client.init(&rank).unwrap();
    let started = Instant::now();
    let registered = served.status();
    assert_eq!(registered.rank.as_ref().map(|r| r.pid), Some(child.pid()));
    // The child, not this process (the connection's owner), gets the signal.
    let status = child.wait_exit(Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(started.elapsed() <= Duration::from_millis(300 + 100 + 3000));
    served.wait_status(Duration::from_secs(5), |s| s.state == RankState::Terminated);
    // Its registration went with it; the connection was dropped.
    match client.heartbeat() {
        Err(Error::Frame { .. }) => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
}

#[test]
fn pid_zero_means_the_connecting_process() {
    let _dog = Watchdog::new("pid_zero", Duration::from_secs(60));
    let served = Served::spawn("mon-pid0", &config("{}"));
    let mut client = MonitorClient::connect(&served.socket, Duration::from_secs(10)).unwrap();
    let rank = RankInfo {
        pid: 0,
        ..RankInfo::this_process(1, 1)
    };
    client.init(&rank).unwrap();
    let status = client.status().unwrap();
    assert_eq!(status.rank.unwrap().pid, std::process::id());
}

#[test]
fn another_user_cannot_even_connect() {
    let _dog = Watchdog::new("other_user", Duration::from_secs(60));
    if !is_root()
        && skip(
            "another_user_cannot_even_connect",
            "needs root to run a child as nobody",
        )
    {
        return;
    }
    let served = Served::spawn("mon-nobody", &config("{}"));
    let mut command = helper_command();
    command
        .arg("spoof")
        .arg("--socket")
        .arg(&served.socket)
        .arg("--pid")
        .arg("1")
        .uid(NOBODY.0)
        .gid(NOBODY.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(served.status().state, RankState::Waiting);
}
