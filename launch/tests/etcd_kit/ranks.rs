//! The ranks of the etcd tests: this test binary again, doing what
//! `NODEIPC_ETCD_TEST_RANK` says. Every rank first appends `RANK RESTART`
//! to the record file (one `write` with `O_APPEND`, so lines from
//! concurrent ranks do not mix).

use std::io::Write;
use std::time::Duration;

use nodeipc_monitor::{MonitorClient, RankInfo};

pub const MODE_ENV: &str = "NODEIPC_ETCD_TEST_RANK";
pub const RECORD_ENV: &str = "NODEIPC_ETCD_TEST_RECORD";
/// Set for the child a `stuck:` rank starts: the path it looks up.
const STUCK_READ_ENV: &str = "NODEIPC_ETCD_TEST_STUCK_READ";

/// Whether this process is a rank started by a test launcher.
pub fn is_rank() -> bool {
    std::env::var_os(MODE_ENV).is_some() && std::env::var_os("NODEIPC_RANK").is_some()
}

fn var(name: &str) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("rank: {name} unset or not a number"))
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Runs the rank and exits.
pub fn run() -> ! {
    if let Some(path) = std::env::var_os(STUCK_READ_ENV) {
        look_up_and_note(&path);
    }
    let mode = std::env::var(MODE_ENV).unwrap_or_default();
    let rank = var("RANK");
    let local = var("LOCAL_RANK");
    let world = var("WORLD_SIZE");
    let restart = var("NODEIPC_RESTART_COUNT");
    assert_eq!(var("TORCHELASTIC_RESTART_COUNT"), restart);
    assert_eq!(rank, var("GROUP_RANK") * var("LOCAL_WORLD_SIZE") + local);
    assert_eq!(world, var("GROUP_WORLD_SIZE") * var("LOCAL_WORLD_SIZE"));
    let record = std::env::var(RECORD_ENV).expect("record file");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&record)
        .expect("record file");
    file.write_all(format!("{rank} {restart}\n").as_bytes())
        .expect("record");
    drop(file);
    let last = rank + 1 == world;
    let code = match mode.as_str() {
        // The last rank registers with its monitor and never beats in
        // round 0: its monitor fires. Every other rank beats.
        "hang-last" => {
            let socket = std::env::var("NODEIPC_MONITOR_SOCKET").expect("monitor socket");
            let mut client =
                MonitorClient::connect(&socket, Duration::from_secs(5)).expect("monitor");
            client
                .init(&RankInfo::this_process(rank, local))
                .expect("init");
            if restart == 0 && last {
                sleep_ms(30_000);
            }
            let beats = if restart == 0 { 200 } else { 5 };
            for _ in 0..beats {
                client.heartbeat().expect("heartbeat");
                sleep_ms(100);
            }
            0
        }
        // The last rank fails every round, the others run on.
        "fail-last" => {
            if last {
                sleep_ms(300);
                3
            } else {
                sleep_ms(20_000);
                0
            }
        }
        // Local rank 1 of every node fails at the same time in round 0.
        "fail-two" => {
            if restart == 0 && local == 1 {
                sleep_ms(500);
                5
            } else if restart == 0 {
                sleep_ms(20_000);
                0
            } else {
                sleep_ms(300);
                0
            }
        }
        // Round 0 runs long (until stopped); later rounds end soon.
        "run-long" => {
            sleep_ms(if restart == 0 { 20_000 } else { 1_000 });
            0
        }
        // Rank 0 fails once at once; everything else ends soon.
        "fail-first" => {
            if restart == 0 && rank == 0 {
                sleep_ms(300);
                4
            } else {
                sleep_ms(if restart == 0 { 20_000 } else { 300 });
                0
            }
        }
        // Round 0: the last rank fails at once and the one before it
        // ignores SIGTERM (its node's stop takes the whole stop timeout);
        // the others run on. Later rounds end soon.
        "fail-stubborn" => {
            if restart > 0 {
                sleep_ms(300);
                0
            } else if last {
                sleep_ms(300);
                6
            } else {
                if rank + 2 == world {
                    // SAFETY: sets this single-threaded rank's own SIGTERM
                    // disposition; no handler, no memory shared.
                    unsafe {
                        libc::signal(libc::SIGTERM, libc::SIG_IGN);
                    }
                }
                sleep_ms(20_000);
                0
            }
        }
        // Every round lasts a few seconds and ends well.
        "steady" => {
            sleep_ms(4_000);
            0
        }
        // The scale simulation: rank 0 fails 2 s into round 0; the others
        // note when their stop comes. Later rounds end at once.
        "sim" => {
            if restart > 0 {
                note("start", rank, restart);
                0
            } else if rank == 0 {
                sleep_ms(2_000);
                note("fail", rank, restart);
                4
            } else {
                wait_for_sigterm(Duration::from_secs(60));
                note("stop", rank, restart);
                143
            }
        }
        // Round 0: the last rank starts a child that hangs on the FUSE
        // mount at DIR (see `fuse`); once the test has seen it hang (the
        // file `<record>.go`), rank 0 fails (`stuck:DIR`) or the last rank
        // itself does (`stuck-fail:DIR`). Later rounds end soon.
        stuck if stuck.starts_with("stuck:") || stuck.starts_with("stuck-fail:") => {
            let (who, dir) = stuck.split_once(':').expect("a colon");
            let last_fails = who == "stuck-fail";
            if restart > 0 {
                sleep_ms(300);
                0
            } else if last {
                // Never waited for: the stop's SIGTERM ends this rank, and
                // the launcher (a subreaper) adopts the child.
                #[allow(clippy::zombie_processes)]
                let _child =
                    std::process::Command::new(std::env::current_exe().expect("test binary"))
                        .env(STUCK_READ_ENV, format!("{dir}/{}", crate::fuse::STUCK_NAME))
                        .spawn()
                        .expect("spawn the stuck child");
                if last_fails {
                    wait_for_go(&record);
                    5
                } else {
                    sleep_ms(30_000);
                    0
                }
            } else if rank == 0 && !last_fails {
                wait_for_go(&record);
                4
            } else {
                sleep_ms(20_000);
                0
            }
        }
        "quick" => {
            sleep_ms(200);
            0
        }
        // `workload:ACTION`: in round 0 the last rank asks its monitor for
        // nvidia-resiliency-ext's workload action ACTION, then fails (7);
        // the others run on. Later rounds end soon, all well.
        workload if workload.starts_with("workload:") => {
            let action: i32 = workload["workload:".len()..].parse().expect("an action");
            if restart == 0 && last {
                let socket = std::env::var("NODEIPC_MONITOR_SOCKET").expect("monitor socket");
                let mut client =
                    MonitorClient::connect(&socket, Duration::from_secs(5)).expect("monitor");
                client
                    .init(&RankInfo::this_process(rank, local))
                    .expect("init");
                client
                    .workload_control(action, "asked by the test")
                    .expect("workload control");
                sleep_ms(300);
                7
            } else {
                sleep_ms(if restart == 0 { 20_000 } else { 300 });
                0
            }
        }
        other => panic!("rank: unknown mode {other:?}"),
    };
    std::process::exit(code);
}

/// Waits (up to 20 s) for the test's word: the file `<record>.go`.
fn wait_for_go(record: &str) {
    let go = format!("{record}.go");
    for _ in 0..400 {
        if std::path::Path::new(&go).exists() {
            return;
        }
        sleep_ms(50);
    }
}

/// The stuck child: looks `path` up (which hangs), and should it ever
/// come back, says so in the record file (`woke PID`): a process killed
/// while it hung must never get there.
fn look_up_and_note(path: &std::ffi::OsStr) -> ! {
    let _ = std::fs::metadata(path);
    let record = std::env::var(RECORD_ENV).expect("record file");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(record)
        .expect("record file");
    file.write_all(format!("woke {}\n", std::process::id()).as_bytes())
        .expect("record");
    std::process::exit(0);
}

/// Appends `KIND RANK RESTART NANOS` (wall clock: every process of the
/// simulation is on this machine) to the times file.
fn note(kind: &str, rank: u32, restart: u32) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path = std::env::var(RECORD_ENV).expect("record file") + ".times";
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .expect("times file");
    file.write_all(format!("{kind} {rank} {restart} {nanos}\n").as_bytes())
        .expect("times");
}

/// Blocks SIGTERM and waits for it (up to `limit`).
fn wait_for_sigterm(limit: Duration) {
    // SAFETY: the set is ours, on this stack; sigprocmask and sigtimedwait
    // only read it (and fill nothing we keep). This rank is single-threaded.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let timeout = libc::timespec {
            tv_sec: limit.as_secs() as libc::time_t,
            tv_nsec: 0,
        };
        libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout);
    }
}
