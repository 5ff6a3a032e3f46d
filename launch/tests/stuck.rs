//! A binary of its own, not a module of `tests/it/`: it mounts a FUSE file
//! system in this process (its server a thread here) and leaves a rank
//! unkillable in the kernel until the mount goes.
//!
//! A rank that SIGKILL cannot end (hung in the kernel on a FUSE lookup its
//! server never answers) does not hang the single-node launch: the launch
//! gives up on it after its bound, exits, and says what it left behind.

mod fuse;

use std::ffi::OsString;
use std::time::{Duration, Instant};

use fuse::StuckMount;
use nodeipc_launch::{Event, LaunchOptions, launch};
use nodeipc_testkit::{TempDir, Watchdog};

#[test]
fn a_rank_stuck_in_the_kernel_does_not_hang_the_launch_and_is_named() {
    let test = "launch rank stuck in D state";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let Some(mount) = StuckMount::new(test) else {
        return;
    };
    let dir = TempDir::new("launch-stuck");
    let go = dir.join("go");
    // Local rank 0 hangs on the mount; local rank 1 fails once the test
    // has seen rank 0 hang (bounded: 20 s).
    let script = format!(
        "if [ \"$LOCAL_RANK\" = 0 ]; then exec cat '{stuck}'; fi; \
         i=0; while [ ! -e '{go}' ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 3",
        stuck = mount.stuck_path().display(),
        go = go.display(),
    );
    let options = LaunchOptions {
        run_dir: Some(dir.path().to_owned()),
        stderr_events: false,
        stop_timeout: Duration::from_secs(1),
        max_restarts: 0,
        ..LaunchOptions::new(2, ["sh", "-c", &script].map(OsString::from).to_vec())
    };
    let (outcome, took, stuck) = std::thread::scope(|scope| {
        let hung = scope.spawn(|| {
            let pid = mount.wait_for_stuck(Duration::from_secs(20));
            std::fs::write(&go, b"").expect("go file");
            pid
        });
        let began = Instant::now();
        let outcome = launch(&options).expect("launch");
        let took = began.elapsed();
        let pid = hung
            .join()
            .expect("waiter")
            .expect("rank 0 hangs on the mount");
        (outcome, took, pid)
    });
    assert_eq!(outcome.exit_code, 3, "{}", outcome.summary);
    assert!(outcome.summary.contains("rank 1"), "{}", outcome.summary);
    // --stop-timeout (1 s) + the launcher's bound after SIGKILL (5 s),
    // loosely; then it went on without the process.
    assert!(took < Duration::from_secs(20), "{took:?}");
    let rank0 = outcome.events.iter().find_map(|e| match e {
        Event::RankStarted { rank: 0, pid, .. } => Some(*pid),
        _ => None,
    });
    assert_eq!(rank0, Some(stuck), "the hung process is rank 0");
    assert_eq!(fuse::state(stuck), Some('D'), "pid {stuck}");
    // It says so: the round's stop counts the process left alive, and its
    // line says it.
    let stopped = outcome
        .events
        .iter()
        .find(|e| matches!(e, Event::RoundStopped { .. }))
        .expect("round_stopped");
    assert!(
        stopped.line().contains("1 still alive after SIGKILL"),
        "{}",
        stopped.line()
    );
    // The connection ends with the mount: rank 0 dies of its pending
    // SIGKILL; it is our child (the launch ran in this process): reap it.
    drop(mount);
    let began = Instant::now();
    while fuse::alive(stuck) {
        assert!(began.elapsed() < Duration::from_secs(10), "pid {stuck}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: waitpid(2) on our own child's pid, a zombie by now; it
    // writes only the status word on our stack.
    let reaped = unsafe {
        let mut status = 0;
        libc::waitpid(stuck as i32, &mut status, 0)
    };
    assert_eq!(reaped, stuck as i32);
    eprintln!(
        "figures: the launch with a rank stuck in D state exited after {:.2} s",
        took.as_secs_f64()
    );
}
