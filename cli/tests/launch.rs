//! `nodeipc launch` across real processes: the launcher is the `nodeipc`
//! binary, each rank this test binary run again as `rank_helper` with a
//! role in its environment. Every test has a watchdog, its own run
//! directory, and checks that nothing it started is left.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nodeipc_monitor::{MonitorClient, RankInfo};
use nodeipc_testkit::{ChildGuard, TempDir, Watchdog, spawn_child};

const ROLE: &str = "NODEIPC_LAUNCH_TEST_ROLE";
const DIR: &str = "NODEIPC_LAUNCH_TEST_DIR";

/// A rank program for the tests below, not a test: they run it (with
/// `--ignored`) as each rank, its behaviour chosen by `ROLE`.
#[test]
#[ignore = "a rank program the launch tests run"]
fn rank_helper() {
    let role = std::env::var(ROLE).expect("run by the launch tests with a role");
    let dir = PathBuf::from(std::env::var(DIR).expect("a test directory"));
    let rank: u32 = env_num("NODEIPC_RANK");
    let restart: u32 = env_num("NODEIPC_RESTART_COUNT");
    match role.as_str() {
        "env" => {
            let names = [
                "NODEIPC_RANK",
                "NODEIPC_LOCAL_RANK",
                "NODEIPC_WORLD_SIZE",
                "NODEIPC_LOCAL_WORLD_SIZE",
                "NODEIPC_MONITOR_SOCKET",
                "NODEIPC_RESTART_COUNT",
                "NODEIPC_GROUP",
                "RANK",
                "LOCAL_RANK",
                "WORLD_SIZE",
                "LOCAL_WORLD_SIZE",
                "MASTER_ADDR",
                "MASTER_PORT",
            ];
            let text: String = names
                .iter()
                .map(|n| format!("{n}={}\n", std::env::var(n).unwrap_or_default()))
                .collect();
            write_atomic(&dir.join(format!("env-{rank}-{restart}")), &text);
            // The launch's working directory is ours.
            write_atomic(
                &dir.join(format!("cwd-{rank}")),
                &std::env::current_dir().unwrap().display().to_string(),
            );
        }
        "rank1-exits-3" => {
            if rank == 1 {
                std::process::exit(3);
            }
            std::thread::sleep(Duration::from_secs(30));
        }
        "rank0-killed" => {
            if rank == 0 {
                let me = rustix::process::getpid();
                rustix::process::kill_process(me, rustix::process::Signal::KILL).unwrap();
            }
            std::thread::sleep(Duration::from_secs(30));
        }
        "hang-first" => {
            let socket = std::env::var("NODEIPC_MONITOR_SOCKET").unwrap();
            let mut client = MonitorClient::connect(&socket, Duration::from_secs(5)).unwrap();
            client.init(&RankInfo::this_process(rank, rank)).unwrap();
            if rank == 0 && restart == 0 {
                // Registered, then never a heartbeat: the monitor fires.
                std::thread::sleep(Duration::from_secs(30));
            }
            client.heartbeat().unwrap();
        }
        "grandchildren" => {
            // One grandchild in our process group, one that leaves it
            // (setsid): the launcher's subreaper role must find both.
            let mut pids = vec![std::process::id()];
            for leave_group in [false, true] {
                let mut command = Command::new("sleep");
                command.arg("30");
                if leave_group {
                    use std::os::unix::process::CommandExt;
                    // SAFETY: setsid is async-signal-safe and touches no
                    // memory of the parent; it runs in the child only.
                    unsafe {
                        command.pre_exec(|| {
                            rustix::process::setsid()
                                .map(drop)
                                .map_err(std::io::Error::from)
                        });
                    }
                }
                let child = command.spawn().unwrap();
                pids.push(child.id());
                std::mem::forget(child);
            }
            let text: Vec<String> = pids.iter().map(u32::to_string).collect();
            write_atomic(&dir.join(format!("pids-{rank}")), &text.join(" "));
            std::thread::sleep(Duration::from_secs(30));
        }
        "other-group" => {
            // The rank leaves the process group the launcher made for it
            // (a group leader cannot setsid; it can join another group of
            // its session: the launcher's).
            let launcher = rustix::process::getppid().unwrap();
            let group = rustix::process::getpgid(Some(launcher)).unwrap();
            rustix::process::setpgid(None, Some(group)).unwrap();
            write_atomic(
                &dir.join(format!("pids-{rank}")),
                &std::process::id().to_string(),
            );
            std::thread::sleep(Duration::from_secs(30));
        }
        "ignore-term" => {
            // SAFETY: SIG_IGN for SIGTERM in this single-purpose process;
            // no handler runs.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            write_atomic(
                &dir.join(format!("pids-{rank}")),
                &std::process::id().to_string(),
            );
            std::thread::sleep(Duration::from_secs(30));
        }
        "registers-then-stays-away" => {
            // Round 0: rank 0 registers, then fails. Round 1: it runs but
            // never registers again.
            if restart == 0 {
                let socket = std::env::var("NODEIPC_MONITOR_SOCKET").unwrap();
                let mut client = MonitorClient::connect(&socket, Duration::from_secs(5)).unwrap();
                client.init(&RankInfo::this_process(rank, rank)).unwrap();
                client.heartbeat().unwrap();
                if rank == 0 {
                    std::process::exit(1);
                }
            }
            std::thread::sleep(Duration::from_secs(30));
        }
        "silent-then-slow" => {
            // Never speaks the protocol: round 0 rank 0 fails, round 1
            // every rank takes a while, then succeeds.
            if restart == 0 && rank == 0 {
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(800));
        }
        "registered-until-restart" => {
            // Round 0: registered (health checks run), ready, waiting.
            // Round 1: done at once, without registering.
            if restart == 0 {
                let socket = std::env::var("NODEIPC_MONITOR_SOCKET").unwrap();
                let mut client = MonitorClient::connect(&socket, Duration::from_secs(5)).unwrap();
                client.init(&RankInfo::this_process(rank, rank)).unwrap();
                client.heartbeat().unwrap();
                write_atomic(
                    &dir.join(format!("pids-{rank}")),
                    &std::process::id().to_string(),
                );
                std::thread::sleep(Duration::from_secs(30));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn env_num(name: &str) -> u32 {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} set by the launcher"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} a number"))
}

fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

/// `nodeipc launch ARGS -- <this binary as rank_helper>` in `dir`, the
/// role in the environment; run dir and events file inside `dir`.
fn launch_command(dir: &TempDir, role: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeipc"));
    command
        .arg("launch")
        .args(["--run-dir", dir.path().to_str().unwrap()])
        .args(["--json-events", dir.join("events.jsonl").to_str().unwrap()])
        .args(args)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "rank_helper", "--ignored", "--nocapture", "-q"])
        .env(ROLE, role)
        .env(DIR, dir.path())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

fn run(dir: &TempDir, role: &str, args: &[&str]) -> Output {
    spawn_child(&mut launch_command(dir, role, args)).output_timeout(Duration::from_secs(60))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The events file's lines, parsed.
fn events(dir: &TempDir) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count(events: &[serde_json::Value], kind: &str) -> usize {
    events.iter().filter(|e| e["event"] == kind).count()
}

/// Nothing of the launch is left in `dir`: its run directory (sockets) is
/// gone, only the test's own files remain.
fn assert_no_run_dir(dir: &TempDir) {
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nodeipc-launch-"))
        .collect();
    assert!(left.is_empty(), "run directory left behind: {left:?}");
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_owned()))
        .is_some_and(|rest| !rest.starts_with('Z'))
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pids every rank wrote to `pids-<rank>`, once all have.
fn rank_pids(dir: &TempDir, nproc: u32) -> Vec<u32> {
    wait_for("every rank wrote its pids", Duration::from_secs(20), || {
        (0..nproc).all(|r| dir.join(&format!("pids-{r}")).exists())
    });
    (0..nproc)
        .flat_map(|r| {
            std::fs::read_to_string(dir.join(&format!("pids-{r}")))
                .unwrap()
                .split_whitespace()
                .map(|p| p.parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn sigterm(child: &ChildGuard) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
}

#[test]
fn every_rank_exits_0_with_the_environment_of_nodeipc_and_torchrun() {
    let _watchdog = Watchdog::new("launch env", Duration::from_secs(60));
    let dir = TempDir::new("launch-env");
    let out = run(&dir, "env", &["--nproc", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut groups = Vec::new();
    let mut ports = Vec::new();
    for rank in 0..3u32 {
        let text = std::fs::read_to_string(dir.join(&format!("env-{rank}-0"))).unwrap();
        let var = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .unwrap()
                .to_owned()
        };
        assert_eq!(var("NODEIPC_RANK"), rank.to_string());
        assert_eq!(var("RANK"), rank.to_string());
        assert_eq!(var("NODEIPC_LOCAL_RANK"), rank.to_string());
        assert_eq!(var("LOCAL_RANK"), rank.to_string());
        assert_eq!(var("NODEIPC_WORLD_SIZE"), "3");
        assert_eq!(var("WORLD_SIZE"), "3");
        assert_eq!(var("LOCAL_WORLD_SIZE"), "3");
        assert_eq!(var("NODEIPC_LOCAL_WORLD_SIZE"), "3");
        assert_eq!(var("NODEIPC_RESTART_COUNT"), "0");
        assert_eq!(var("MASTER_ADDR"), "127.0.0.1");
        let socket = var("NODEIPC_MONITOR_SOCKET");
        assert!(
            socket.starts_with(dir.path().join("nodeipc-launch-").to_str().unwrap())
                && socket.ends_with(&format!("rank{rank}.sock")),
            "{socket}"
        );
        groups.push(var("NODEIPC_GROUP"));
        ports.push(var("MASTER_PORT"));
        assert_eq!(
            std::fs::read_to_string(dir.join(&format!("cwd-{rank}"))).unwrap(),
            dir.path().display().to_string()
        );
    }
    assert!(groups.iter().all(|g| *g == groups[0] && !g.is_empty()));
    assert!(
        ports
            .iter()
            .all(|p| *p == ports[0] && p.parse::<u16>().unwrap() > 0)
    );
    let events = events(&dir);
    assert_eq!(count(&events, "rank_started"), 3);
    assert_eq!(count(&events, "rank_exited"), 3);
    assert_eq!(events.last().unwrap()["exit_code"], 0);
    assert_no_run_dir(&dir);
}

#[test]
fn a_rank_that_always_exits_3_is_restarted_k_times_then_launch_exits_3_naming_it() {
    let _watchdog = Watchdog::new("launch exit 3", Duration::from_secs(60));
    let dir = TempDir::new("launch-exit3");
    let out = run(
        &dir,
        "rank1-exits-3",
        &["--nproc", "3", "--max-restarts", "2", "--stop-timeout", "2"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.contains("rank 1 (local 1) exited with 3")
            && last.contains("restarts exhausted (2/2)"),
        "{last}"
    );
    let events = events(&dir);
    assert_eq!(count(&events, "round_started"), 3);
    assert_eq!(count(&events, "restarting"), 2);
    assert_eq!(count(&events, "round_failed"), 3);
    assert!(
        events
            .iter()
            .filter(|e| e["event"] == "round_failed")
            .all(|e| e["rank"] == 1)
    );
    // NODEIPC_GROUP differs from round to round.
    let groups: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "round_started")
        .map(|e| e["group"].as_str().unwrap())
        .collect();
    assert!(
        groups[0] != groups[1] && groups[1] != groups[2],
        "{groups:?}"
    );
    assert_no_run_dir(&dir);
}

#[test]
fn a_rank_killed_by_a_signal_makes_launch_exit_128_plus_the_signal() {
    let _watchdog = Watchdog::new("launch signal", Duration::from_secs(60));
    let dir = TempDir::new("launch-sig");
    let out = run(
        &dir,
        "rank0-killed",
        &["--nproc", "2", "--stop-timeout", "2"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(128 + libc::SIGKILL), "{err}");
    assert!(err.contains("rank 0 (local 0) killed by signal 9"), "{err}");
    assert_no_run_dir(&dir);
}

#[test]
fn a_rank_that_hangs_without_heartbeats_is_fired_by_its_monitor_and_the_round_restarts() {
    let _watchdog = Watchdog::new("launch hang", Duration::from_secs(60));
    let dir = TempDir::new("launch-hang");
    let config = dir.join("monitor.json");
    std::fs::write(
        &config,
        r#"{ "initial_heartbeat_timeout_ms": 300, "check_interval_ms": 50,
             "termination_signal": "SIGTERM" }"#,
    )
    .unwrap();
    let out = run(
        &dir,
        "hang-first",
        &[
            "--nproc",
            "2",
            "--max-restarts",
            "1",
            "--stop-timeout",
            "2",
            "--monitor-config",
            config.to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("monitor of rank 0 terminated it: initial heartbeat timeout"),
        "{err}"
    );
    let events = events(&dir);
    assert_eq!(count(&events, "restarting"), 1);
    let fired: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "monitor_fired")
        .collect();
    assert_eq!(fired.len(), 1, "{events:?}");
    assert_eq!(fired[0]["rank"], 0);
    assert_eq!(fired[0]["restart"], 0);
    // From the monitor's decision to every rank stopped: SIGTERM kills the
    // helper at once, so far less than the 2 s stop timeout.
    let stopped = events
        .iter()
        .find(|e| e["event"] == "round_stopped")
        .unwrap();
    assert!(stopped["stop_ms"].as_f64().unwrap() < 1000.0, "{stopped}");
    assert_no_run_dir(&dir);
}

#[test]
fn sigterm_to_launch_stops_ranks_and_grandchildren_even_outside_their_group() {
    let _watchdog = Watchdog::new("launch sigterm", Duration::from_secs(60));
    let dir = TempDir::new("launch-term");
    let mut launch = spawn_child(&mut launch_command(
        &dir,
        "grandchildren",
        &["--nproc", "2", "--stop-timeout", "2"],
    ));
    let pids = rank_pids(&dir, 2);
    assert_eq!(pids.len(), 6);
    assert!(pids.iter().all(|&p| alive(p)));
    let sent = Instant::now();
    sigterm(&launch);
    let status = launch.wait_timeout(Duration::from_secs(10));
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    // Every process is gone (the setsid grandchild needed the subreaper).
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "left alive: {left:?}");
    assert!(took < Duration::from_secs(2), "stop took {took:?}");
    let events = events(&dir);
    assert_eq!(count(&events, "signal"), 1);
    assert_no_run_dir(&dir);
}

#[test]
fn a_rank_that_ignores_sigterm_gets_sigkill_after_the_stop_timeout() {
    let _watchdog = Watchdog::new("launch sigkill", Duration::from_secs(60));
    let dir = TempDir::new("launch-kill");
    let mut launch = spawn_child(&mut launch_command(
        &dir,
        "ignore-term",
        &["--nproc", "2", "--stop-timeout", "0.5"],
    ));
    let pids = rank_pids(&dir, 2);
    let sent = Instant::now();
    sigterm(&launch);
    let status = launch.wait_timeout(Duration::from_secs(10));
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(pids.iter().all(|&p| !alive(p)));
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let events = events(&dir);
    let stopped = events
        .iter()
        .find(|e| e["event"] == "round_stopped")
        .unwrap();
    assert_eq!(stopped["killed"], 2, "{stopped}");
    assert_no_run_dir(&dir);
}

#[test]
fn absurd_arguments_are_refused_with_one_line_naming_them() {
    let _watchdog = Watchdog::new("launch args", Duration::from_secs(60));
    let dir = TempDir::new("launch-args");
    for (args, expect) in [
        (vec!["--nproc", "0"], "--nproc 0 is out of range"),
        (vec!["--nproc", "100000"], "--nproc 100000 is out of range"),
        (vec!["--nproc", "1", "--stop-timeout", "0"], "out of range"),
        (
            vec!["--nproc", "1", "--stop-timeout", "nan"],
            "out of range",
        ),
    ] {
        let out = run(&dir, "env", &args);
        let err = stderr(&out);
        assert!(matches!(out.status.code(), Some(1 | 2)), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(expect), "{args:?}: {err}");
    }
    // Nothing was started.
    assert!(!dir.join("env-0-0").exists());
    assert_no_run_dir(&dir);
}

#[test]
fn sigint_to_launch_stops_everything_and_exits_130() {
    let _watchdog = Watchdog::new("launch sigint", Duration::from_secs(60));
    let dir = TempDir::new("launch-int");
    let mut launch = spawn_child(&mut launch_command(
        &dir,
        "grandchildren",
        &["--nproc", "2", "--stop-timeout", "5"],
    ));
    let pids = rank_pids(&dir, 2);
    let pid = rustix::process::Pid::from_raw(launch.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = launch.wait_timeout(Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGINT));
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "left alive: {left:?}");
    assert_no_run_dir(&dir);
}

#[test]
fn a_restarted_rank_that_registered_before_and_stays_away_fails_the_round() {
    let _watchdog = Watchdog::new("launch restart check", Duration::from_secs(60));
    let dir = TempDir::new("launch-back");
    let out = run(
        &dir,
        "registers-then-stays-away",
        &[
            "--nproc",
            "2",
            "--max-restarts",
            "1",
            "--stop-timeout",
            "2",
            "--rank-restart-timeout",
            "0.5",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rank 0 has not registered again after"),
        "{err}"
    );
    let last = err.lines().last().unwrap();
    assert!(
        last.contains("rank 0 (local 0) did not register with its monitor again within --rank-restart-timeout 0.5 s"),
        "{last}"
    );
    assert_no_run_dir(&dir);
}

#[test]
fn the_restart_check_leaves_alone_a_rank_that_never_spoke_the_protocol() {
    let _watchdog = Watchdog::new("launch restart check off", Duration::from_secs(60));
    let dir = TempDir::new("launch-silent");
    let out = run(
        &dir,
        "silent-then-slow",
        &[
            "--nproc",
            "2",
            "--max-restarts",
            "1",
            "--stop-timeout",
            "2",
            "--rank-restart-timeout",
            "0.2",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("not registered again"), "{err}");
    assert_no_run_dir(&dir);
}

#[test]
fn a_nic_that_goes_down_mid_run_restarts_the_round() {
    let _watchdog = Watchdog::new("launch nic", Duration::from_secs(60));
    let dir = TempDir::new("launch-nic");
    let sys = dir.join("sys");
    let operstate = sys.join("class/net/eth0/operstate");
    std::fs::create_dir_all(operstate.parent().unwrap()).unwrap();
    std::fs::write(&operstate, "up\n").unwrap();
    let config = dir.join("monitor.json");
    std::fs::write(
        &config,
        r#"{ "check_interval_ms": 50, "termination_signal": "SIGTERM" }"#,
    )
    .unwrap();
    let mut launch = spawn_child(&mut launch_command(
        &dir,
        "registered-until-restart",
        &[
            "--nproc",
            "2",
            "--max-restarts",
            "1",
            "--stop-timeout",
            "2",
            "--monitor-config",
            config.to_str().unwrap(),
            "--nic",
            "eth0",
            "--sysfs-root",
            sys.to_str().unwrap(),
            "--health-interval",
            "0.05",
        ],
    ));
    rank_pids(&dir, 2);
    std::fs::write(&operstate, "down\n").unwrap();
    let status = launch.wait_timeout(Duration::from_secs(20));
    let events = events(&dir);
    assert_eq!(status.code(), Some(0), "{events:?}");
    let fired: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "monitor_fired")
        .collect();
    assert!(!fired.is_empty(), "{events:?}");
    assert!(
        fired[0]["cause"]
            .as_str()
            .unwrap()
            .contains("NIC eth0 is down"),
        "{fired:?}"
    );
    assert_eq!(count(&events, "restarting"), 1);
    assert_no_run_dir(&dir);
}

#[test]
fn a_gpu_check_without_nvml_is_reported_unavailable_and_the_launch_runs() {
    let _watchdog = Watchdog::new("launch gpu", Duration::from_secs(60));
    if nodeipc_monitor::Nvml::load().is_ok() {
        // A machine with NVML runs the check for real; this test is about
        // one without.
        nodeipc_testkit::skip("launch gpu unavailable", "NVML is installed here");
        return;
    }
    let dir = TempDir::new("launch-gpu");
    let out = run(&dir, "env", &["--nproc", "2", "--gpu-health"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let events = events(&dir);
    assert_eq!(count(&events, "health_unavailable"), 2, "{events:?}");
    assert!(err.contains("libnvidia-ml.so.1"), "{err}");
    assert_no_run_dir(&dir);
}

#[test]
fn a_nic_that_is_not_there_is_refused_at_start() {
    let _watchdog = Watchdog::new("launch nic missing", Duration::from_secs(60));
    let dir = TempDir::new("launch-nic-missing");
    std::fs::create_dir_all(dir.join("sys")).unwrap();
    let out = run(
        &dir,
        "env",
        &[
            "--nproc",
            "1",
            "--nic",
            "ib7",
            "--sysfs-root",
            dir.join("sys").to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--nic") && err.contains("\"ib7\""), "{err}");
    assert!(!dir.join("env-0-0").exists());
    assert_no_run_dir(&dir);
}

#[test]
fn an_unmodified_style_python_rank_gets_torchrun_variables_and_is_restarted_after_a_hang() {
    let _watchdog = Watchdog::new("launch python", Duration::from_secs(120));
    let ready = Command::new("python3")
        .args(["-c", "import grpc_tools, google.protobuf"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ready
        && nodeipc_testkit::skip(
            "launch python rank",
            "python3 with protobuf and grpcio-tools is not available (pip install protobuf grpcio-tools)",
        )
    {
        return;
    }
    let dir = TempDir::new("launch-py");
    let config = dir.join("monitor.json");
    std::fs::write(
        &config,
        r#"{ "initial_heartbeat_timeout_ms": 1500, "check_interval_ms": 50,
             "termination_signal": "SIGTERM" }"#,
    )
    .unwrap();
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .arg("launch")
            .args(["--nproc", "2", "--max-restarts", "1", "--stop-timeout", "2"])
            .args(["--run-dir", dir.path().to_str().unwrap()])
            .args(["--json-events", dir.join("events.jsonl").to_str().unwrap()])
            .args(["--monitor-config", config.to_str().unwrap()])
            .arg("--")
            .arg("python3")
            .arg(manifest.join("tests/python/launch_rank.py"))
            .arg(manifest.join("../proto/proto"))
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(90));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("monitor of rank 0 terminated it: initial heartbeat timeout"),
        "{err}"
    );
    let vars = std::fs::read_to_string(dir.join("py-1-1")).unwrap();
    for expect in [
        "RANK=1",
        "LOCAL_RANK=1",
        "WORLD_SIZE=2",
        "MASTER_ADDR=127.0.0.1",
        "NODEIPC_RESTART_COUNT=1",
    ] {
        assert!(vars.lines().any(|l| l == expect), "{expect} not in {vars}");
    }
    let events = events(&dir);
    assert_eq!(count(&events, "restarting"), 1);
    assert_no_run_dir(&dir);
}

#[test]
fn an_nvrx_config_file_is_read_with_a_warning_per_key_not_used() {
    let _watchdog = Watchdog::new("launch nvrx", Duration::from_secs(60));
    let dir = TempDir::new("launch-nvrx");
    let config = dir.join("ft.yaml");
    std::fs::write(
        &config,
        "fault_tolerance:\n  initial_rank_heartbeat_timeout: 0.3\n  workload_check_interval: 0.05\n  rank_termination_signal: SIGTERM\n  log_level: DEBUG\n",
    )
    .unwrap();
    let out = run(
        &dir,
        "hang-first",
        &[
            "--nproc",
            "2",
            "--max-restarts",
            "1",
            "--stop-timeout",
            "2",
            "--nvrx-config",
            config.to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("is not used by nodeipc"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("ft.yaml") && warnings[0].contains("\"log_level\""),
        "{err}"
    );
    // Their 0.3 s initial heartbeat timeout fired on the hung rank.
    assert!(
        err.contains("initial heartbeat timeout") && err.contains("limit 300 ms"),
        "{err}"
    );
    assert_no_run_dir(&dir);
}

#[test]
fn a_failed_launch_says_why_once() {
    let _watchdog = Watchdog::new("launch one line", Duration::from_secs(60));
    let dir = TempDir::new("launch-once");
    let out = run(
        &dir,
        "rank1-exits-3",
        &["--nproc", "2", "--stop-timeout", "2"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(
        err.matches("rank 1 (local 1) exited with 3").count(),
        1,
        "{err}"
    );
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("nodeipc launch: exit 3: "),
        "{err}"
    );
}

#[test]
fn a_rank_that_left_its_process_group_is_still_stopped_and_reaped() {
    let _watchdog = Watchdog::new("launch setsid", Duration::from_secs(60));
    let dir = TempDir::new("launch-setsid");
    let mut launch = spawn_child(&mut launch_command(
        &dir,
        "other-group",
        &["--nproc", "2", "--stop-timeout", "2"],
    ));
    let pids = rank_pids(&dir, 2);
    sigterm(&launch);
    let status = launch.wait_timeout(Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(pids.iter().all(|&p| !alive(p)), "{pids:?}");
    let events = events(&dir);
    let stopped = events
        .iter()
        .find(|e| e["event"] == "round_stopped")
        .unwrap();
    // SIGTERM through the pidfd was enough: nobody needed SIGKILL.
    assert_eq!(stopped["killed"], 0, "{stopped}");
    assert_no_run_dir(&dir);
}
