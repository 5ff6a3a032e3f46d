//! A binary of its own, not a module of `tests/it/`: it counts this
//! process's descriptors (`fd_count`) around each kill, which tests running
//! beside it in one binary would change. CI runs it by name (`--test crash`).
//!
//! Kill -9 at every step: the demo's pipeline (handshake, rank group with a
//! descriptor broadcast, execute channel, a heartbeat monitor per worker),
//! run over and over by `crash_node` processes, with one process killed by
//! SIGKILL at a random step (a random delay after a random stage line of a
//! random process).
//!
//! After each kill:
//! - every surviving coordinator and worker exits within 2 s of the kill,
//!   with an error line (`exit error VARIANT: …`, exit code 1) — or, where
//!   the victim no longer mattered to it, with success; never by a signal,
//!   never a panic;
//! - every surviving monitor has seen its rank go within 2 s (state no
//!   longer initialized or running), holds no descriptor more than before
//!   its rank connected, and stops in order on SIGTERM;
//! - nothing of the run is left in `/dev/shm`; the socket directory holds
//!   nothing but the victim's own sockets, stale (the next bind replaces
//!   them); this process holds no descriptor more than before the run.
//!
//! The seed is printed; `NODEIPC_CRASH_SEED` replays a run and
//! `NODEIPC_CRASH_ITERATIONS` (default 100) sets how many kills each test
//! makes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodeipc_monitor::{ControlClient, RankState};
use nodeipc_testkit::{
    ChildGuard, TempDir, Watchdog, fd_count, shm_leftovers, spawn_child, unique_name,
};

const WORKERS: u32 = 2;
const REQUESTS: u64 = 20;
/// How long a survivor may take to notice the kill and end.
const NOTICE: Duration = Duration::from_secs(2);

/// xorshift64*: a seeded, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    env_or(
        "NODEIPC_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    )
}

/// The two tests would only slow each other's processes down.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Coordinator,
    Worker(u32),
    Monitor(u32),
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Coordinator => "coordinator".to_owned(),
            Kind::Worker(r) => format!("worker {r}"),
            Kind::Monitor(r) => format!("monitor {r}"),
        }
    }

    /// The stage lines a process of this kind prints on a run that succeeds.
    fn stages(self) -> &'static [&'static str] {
        match self {
            Kind::Coordinator => &[
                "listening",
                "workers-joined",
                "group-joined",
                "barrier",
                "fd-broadcast",
                "request",
                "closed",
            ],
            Kind::Worker(_) => &[
                "logged-on",
                "channel-joined",
                "group-joined",
                "barrier",
                "fd-received",
                "monitor-init",
                "request",
                "closed",
            ],
            Kind::Monitor(_) => &["listening"],
        }
    }
}

enum Event {
    Line(usize, String),
    Eof(usize),
}

struct Proc {
    kind: Kind,
    child: ChildGuard,
    pid: u32,
    lines: Vec<(Duration, String)>,
    stderr: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
    exited_at: Option<Instant>,
    /// Descriptors it held once it printed `stage listening` (monitors).
    baseline_fds: Option<usize>,
    eof: bool,
}

impl Proc {
    fn exit_line(&self) -> Option<&str> {
        self.lines
            .iter()
            .rev()
            .find(|(_, l)| l.starts_with("exit "))
            .map(|(_, l)| l.as_str())
    }

    fn last_stage(&self) -> &str {
        self.lines
            .iter()
            .rev()
            .find(|(_, l)| l.starts_with("stage "))
            .map_or("(none)", |(_, l)| l.as_str())
    }
}

/// Where, when and whom to kill.
#[derive(Clone, Debug)]
struct Plan {
    victim: usize,
    trigger: usize,
    /// `None`: right after the processes are spawned.
    stage: Option<String>,
    delay: Duration,
}

fn spawn(kind: Kind, args: &[String], index: usize, events: &Sender<Event>) -> Proc {
    let mut child = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_crash_node"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let pid = child.id();
    let stdout = child.child().stdout.take().expect("stdout");
    let stderr = child.child().stderr.take().expect("stderr");
    let tx = events.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(Event::Line(index, line)).is_err() {
                return;
            }
        }
        let _ = tx.send(Event::Eof(index));
    });
    let text = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&text);
    std::thread::spawn(move || {
        let mut all = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut all);
        *sink.lock().unwrap() = all;
    });
    Proc {
        kind,
        child,
        pid,
        lines: Vec::new(),
        stderr: text,
        status: None,
        exited_at: None,
        baseline_fds: None,
        eof: false,
    }
}

fn proc_fds(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .map(|e| {
                    std::fs::read_link(e.path())
                        .map(|t| t.display().to_string())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn kill(pid: u32, signal: rustix::process::Signal) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).expect("pid"),
        signal,
    );
}

/// What one iteration found, for the tallies.
struct Outcome {
    killed: bool,
    /// `(role, exit line)` of every survivor.
    exits: Vec<(String, String)>,
    slowest: Duration,
}

struct Iteration {
    procs: Vec<Proc>,
    events: Receiver<Event>,
    dir: TempDir,
    group: String,
    started: Instant,
}

impl Iteration {
    fn start() -> Iteration {
        let dir = TempDir::new("crash");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod");
        let group = unique_name("crash");
        let (tx, events) = channel();
        let d = dir.path().display().to_string();
        let mut procs = Vec::new();
        let started = Instant::now();
        for rank in 0..WORKERS {
            let socket = dir.join(&format!("m{rank}.sock")).display().to_string();
            procs.push(spawn(
                Kind::Monitor(rank),
                &["monitor".to_owned(), socket],
                procs.len(),
                &tx,
            ));
        }
        let n = WORKERS.to_string();
        procs.push(spawn(
            Kind::Coordinator,
            &[
                "coordinator".to_owned(),
                d.clone(),
                group.clone(),
                n.clone(),
                REQUESTS.to_string(),
            ],
            procs.len(),
            &tx,
        ));
        for rank in 0..WORKERS {
            procs.push(spawn(
                Kind::Worker(rank),
                &[
                    "worker".to_owned(),
                    d.clone(),
                    group.clone(),
                    n.clone(),
                    rank.to_string(),
                ],
                procs.len(),
                &tx,
            ));
        }
        Iteration {
            procs,
            events,
            dir,
            group,
            started,
        }
    }

    fn describe(&self, plan: &Plan) -> String {
        let mut out = format!(
            "plan: kill {} at {} of {} + {:?}\n",
            self.procs[plan.victim].kind.name(),
            plan.stage.as_deref().unwrap_or("spawn"),
            self.procs[plan.trigger].kind.name(),
            plan.delay
        );
        for p in &self.procs {
            out += &format!(
                "--- {} (pid {}): status {:?}\n",
                p.kind.name(),
                p.pid,
                p.status
            );
            for (at, line) in &p.lines {
                out += &format!("  {at:>10.3?} {line}\n");
            }
            let stderr = p.stderr.lock().unwrap();
            for line in stderr.lines().take(20) {
                out += &format!("  stderr: {line}\n");
            }
        }
        out
    }

    fn reap(&mut self) {
        for p in &mut self.procs {
            if p.status.is_none()
                && let Ok(Some(status)) = p.child.child().try_wait()
            {
                p.status = Some(status);
                p.exited_at = Some(Instant::now());
            }
        }
    }

    fn take_events(&mut self, wait: Duration) -> Vec<(usize, String)> {
        let mut lines = Vec::new();
        let mut first = true;
        loop {
            let event = if first {
                first = false;
                self.events.recv_timeout(wait).ok()
            } else {
                self.events.try_recv().ok()
            };
            match event {
                Some(Event::Line(i, line)) => {
                    let at = self.started.elapsed();
                    let p = &mut self.procs[i];
                    if line == "stage listening" && matches!(p.kind, Kind::Monitor(_)) {
                        p.baseline_fds = Some(proc_fds(p.pid).len());
                    }
                    p.lines.push((at, line.clone()));
                    lines.push((i, line));
                }
                Some(Event::Eof(i)) => self.procs[i].eof = true,
                None => return lines,
            }
        }
    }

    fn clients_done(&self) -> bool {
        self.procs
            .iter()
            .filter(|p| !matches!(p.kind, Kind::Monitor(_)))
            .all(|p| p.status.is_some())
    }

    /// Runs the pipeline, kills as planned, checks every survivor and
    /// everything left behind.
    fn run(mut self, plan: &Plan, baseline_fds: usize) -> Outcome {
        let trigger_line = plan.stage.as_ref().map(|s| format!("stage {s}"));
        let mut killed_at: Option<Instant> = None;
        let fire = |iteration: &mut Iteration, killed_at: &mut Option<Instant>| {
            std::thread::sleep(plan.delay);
            kill(
                iteration.procs[plan.victim].pid,
                rustix::process::Signal::KILL,
            );
            *killed_at = Some(Instant::now());
        };
        if trigger_line.is_none() {
            fire(&mut self, &mut killed_at);
        }
        loop {
            let lines = self.take_events(Duration::from_millis(2));
            if killed_at.is_none() {
                let hit = lines
                    .iter()
                    .any(|(i, line)| *i == plan.trigger && Some(line) == trigger_line.as_ref());
                if hit {
                    fire(&mut self, &mut killed_at);
                }
            }
            self.reap();
            if self.clients_done() {
                break;
            }
            match killed_at {
                Some(at) if at.elapsed() > NOTICE => {
                    let late: Vec<String> = self
                        .procs
                        .iter()
                        .filter(|p| p.status.is_none() && !matches!(p.kind, Kind::Monitor(_)))
                        .map(|p| format!("{} (last {})", p.kind.name(), p.last_stage()))
                        .collect();
                    panic!(
                        "still running {:?} after the kill: {}\n{}",
                        NOTICE,
                        late.join(", "),
                        self.describe(plan)
                    );
                }
                None if self.started.elapsed() > Duration::from_secs(30) => {
                    panic!(
                        "the pipeline did not finish in 30 s\n{}",
                        self.describe(plan)
                    )
                }
                _ => {}
            }
        }
        let victim_status = if killed_at.is_some() {
            let victim = &mut self.procs[plan.victim];
            if victim.status.is_none() {
                victim.status = victim.child.child().wait().ok();
            }
            victim.status
        } else {
            None
        };
        let killed = victim_status.and_then(|s| s.signal()) == Some(9);
        // Every exited process's last line is in.
        let deadline = Instant::now() + NOTICE;
        while self
            .procs
            .iter()
            .any(|p| !p.eof && !matches!(p.kind, Kind::Monitor(_)))
        {
            assert!(
                Instant::now() < deadline,
                "an output never ended\n{}",
                self.describe(plan)
            );
            self.take_events(Duration::from_millis(5));
        }
        let mut outcome = Outcome {
            killed,
            exits: Vec::new(),
            slowest: Duration::ZERO,
        };
        // Coordinator and workers: exit codes 0 or 1 with their exit line,
        // nothing failed before the kill, every one ended in time.
        for (i, p) in self.procs.iter().enumerate() {
            if i == plan.victim && killed || matches!(p.kind, Kind::Monitor(_)) {
                continue;
            }
            let status = p.status.expect("reaped");
            let code = status.code();
            assert!(
                code == Some(0) || code == Some(1),
                "{} ended with {status:?}\n{}",
                p.kind.name(),
                self.describe(plan)
            );
            let exit = p.exit_line().unwrap_or_default();
            assert!(
                exit.starts_with(if code == Some(0) {
                    "exit ok"
                } else {
                    "exit error "
                }),
                "{} ended with {status:?} and said {exit:?}\n{}",
                p.kind.name(),
                self.describe(plan)
            );
            match (killed_at, p.exited_at) {
                (Some(at), Some(done)) => {
                    // The error line must come after the kill (lines are
                    // stamped as they arrive, a hair after they are written).
                    let said_at = p
                        .lines
                        .iter()
                        .rev()
                        .find(|(_, l)| l.starts_with("exit "))
                        .map(|(t, _)| self.started + *t);
                    assert!(
                        code == Some(0) || said_at.is_none_or(|t| t >= at),
                        "{} failed before anything was killed: {exit}\n{}",
                        p.kind.name(),
                        self.describe(plan)
                    );
                    outcome.slowest = outcome.slowest.max(done.saturating_duration_since(at));
                }
                (None, _) => assert_eq!(
                    code,
                    Some(0),
                    "{} failed with nothing killed: {exit}\n{}",
                    p.kind.name(),
                    self.describe(plan)
                ),
                _ => {}
            }
            outcome.exits.push((p.kind.name(), exit.to_owned()));
        }
        self.stop_monitors(plan, killed_at);
        // Every stdout reached its end: no process of the run is left.
        let deadline = Instant::now() + NOTICE;
        while self.procs.iter().any(|p| !p.eof) {
            assert!(
                Instant::now() < deadline,
                "an output never ended\n{}",
                self.describe(plan)
            );
            self.take_events(Duration::from_millis(5));
        }
        for p in &self.procs {
            assert!(
                !Path::new(&format!("/proc/{}", p.pid)).exists()
                    || std::fs::read_to_string(format!("/proc/{}/stat", p.pid))
                        .map(|s| s.contains(") Z"))
                        .unwrap_or(true),
                "{} (pid {}) still exists",
                p.kind.name(),
                p.pid
            );
        }
        self.check_leftovers(plan, killed);
        let Iteration { procs, events, .. } = self;
        drop(events);
        drop(procs);
        // The reader threads go with their pipes; give them a moment (a
        // loaded machine may take its time to run them).
        let deadline = Instant::now() + Duration::from_secs(10);
        while fd_count() > baseline_fds && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(
            fd_count(),
            baseline_fds,
            "this process holds descriptors of the run"
        );
        outcome
    }

    /// Each surviving monitor saw its rank go, holds nothing of it, and
    /// stops in order on SIGTERM.
    fn stop_monitors(&mut self, plan: &Plan, killed_at: Option<Instant>) {
        let dir = self.dir.path().to_owned();
        let started = self.started;
        for i in 0..self.procs.len() {
            let (kind, pid) = (self.procs[i].kind, self.procs[i].pid);
            let Kind::Monitor(rank) = kind else { continue };
            if self.procs[i].status.is_some() || (i == plan.victim && killed_at.is_some()) {
                continue;
            }
            let socket = dir.join(format!("m{rank}.sock"));
            let deadline = killed_at.unwrap_or_else(Instant::now) + NOTICE;
            loop {
                let state = ControlClient::connect(&socket, Duration::from_millis(500))
                    .and_then(|mut c| c.status())
                    .map(|s| s.state);
                match state {
                    Ok(RankState::Initialized | RankState::Running) => {}
                    Ok(_) => break,
                    Err(e) => panic!(
                        "{} does not answer: {e}\n{}",
                        kind.name(),
                        self.describe(plan)
                    ),
                }
                assert!(
                    Instant::now() < deadline,
                    "{} still thinks its rank runs\n{}",
                    kind.name(),
                    self.describe(plan)
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            // Our status connection is gone too once the count is back.
            let baseline = self.procs[i].baseline_fds.expect("a baseline");
            let deadline = Instant::now() + NOTICE;
            while proc_fds(pid).len() > baseline {
                assert!(
                    Instant::now() < deadline,
                    "{} holds {:?}, {} more than before its rank came\n{}",
                    kind.name(),
                    proc_fds(pid),
                    proc_fds(pid).len() - baseline,
                    self.describe(plan)
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            kill(pid, rustix::process::Signal::TERM);
            let p = &mut self.procs[i];
            let status = p.child.wait_timeout(NOTICE);
            p.status = Some(status);
            p.exited_at = Some(Instant::now());
            assert!(
                status.success(),
                "{} ended with {status:?} after SIGTERM (at {:?})",
                kind.name(),
                started.elapsed()
            );
        }
    }

    /// Nothing in `/dev/shm`; in the socket directory only the victim's
    /// own sockets, stale, which the next bind replaces.
    fn check_leftovers(&self, plan: &Plan, killed: bool) {
        let shm = shm_leftovers(&self.group);
        assert!(
            shm.is_empty(),
            "left in /dev/shm: {shm:?}\n{}",
            self.describe(plan)
        );
        let victims_own: Vec<String> = match (killed, self.procs[plan.victim].kind) {
            (true, Kind::Coordinator) => vec!["logon.sock".to_owned()],
            (true, Kind::Monitor(r)) => vec![format!("m{r}.sock"), format!("m{r}.sock.control")],
            _ => Vec::new(),
        };
        let left: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .expect("the socket directory")
            .flatten()
            .map(|e| e.path())
            .collect();
        for path in &left {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                victims_own.contains(&name),
                "left in the socket directory: {name}\n{}",
                self.describe(plan)
            );
            let refused = std::os::unix::net::UnixStream::connect(path)
                .err()
                .and_then(|e| e.raw_os_error())
                == Some(rustix::io::Errno::CONNREFUSED.raw_os_error());
            assert!(refused, "{name} is not a stale socket");
            let rebound = nodeipc_fdpass::Listener::bind(path).expect("the next bind replaces it");
            drop(rebound);
        }
        let still: Vec<_> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .flatten()
            .collect();
        assert!(still.is_empty(), "{still:?}");
    }
}

fn plan(rng: &mut Rng, procs: &[Kind], victim: usize) -> Plan {
    let trigger = rng.below(procs.len() as u64) as usize;
    let stages = procs[trigger].stages();
    let pick = rng.below(stages.len() as u64 + 1) as usize;
    let stage = (pick < stages.len()).then(|| match stages[pick] {
        "request" => format!("request {}", rng.below(REQUESTS)),
        s => s.to_owned(),
    });
    let delay = match rng.below(4) {
        0 => Duration::ZERO,
        _ => Duration::from_micros(rng.below(3000)),
    };
    Plan {
        victim,
        trigger,
        stage,
        delay,
    }
}

/// Runs kills until `target` of them landed (at most twice as many runs),
/// and prints the tallies.
fn campaign(test: &str, choose_victim: impl Fn(&mut Rng, &[Kind]) -> usize) {
    let _serial = serial();
    let seed = seed();
    let target = env_or("NODEIPC_CRASH_ITERATIONS", 100);
    println!("{test}: seed {seed} (NODEIPC_CRASH_SEED={seed} replays it), {target} kills");
    let mut rng = Rng::new(seed);
    let mut kills = 0;
    let mut runs = 0;
    let mut by_victim: BTreeMap<String, u32> = BTreeMap::new();
    let mut errors: BTreeMap<String, u32> = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    while kills < target {
        runs += 1;
        assert!(
            runs <= 2 * target,
            "only {kills} of {runs} runs had a kill land"
        );
        // Each run under its own watchdog: a hang aborts with the seed above.
        let _dog = Watchdog::new(
            &format!("{test} run {runs} (seed {seed})"),
            Duration::from_secs(60),
        );
        let baseline_fds = fd_count();
        let iteration = Iteration::start();
        let kinds: Vec<Kind> = iteration.procs.iter().map(|p| p.kind).collect();
        let victim = choose_victim(&mut rng, &kinds);
        let plan = plan(&mut rng, &kinds, victim);
        let outcome = iteration.run(&plan, baseline_fds);
        if !outcome.killed {
            continue;
        }
        kills += 1;
        slowest = slowest.max(outcome.slowest);
        *by_victim.entry(kinds[victim].name()).or_default() += 1;
        for (role, exit) in outcome.exits {
            let role = role.split(' ').next().unwrap_or("").to_owned();
            let what = exit
                .strip_prefix("exit error ")
                .map(|e| e.split(':').next().unwrap_or("").to_owned())
                .unwrap_or_else(|| "ok".to_owned());
            *errors.entry(format!("{role}: {what}")).or_default() += 1;
        }
    }
    println!(
        "{test}: {kills} kills in {runs} runs, {:.1?}; slowest survivor ended {slowest:?} after its kill",
        started.elapsed()
    );
    println!("{test}: victims {by_victim:?}");
    println!("{test}: how survivors ended {errors:?}");
}

#[test]
fn a_worker_or_monitor_killed_at_any_step_leaves_errors_in_bounded_time_and_nothing_behind() {
    campaign("crash (worker or monitor)", |rng, kinds| {
        let candidates: Vec<usize> = (0..kinds.len())
            .filter(|&i| kinds[i] != Kind::Coordinator)
            .collect();
        candidates[rng.below(candidates.len() as u64) as usize]
    });
}

#[test]
fn the_coordinator_killed_at_any_step_leaves_errors_in_bounded_time_and_nothing_behind() {
    campaign("crash (coordinator)", |_, kinds| {
        kinds
            .iter()
            .position(|k| *k == Kind::Coordinator)
            .expect("a coordinator")
    });
}
