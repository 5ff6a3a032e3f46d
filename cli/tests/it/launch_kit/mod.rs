//! What the `nodeipc launch` tests share: the rank program (this test
//! binary run again as `rank_helper`, its role in the environment) and the
//! launcher run bounded, its events read, its leftovers looked for.
#![allow(dead_code)] // each test file uses part of it

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nodeipc_monitor::{MonitorClient, RankInfo};
use nodeipc_testkit::{ChildGuard, TempDir, spawn_child};

const ROLE: &str = "NODEIPC_LAUNCH_TEST_ROLE";
const DIR: &str = "NODEIPC_LAUNCH_TEST_DIR";

/// The rank program the launch tests run (not a test of its own): the
/// launcher runs this ignored test (with `--ignored`) as each rank.
#[test]
#[ignore = "a rank program the launch tests run"]
fn rank_helper() {
    rank_main();
}

fn rank_main() {
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
                "NODEIPC_FT_SAFETY_FACTOR",
            ];
            let text: String = names
                .iter()
                .map(|n| format!("{n}={}\n", std::env::var(n).unwrap_or_default()))
                .collect();
            write_atomic(&dir.join(format!("env-{rank}-{restart}")), &text);
            // The run directory holding the monitors' sockets is private.
            let socket = PathBuf::from(std::env::var("NODEIPC_MONITOR_SOCKET").unwrap());
            let mode = {
                use std::os::unix::fs::PermissionsExt;
                let dir = std::fs::metadata(socket.parent().unwrap()).unwrap();
                let sock = std::fs::metadata(&socket).unwrap();
                format!(
                    "{:o} {:o}",
                    dir.permissions().mode() & 0o777,
                    sock.permissions().mode() & 0o777
                )
            };
            write_atomic(&dir.join(format!("mode-{rank}")), &mode);
            // The launch's working directory is ours.
            write_atomic(
                &dir.join(format!("cwd-{rank}")),
                &std::env::current_dir().unwrap().display().to_string(),
            );
        }
        "group" => {
            // NODEIPC_GROUP as it is, as a Rust program meets its peers.
            let name = std::env::var("NODEIPC_GROUP").unwrap();
            let (local, world) = (
                env_num("NODEIPC_LOCAL_RANK"),
                env_num("NODEIPC_LOCAL_WORLD_SIZE"),
            );
            let options = nodeipc_barrier::GroupOptions::new(name.as_str(), local, world)
                .timeout(Duration::from_secs(30));
            let mut group = nodeipc_barrier::Group::join(options)
                .unwrap_or_else(|e| panic!("rank {rank}: join {name:?}: {e}"));
            let all = group
                .all_gather(format!("rust rank {rank}").as_bytes())
                .unwrap();
            let all: Vec<String> = all
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect();
            write_atomic(
                &dir.join(format!("group-{rank}")),
                &format!("{name}\n{}", all.join(", ")),
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
pub(crate) fn launch_command(dir: &TempDir, role: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeipc"));
    command
        .arg("launch")
        .args(["--run-dir", dir.path().to_str().unwrap()])
        .args(["--json-events", dir.join("events.jsonl").to_str().unwrap()])
        .args(args)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &nodeipc_testkit::test_path(module_path!(), "rank_helper"),
            "--ignored",
            "--nocapture",
            "-q",
        ])
        .env(ROLE, role)
        .env(DIR, dir.path())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

pub(crate) fn run(dir: &TempDir, role: &str, args: &[&str]) -> Output {
    spawn_child(&mut launch_command(dir, role, args)).output_timeout(Duration::from_secs(60))
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The events file's lines, parsed.
pub(crate) fn events(dir: &TempDir) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub(crate) fn count(events: &[serde_json::Value], kind: &str) -> usize {
    events.iter().filter(|e| e["event"] == kind).count()
}

/// Nothing of the launch is left in `dir`: its run directory (sockets) is
/// gone, only the test's own files remain.
pub(crate) fn assert_no_run_dir(dir: &TempDir) {
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nodeipc-launch-"))
        .collect();
    assert!(left.is_empty(), "run directory left behind: {left:?}");
}

pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_owned()))
        .is_some_and(|rest| !rest.starts_with('Z'))
}

pub(crate) fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pids every rank wrote to `pids-<rank>`, once all have.
pub(crate) fn rank_pids(dir: &TempDir, nproc: u32) -> Vec<u32> {
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

pub(crate) fn sigterm(child: &ChildGuard) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
}
