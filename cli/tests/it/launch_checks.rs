//! `nodeipc launch`'s checks across real processes: the restart check,
//! health checks from a sysfs fixture, NVML unavailable, NVRx files, and a
//! Python rank written from `monitor.proto` alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::launch_kit::*;
use nodeipc_testkit::{ChildGuard, TempDir, Watchdog, spawn_child};

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
        last.contains("rank 0 (local 0) did not register with its monitor again within --rank-restart-timeout 500 ms"),
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

/// Writes `<state>\n` to a fake sysfs file at once, as the kernel's change:
/// a check polling while it is written in place could read it empty.
fn set_operstate(operstate: &Path, state: &str) {
    let staged = operstate.with_extension("staged");
    std::fs::write(&staged, format!("{state}\n")).unwrap();
    std::fs::rename(&staged, operstate).unwrap();
}

/// Once both ranks run, sets the NIC's state to `state`, and checks that
/// the launch fired on it and restarted the round; the NIC still down,
/// the node then fails its checks before the next round starts any rank
/// (as nvidia-resiliency-ext's launcher checks before each rendezvous), and
/// the launch exits 1 saying why, leaving no run directory.
fn the_round_restarts_once_when_the_nic_goes(
    dir: &TempDir,
    operstate: &Path,
    state: &str,
    mut launch: ChildGuard,
) {
    rank_pids(dir, 2);
    set_operstate(operstate, state);
    let status = launch.wait_timeout(Duration::from_secs(20));
    let events = events(dir);
    assert_eq!(status.code(), Some(1), "{events:?}");
    let last = events.last().unwrap()["summary"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        last.contains("this node is unhealthy, round 1 not started")
            && last.contains(&format!("NIC eth0 is {state}")),
        "{last}"
    );
    assert_eq!(count(&events, "rank_started"), 2, "round 1 started no rank");
    let fired: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "monitor_fired")
        .collect();
    assert!(!fired.is_empty(), "{events:?}");
    let cause = format!("NIC eth0 is {state}");
    assert!(
        fired[0]["cause"].as_str().unwrap().contains(&cause),
        "{fired:?}"
    );
    assert_eq!(count(&events, "restarting"), 1);
    assert_no_run_dir(dir);
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
    let launch = spawn_child(&mut launch_command(
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
    the_round_restarts_once_when_the_nic_goes(&dir, &operstate, "down", launch);
}

#[test]
fn the_monitor_config_turns_the_nic_check_on_and_a_failure_restarts_the_round() {
    let _watchdog = Watchdog::new("launch config nic", Duration::from_secs(60));
    let dir = TempDir::new("launch-cfg-nic");
    let sys = dir.join("sys");
    let operstate = sys.join("class/net/eth0/operstate");
    std::fs::create_dir_all(operstate.parent().unwrap()).unwrap();
    std::fs::write(&operstate, "up\n").unwrap();
    // No health flag on the command line: the file alone turns the check on.
    let config = dir.join("monitor.json");
    std::fs::write(
        &config,
        format!(
            r#"{{ "check_interval_ms": 50, "termination_signal": "SIGTERM",
                 "health_checks": {{ "nic": {{ "devices": ["eth0"], "sysfs_root": {:?}, "interval_ms": 50 }} }} }}"#,
            sys.to_str().unwrap()
        ),
    )
    .unwrap();
    let launch = spawn_child(&mut launch_command(
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
        ],
    ));
    the_round_restarts_once_when_the_nic_goes(&dir, &operstate, "lowerlayerdown", launch);
}

#[test]
fn a_health_section_naming_a_nic_that_is_not_there_is_refused_at_start() {
    let _watchdog = Watchdog::new("launch config nic missing", Duration::from_secs(60));
    let dir = TempDir::new("launch-cfg-nic-missing");
    std::fs::create_dir_all(dir.join("sys")).unwrap();
    let config = dir.join("monitor.json");
    std::fs::write(
        &config,
        format!(
            r#"{{ "health_checks": {{ "nic": {{ "devices": ["ib7"], "sysfs_root": {:?} }} }} }}"#,
            dir.join("sys").to_str().unwrap()
        ),
    )
    .unwrap();
    let out = run(
        &dir,
        "env",
        &["--nproc", "1", "--monitor-config", config.to_str().unwrap()],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("health_checks") && err.contains("\"ib7\""),
        "{err}"
    );
    assert!(!dir.join("env-0-0").exists());
    assert_no_run_dir(&dir);
}

#[test]
fn a_gpu_check_without_nvml_is_reported_unavailable_and_the_launch_runs() {
    let _watchdog = Watchdog::new("launch gpu", Duration::from_secs(60));
    let gpu_only = nodeipc_monitor_host::HealthConfig {
        gpu: Some(nodeipc_monitor_host::GpuHealth::default()),
        nic: None,
    };
    let nvml = nodeipc_monitor_host::HealthChecks::checks_with_nvml(&gpu_only, 0).unwrap();
    if nvml.unavailable.is_empty() {
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
fn an_nvrx_config_file_is_read_with_a_warning_per_key_without_effect() {
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
        .filter(|l| l.contains("accepted, no effect"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("ft.yaml: fault_tolerance.log_level"),
        "{err}"
    );
    // Their 0.3 s initial heartbeat timeout fired on the hung rank.
    assert!(
        err.contains("initial heartbeat timeout") && err.contains("limit 300 ms"),
        "{err}"
    );
    assert_no_run_dir(&dir);
}

/// NVRx's `safety_factor` (option over file) reaches every rank as
/// `NODEIPC_FT_SAFETY_FACTOR`, which `nodeipc.fault_tolerance` calculates
/// with; not given, the rank's own environment is left alone.
#[test]
fn the_nvrx_safety_factor_reaches_the_ranks_option_over_file() {
    let _watchdog = Watchdog::new("launch safety factor", Duration::from_secs(120));
    let dir = TempDir::new("launch-safety");
    let config = dir.join("ft.yaml");
    std::fs::write(&config, "fault_tolerance:\n  safety_factor: 3.0\n").unwrap();
    let factor_of = |rank: u32| {
        let vars = std::fs::read_to_string(dir.join(&format!("env-{rank}-0"))).unwrap();
        vars.lines()
            .find_map(|l| l.strip_prefix("NODEIPC_FT_SAFETY_FACTOR="))
            .unwrap_or_else(|| panic!("no NODEIPC_FT_SAFETY_FACTOR line in {vars}"))
            .to_owned()
    };
    let config = config.to_str().unwrap();
    for (args, want) in [
        (vec!["--nproc", "2", "--ft-cfg-path", config], "3"),
        (
            vec![
                "--nproc",
                "2",
                "--ft-cfg-path",
                config,
                "--ft-safety-factor",
                "7.5",
            ],
            "7.5",
        ),
    ] {
        let out = run(&dir, "env", &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(!err.contains("safety_factor"), "no warning for it: {err}");
        assert_eq!(
            (factor_of(0), factor_of(1)),
            (want.to_owned(), want.to_owned())
        );
    }
    // Without NVRx settings nothing is set (the variable reads empty).
    let out = spawn_child(
        launch_command(&dir, "env", &["--nproc", "1"])
            .env_remove("NODEIPC_FT_SAFETY_FACTOR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(factor_of(0), "");
    assert_no_run_dir(&dir);
}

/// `nodeipc launch` with `--run-dir DIR --json-events FILE`, the `env`
/// rank (which leaves a file per rank it ran as); its output.
fn launch_with_paths(dir: &TempDir, run_dir: &Path, events: &Path) -> std::process::Output {
    let command = launch_command(dir, "env", &["--nproc", "2"]);
    // The kit's command with its --run-dir and --json-events replaced.
    let mut args: Vec<std::ffi::OsString> = command.get_args().map(|a| a.to_owned()).collect();
    let at = |args: &[std::ffi::OsString], flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .expect("the kit passes it")
            + 1
    };
    let i = at(&args, "--run-dir");
    args[i] = run_dir.as_os_str().to_owned();
    let i = at(&args, "--json-events");
    args[i] = events.as_os_str().to_owned();
    let mut again = Command::new(command.get_program());
    again
        .args(args)
        .envs(command.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    spawn_child(&mut again).output_timeout(Duration::from_secs(60))
}

/// A `--run-dir` that is a symlink, another user's directory or one others
/// may write is refused naming owner and mode, and a `--json-events` path
/// the launcher may not write into (`/proc/self/status`, a symlink) is
/// refused, both before anything starts: no rank ran, no run directory or
/// events file was made, the one line on stderr names the path.
#[test]
fn regression_run_dir_and_events_file_are_checked_before_anything_starts() {
    use std::os::unix::fs::PermissionsExt;
    let _watchdog = Watchdog::new("launch paths", Duration::from_secs(120));
    let dir = TempDir::new("launch-paths");
    let good = dir.join("runs");
    std::fs::create_dir(&good).unwrap();
    std::fs::set_permissions(&good, PermissionsExt::from_mode(0o700)).unwrap();
    let events = dir.join("events.jsonl");
    let refused = |run_dir: &Path, events: &Path, expect: &[&str]| {
        let out = launch_with_paths(&dir, run_dir, events);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{expect:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{expect:?}: {err}");
        for word in expect {
            assert!(err.contains(word), "{expect:?}: {err}");
        }
        assert!(!dir.join("env-0-0").exists(), "a rank ran: {err}");
        assert!(!err.contains("ranks, up to"), "the launch began: {err}");
        let made: Vec<_> = std::fs::read_dir(&good)
            .unwrap()
            .chain(std::fs::read_dir(dir.path()).unwrap())
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("nodeipc-launch-"))
            .collect();
        assert!(made.is_empty(), "{made:?}");
    };

    let link = dir.join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    refused(&link, &events, &["--run-dir", "link", "found a symlink"]);
    assert!(
        !events.exists(),
        "the events file was made before the check"
    );
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    for mode in [0o777, 0o1777, 0o770] {
        std::fs::set_permissions(&open, PermissionsExt::from_mode(mode)).unwrap();
        refused(&open, &events, &["--run-dir", &format!("mode {mode:04o}")]);
    }
    if nodeipc_testkit::is_root() {
        let theirs = dir.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, PermissionsExt::from_mode(0o700)).unwrap();
        let (uid, gid) = nodeipc_testkit::NOBODY;
        std::os::unix::fs::chown(&theirs, Some(uid), Some(gid)).unwrap();
        refused(
            &theirs,
            &events,
            &["--run-dir", &format!("owner uid {uid}")],
        );
    }
    refused(
        &good,
        Path::new("/proc/self/status"),
        &["/proc/self/status", "mode 0444"],
    );
    refused(
        &good,
        Path::new("/proc/self/comm"),
        &["/proc/self/comm", "procfs"],
    );
    let planted = dir.join("planted.jsonl");
    std::os::unix::fs::symlink(dir.join("elsewhere"), &planted).unwrap();
    refused(&good, &planted, &["planted.jsonl", "found a symlink"]);
    assert!(!dir.join("elsewhere").exists());

    // The good ones run.
    let out = launch_with_paths(&dir, &good, &events);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(dir.join("env-1-0").exists());
}

/// A node whose NIC is down before the first round starts no rank and says
/// why (the checks run before each round, not only while ranks run).
#[test]
fn a_node_failing_its_checks_before_a_round_starts_no_rank() {
    let _watchdog = Watchdog::new("launch nic before", Duration::from_secs(60));
    let dir = TempDir::new("launch-nic-before");
    let sys = dir.join("sys");
    let operstate = sys.join("class/net/eth0/operstate");
    std::fs::create_dir_all(operstate.parent().unwrap()).unwrap();
    std::fs::write(&operstate, "down\n").unwrap();
    let out = run(
        &dir,
        "env",
        &[
            "--nproc",
            "2",
            "--max-restarts",
            "3",
            "--nic",
            "eth0",
            "--sysfs-root",
            sys.to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("this node is unhealthy, round 0 not started")
            && err.contains("NIC eth0 is down"),
        "{err}"
    );
    assert_eq!(count(&events(&dir), "rank_started"), 0, "{err}");
    assert_no_run_dir(&dir);
}
