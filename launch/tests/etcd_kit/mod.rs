//! What the etcd tests share: a real etcd on loopback (free ports, a
//! temporary data directory), launchers as child processes of this test
//! binary (each a process of its own whose main thread owns its signals),
//! ranks that are this binary again, a TCP proxy the test can cut, and a
//! small harness (these test files are `harness = false`: a launcher must
//! run on a process's main thread). The FUSE fixture is `tests/fuse/`, a
//! module of each binary's root beside this one.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod etcd;
pub mod proxy;
pub mod ranks;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nodeipc_launch::{EtcdBackend, LaunchOptions, RdzvOptions, Rendezvous};
use nodeipc_monitor::MonitorConfig;
use nodeipc_monitor_host::MonitorConfigFile;
use nodeipc_testkit::{ChildGuard, spawn_child};
use serde_json::{Value, json};

/// Set for a launcher child: its spec, as JSON.
const LAUNCHER_ENV: &str = "NODEIPC_ETCD_TEST_LAUNCHER";

/// One test: its name, its body, whether it is ignored by default.
pub type Test = (&'static str, fn(), bool);

/// The test binary's `main`: a launcher or a rank when the environment
/// says so, else the tests (filtered by the arguments, as libtest does).
pub fn main(tests: &[Test]) {
    if ranks::is_rank() {
        ranks::run();
    }
    if let Ok(spec) = std::env::var(LAUNCHER_ENV) {
        run_launcher(&spec);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _, _) in tests {
            println!("{name}: test");
        }
        return;
    }
    let ignored = args.iter().any(|a| a == "--ignored");
    let include_ignored = args.iter().any(|a| a == "--include-ignored");
    let exact = args.iter().any(|a| a == "--exact");
    // libtest's options that take a value, as a separate argument.
    let with_value = [
        "--test-threads",
        "--skip",
        "--format",
        "--color",
        "--logfile",
        "-Z",
    ];
    let mut filters: Vec<&String> = Vec::new();
    let mut skips: Vec<&String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if with_value.contains(&arg.as_str()) {
            if arg == "--skip" {
                skips.extend(args.get(i + 1));
            }
            i += 2;
            continue;
        }
        if !arg.starts_with('-') {
            filters.push(arg);
        }
        i += 1;
    }
    let chosen: Vec<&Test> = tests
        .iter()
        .filter(|(name, _, ignore)| {
            let wanted = filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        name == f
                    } else {
                        name.contains(f.as_str())
                    }
                });
            let by_ignore = include_ignored || (*ignore == ignored);
            let skipped = skips.iter().any(|s| name.contains(s.as_str()));
            wanted && by_ignore && !skipped
        })
        .collect();
    println!("\nrunning {} tests", chosen.len());
    let mut failed = Vec::new();
    for (name, body, _) in &chosen {
        let began = Instant::now();
        let result = std::panic::catch_unwind(body);
        let verdict = if result.is_ok() { "ok" } else { "FAILED" };
        println!(
            "test {name} ... {verdict} ({:.1} s)",
            began.elapsed().as_secs_f64()
        );
        if result.is_err() {
            failed.push(*name);
        }
    }
    let _ = std::io::stdout().flush();
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        chosen.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        println!("failures: {failed:?}");
        std::process::exit(101);
    }
}

/// What a launcher child is asked to run.
#[derive(Clone, Debug)]
pub struct Spec {
    pub endpoint: String,
    pub id: String,
    pub nnodes: u32,
    /// The M of `--nnodes N:M` (equal to `nnodes`: a fixed number).
    pub max_nodes: u32,
    /// `--rdzv-conf`.
    pub conf: Option<String>,
    pub node_rank: Option<u32>,
    pub nproc: u32,
    pub max_restarts: u32,
    pub stop_timeout: Duration,
    pub ttl_s: u64,
    pub timeout_s: u64,
    pub local_addr: Option<String>,
    /// What each rank does (see [`ranks`]).
    pub mode: String,
    /// The file every rank appends `RANK RESTART` to.
    pub record: PathBuf,
    /// The monitors' configuration, as JSON.
    pub monitor: Option<String>,
    /// Where the launcher makes its run directory: the test's own, so
    /// that a launcher the test kills leaves nothing once it is removed.
    pub run_dir: PathBuf,
}

impl Spec {
    pub fn new(endpoint: &str, id: &str, nnodes: u32, mode: &str, record: &Path) -> Spec {
        Spec {
            endpoint: endpoint.to_owned(),
            id: id.to_owned(),
            nnodes,
            max_nodes: nnodes,
            conf: None,
            node_rank: None,
            nproc: 2,
            max_restarts: 3,
            stop_timeout: Duration::from_secs(2),
            ttl_s: 3,
            timeout_s: 30,
            local_addr: None,
            mode: mode.to_owned(),
            record: record.to_owned(),
            monitor: None,
            run_dir: record.parent().map(Path::to_owned).unwrap_or_default(),
        }
    }

    fn to_json(&self) -> String {
        json!({
            "endpoint": self.endpoint, "id": self.id, "nnodes": self.nnodes,
            "max_nodes": self.max_nodes, "conf": self.conf,
            "node_rank": self.node_rank, "nproc": self.nproc,
            "max_restarts": self.max_restarts,
            "stop_timeout_ms": self.stop_timeout.as_millis() as u64,
            "ttl_s": self.ttl_s, "timeout_s": self.timeout_s,
            "local_addr": self.local_addr, "mode": self.mode,
            "record": self.record, "monitor": self.monitor, "run_dir": self.run_dir,
        })
        .to_string()
    }
}

/// A launcher child; its stderr goes to a file.
pub struct Launcher {
    pub child: ChildGuard,
    pub log: PathBuf,
}

impl Launcher {
    /// Starts a launcher for `spec`, its output in `dir/<tag>.log`.
    pub fn start(spec: &Spec, dir: &Path, tag: &str) -> Launcher {
        let log = dir.join(format!("{tag}.log"));
        let out = std::fs::File::create(&log).expect("launcher log");
        let err = out.try_clone().expect("launcher log");
        let mut command = Command::new(std::env::current_exe().expect("test binary"));
        command
            .env(LAUNCHER_ENV, spec.to_json())
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        Launcher {
            child: spawn_child(&mut command),
            log,
        }
    }

    /// Waits for the launcher's exit (the test fails after `limit`).
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let began = Instant::now();
        loop {
            if let Some(status) = self.child.child().try_wait().expect("try_wait") {
                return status;
            }
            if began.elapsed() > limit {
                self.child.kill();
                panic!(
                    "launcher still running after {limit:?}; its output:\n{}",
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` to the launcher.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid (not reaped yet, so the
        // pid is still this child's); it touches no memory.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }
}

/// Exits with the status of the launch `spec` describes (99: the launch
/// itself failed; the error is on stderr).
fn run_launcher(spec: &str) -> ! {
    let spec: Value = serde_json::from_str(spec).expect("launcher spec");
    let s = |k: &str| spec[k].as_str().map(str::to_owned);
    let n = |k: &str| spec[k].as_u64().unwrap_or(0);
    let nnodes = match (n("nnodes"), n("max_nodes")) {
        (min, max) if min == max => min.to_string(),
        (min, max) => format!("{min}:{max}"),
    };
    let rdzv = RdzvOptions {
        nnodes,
        backend: Some("etcd".into()),
        endpoint: s("endpoint"),
        id: s("id"),
        node_rank: spec["node_rank"].as_u64().map(|r| r as u32),
        ttl: Duration::from_secs(n("ttl_s")),
        timeout: Duration::from_secs(n("timeout_s")),
        local_addr: s("local_addr"),
        standalone: false,
        conf: s("conf"),
    };
    let Rendezvous::Etcd(etcd) = rdzv.resolve().expect("rendezvous options") else {
        panic!("not an etcd rendezvous");
    };
    let command: Vec<OsString> = vec![std::env::current_exe().expect("test binary").into()];
    let monitor = match s("monitor") {
        Some(text) => MonitorConfig::from_json(&text).expect("monitor config"),
        None => MonitorConfig::default(),
    };
    // The ranks are this binary again, told what to do.
    // SAFETY: single-threaded here (the launcher has started nothing yet).
    unsafe {
        std::env::remove_var(LAUNCHER_ENV);
        std::env::set_var(ranks::MODE_ENV, s("mode").unwrap_or_default());
        std::env::set_var(ranks::RECORD_ENV, s("record").unwrap_or_default());
    }
    let options = LaunchOptions {
        max_restarts: n("max_restarts") as u32,
        stop_timeout: Duration::from_millis(n("stop_timeout_ms")),
        handle_signals: true,
        own_all_children: true,
        monitor,
        run_dir: s("run_dir").map(PathBuf::from),
        ..LaunchOptions::new(n("nproc") as u32, command)
    };
    let mut backend = EtcdBackend::new(
        etcd,
        options.nproc,
        options.max_restarts,
        options.stop_timeout,
    );
    let outcome = nodeipc_launch::launch_with(&options, &mut backend, &|_| Vec::new());
    let (requests, rounds) = backend.stats();
    drop(backend);
    eprintln!("launcher: {requests} etcd requests over {rounds} rounds");
    // Escaped as the library's own lines are: a summary may quote what
    // another node (or a forger) wrote in etcd.
    match outcome {
        Ok(outcome) => {
            eprintln!(
                "launcher: exit {}: {}",
                outcome.exit_code,
                nodeipc_text::printable(&outcome.summary)
            );
            std::process::exit(outcome.exit_code);
        }
        Err(error) => {
            eprintln!(
                "launcher: error: {}",
                nodeipc_text::printable(&error.to_string())
            );
            std::process::exit(99);
        }
    }
}

/// Each (rank, restart) line the ranks recorded.
pub fn records(path: &Path) -> Vec<(u32, u32)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
        .collect()
}

/// The rounds each rank saw, sorted.
pub fn rounds_of(records: &[(u32, u32)], rank: u32) -> Vec<u32> {
    let mut rounds: Vec<u32> = records
        .iter()
        .filter(|(r, _)| *r == rank)
        .map(|(_, round)| *round)
        .collect();
    rounds.sort_unstable();
    rounds
}

/// Waits until `check` holds (the test fails after `limit`).
pub fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let began = Instant::now();
    while !check() {
        assert!(began.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A job id unique to this run.
pub fn job_id(tag: &str) -> String {
    let name = nodeipc_testkit::unique_name(tag);
    name.trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect()
}
