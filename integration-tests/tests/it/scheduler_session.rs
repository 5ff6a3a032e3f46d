//! Agave's scheduler session on nodeipc, end to end, on Agave's own message
//! types (`agave-scheduler-bindings` 8.0.0): a server with 4 execution
//! worker processes; an external scheduler process logs on asking for 4
//! workers and 2 pool handles and receives the pool, the TPU → scheduler
//! queue, the progress queue and a queue pair per worker, and the ids of
//! its pool handles; the server takes each session with `accept`, which
//! returns what it granted. Two check worker processes share two MPMC
//! rings with the scheduler: every transaction is checked (in place, every
//! byte) before it goes to execution, and the second scheduler takes the
//! dead one's MPMC place over. Transactions (pool blocks referenced from
//! `TpuToPackMessage`s) flow TPU → scheduler → workers (in batches: arrays
//! of `SharableTransactionRegion`s in pool blocks, read in place, every
//! byte checked) → scheduler (`ExecutionResponse` arrays in the workers'
//! blocks, read in place). Mid-stream the scheduler is killed with SIGKILL
//! (the server learns of it through the session socket; a second
//! scheduler logs on, takes the answers to the dead one's batches as
//! orphans, and finishes) and later a worker (the scheduler's pop and push
//! on its queues say PeerDied; the others go on). Every transaction is
//! delivered at least once, duplicates counted, and once the TPU has freed
//! what the dead scheduler held, the pool holds at most the few blocks the
//! killed processes had allocated and not yet handed over (6 for the
//! scheduler, 1 for the worker: a known limit of the pool, SECURITY.md).
//!
//! 200 000 transactions by default (a few seconds in a debug build); the
//! issue's 1 000 000 under `NODEIPC_CI_LONG`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use nodeipc_integration_tests::scheduler_session::{
    Grant, Ledger, SessionServer, Setup, TpuProgress, monotonic_ns,
};
use nodeipc_testkit::{ChildGuard, TempDir, Watchdog, spawn_child};

const WORKERS: u32 = 4;
const HANDLES: u32 = 2;
/// Check workers, on the two MPMC rings.
const CHECKERS: u32 = 2;
/// Transactions the first scheduler holds unforwarded.
const BUFFER: usize = 512;

/// A peer process and the lines it printed, as they come.
struct Peer {
    guard: ChildGuard,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Peer {
    fn spawn(args: &[String]) -> Peer {
        let mut guard = spawn_child(
            Command::new(env!("CARGO_BIN_EXE_session_peer"))
                .args(args)
                .stdout(Stdio::piped()),
        );
        let stdout = guard.child().stdout.take().expect("piped");
        let (sent, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sent.send(line).is_err() {
                    break;
                }
            }
        });
        Peer {
            guard,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line starting with `prefix`, within `limit`.
    fn wait_line(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        if let Some(line) = self.seen.iter().find(|l| l.starts_with(prefix)) {
            return line.clone();
        }
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                return line;
            }
        }
        panic!(
            "pid {}: no line {prefix:?} within {limit:?}; it said {:?}",
            self.guard.id(),
            self.seen
        );
    }

    fn kill9(&self) -> (Instant, u64) {
        let pid = rustix::process::Pid::from_raw(self.guard.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill -9");
        (Instant::now(), monotonic_ns())
    }
}

/// `key=value` out of a peer's line.
fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        .to_owned()
}

fn count() -> u64 {
    if std::env::var_os("NODEIPC_CI_LONG").is_some() {
        1_000_000
    } else {
        200_000
    }
}

#[test]
fn the_scheduler_session_survives_a_killed_scheduler_and_a_killed_worker() {
    let _dog = Watchdog::new("scheduler session", Duration::from_secs(240));
    let count = count();
    let dir = TempDir::new("sched");
    let mut server = SessionServer::start(
        &dir.join("session.sock"),
        Setup {
            workers: WORKERS,
            scheduler_handles: HANDLES,
            checkers: CHECKERS,
        },
        512,
    )
    .expect("server");
    let socket = server.socket().to_str().unwrap().to_owned();
    let mut workers: Vec<Peer> = (0..WORKERS)
        .map(|w| Peer::spawn(&["worker".into(), socket.clone(), w.to_string()]))
        .collect();
    let mut worker_sessions = Vec::new();
    for worker in &mut workers {
        worker.wait_line("WORKER-READY", Duration::from_secs(20));
        worker_sessions.push(
            server
                .accept(Duration::from_secs(5))
                .expect("worker session"),
        );
    }
    let mut checkers: Vec<Peer> = (0..CHECKERS)
        .map(|c| Peer::spawn(&["checker".into(), socket.clone(), c.to_string()]))
        .collect();
    let mut checker_sessions = Vec::new();
    for checker in &mut checkers {
        checker.wait_line("CHECKER-READY", Duration::from_secs(20));
        let session = server
            .accept(Duration::from_secs(5))
            .expect("checker session");
        assert!(
            matches!(session.made, Grant::Checker { .. }),
            "{:?}",
            session.made
        );
        checker_sessions.push(session);
    }
    // Sessions come out in logon order; each worker granted its own handle.
    for session in &worker_sessions {
        let Grant::Worker { w, handle } = session.made else {
            panic!("a worker's session granted {:?}", session.made);
        };
        assert_eq!(handle, 1 + w);
        assert_eq!(session.peer.pid, workers[w as usize].guard.id());
    }
    let scheduler_args = |buffer: usize| {
        vec![
            "scheduler".to_owned(),
            socket.clone(),
            WORKERS.to_string(),
            HANDLES.to_string(),
            buffer.to_string(),
        ]
    };
    // The first scheduler keeps a container of transactions it has not
    // forwarded yet: killed, it loses them, and only the server's
    // at-least-once resend brings them back.
    let mut first = Peer::spawn(&scheduler_args(BUFFER));
    first.wait_line("SCHEDULER-READY", Duration::from_secs(20));
    let first_session = server
        .accept(Duration::from_secs(5))
        .expect("scheduler session");
    assert_eq!(first_session.peer.pid, first.guard.id());
    assert_eq!(first_session.logon.counts.len(), 2);
    assert_eq!(
        first_session.made,
        Grant::Scheduler {
            handles: vec![7, 8]
        }
    );

    // The TPU streams on a thread of the server's.
    let watch = Arc::new(TpuProgress::default());
    let (mut tpu, mut progress, mut reports, mut handle) = server.tpu_ends().expect("tpu ends");
    let tpu_thread = {
        let watch = Arc::clone(&watch);
        std::thread::spawn(move || {
            let mut ledger = Ledger::new(count);
            let result = ledger.run(
                &mut tpu,
                &mut progress,
                &mut reports,
                &mut handle,
                &watch,
                Duration::from_secs(180),
            );
            (ledger, result, handle)
        })
    };
    let reach = |fraction: u64, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while watch.unique.load(Ordering::Relaxed) < count * fraction / 10 {
            assert!(Instant::now() < deadline, "{what}: the stream stalled");
            std::thread::sleep(Duration::from_millis(2));
        }
    };

    // Fault 1: the scheduler, killed mid-stream.
    reach(3, "before the scheduler's kill");
    watch.hold.store(true, Ordering::Relaxed);
    let (killed, _) = first.kill9();
    let gone = first_session.link.wait_gone(Duration::from_secs(5));
    let scheduler_seen = killed.elapsed();
    assert!(gone.is_some(), "the server never saw the scheduler die");
    assert!(
        scheduler_seen < Duration::from_secs(1),
        "the server saw the scheduler's death after {scheduler_seen:?}"
    );
    let pushed_at_death = watch.pushed.load(Ordering::Relaxed);
    // Reaped, as a parent does on SIGCHLD (not needed: a zombie's roles
    // and handles are taken over at once, as fdpass's liveness policy says).
    first.guard.wait_timeout(Duration::from_secs(5));
    drop(first_session);
    server.scheduler_gone();
    let mut second = Peer::spawn(&scheduler_args(0));
    second.wait_line("SCHEDULER-READY", Duration::from_secs(20));
    let second_session = server
        .accept(Duration::from_secs(5))
        .expect("second session");
    assert_eq!(
        second_session.made,
        Grant::Scheduler {
            handles: vec![9, 10]
        }
    );
    watch.hold.store(false, Ordering::Relaxed);

    // Fault 2: a worker, killed while the second scheduler runs.
    reach(6, "before the worker's kill");
    let victim = 3usize;
    let (_, killed_ns) = workers[victim].kill9();
    // Its parent reaps it at once, as a parent does on SIGCHLD.
    workers[victim].guard.wait_timeout(Duration::from_secs(5));
    let died = second.wait_line(&format!("WORKER-DIED {victim} "), Duration::from_secs(10));
    let worker_seen =
        Duration::from_nanos(field(&died, "at_ns").parse::<u64>().unwrap() - killed_ns);
    assert_eq!(field(&died, "pop"), "PeerDied", "{died}");
    assert_eq!(field(&died, "push"), "PeerDied", "{died}");
    assert!(
        worker_seen < Duration::from_secs(1),
        "the scheduler saw worker {victim} die after {worker_seen:?}"
    );

    // The stream finishes on the three workers left.
    let (ledger, result, mut handle) = tpu_thread.join().expect("tpu thread");
    result.expect("every transaction reported");
    let tally = &ledger.tally;
    assert_eq!(tally.unique, count);
    assert!(tally.reports.iter().all(|&n| n >= 1));
    assert_eq!(
        tally.corrupt, 0,
        "a worker or the scheduler saw a wrong byte"
    );

    // End the sessions: the scheduler and the workers see it and exit.
    drop(second_session);
    drop(worker_sessions);
    drop(checker_sessions);
    let summary = second.wait_line("SCHEDULER-DONE", Duration::from_secs(20));
    assert_eq!(field(&summary, "corrupt"), "0", "{summary}");
    assert_eq!(field(&summary, "free_errors"), "0", "{summary}");
    assert!(second.guard.wait_timeout(Duration::from_secs(20)).success());
    for (w, worker) in workers.iter_mut().enumerate() {
        if w == victim {
            continue;
        }
        let done = worker.wait_line("WORKER-DONE", Duration::from_secs(20));
        assert_eq!(field(&done, "corrupt"), "0", "{done}");
        assert!(worker.guard.wait_timeout(Duration::from_secs(20)).success());
    }
    let mut check_lines = Vec::new();
    for checker in &mut checkers {
        let done = checker.wait_line("CHECKER-DONE", Duration::from_secs(20));
        assert_eq!(field(&done, "corrupt"), "0", "{done}");
        assert!(
            checker
                .guard
                .wait_timeout(Duration::from_secs(20))
                .success()
        );
        check_lines.push(done);
    }

    // Free, from the TPU's ledger, what the dead scheduler held (and every
    // block a resend replaced), then take every other handle by id (a dead
    // holder's over, a departed one's slabs adopted) and count what is left.
    let window = 4 * 8192;
    let (freed, before) = ledger
        .free_leftovers(
            &mut handle,
            pushed_at_death.saturating_sub(window)..pushed_at_death,
        )
        .expect("free leftovers");
    let held = server.blocks_left(&mut handle).expect("blocks left");
    let left: usize = held.iter().map(|(_, n)| n).sum();
    // What a killed process allocated and never handed over, nobody else
    // knows of: a scheduler's check batch and execution batch allocated and
    // not yet sent, and the batch and responses of the one check answer
    // and the one execution answer it popped and had not freed yet (6
    // blocks at most); a worker's responses not yet sent (1).
    assert!(
        left <= 7,
        "{left} blocks still held after the session (handle, blocks): {held:?}"
    );
    let rate = count as f64 / ledger.elapsed.as_secs_f64();
    println!(
        "scheduler session: {count} transactions in {:?} ({rate:.0}/s, debug build), \
         {} duplicates, {} resent; server saw the killed scheduler after {scheduler_seen:?}; \
         scheduler saw worker {victim} die after {worker_seen:?} ({died}); \
         ledger freed {freed} blocks the dead scheduler held ({before} already freed); \
         {left} blocks left allocated by the killed processes; huge pages: {}; \
         second scheduler: {summary}; check workers: {check_lines:?}",
        ledger.elapsed,
        tally.duplicates,
        ledger.resent,
        server.huge_pages(),
    );
    drop(server);
    assert!(nodeipc_testkit::shm_leftovers("sched").is_empty());
}
