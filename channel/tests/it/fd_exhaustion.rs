//! A coordinator out of descriptors when it first looks at a worker cannot
//! open the worker's pidfd: it fails with that error (naming the pid and the
//! errno), and never reports the live worker as dead.
//!
//! Runs in a child (this test binary again) whose descriptor table is
//! filled once the worker, a thread of it, has joined.

use std::sync::mpsc;
use std::time::Duration;

use nodeipc_channel::{Channel, Error};
use nodeipc_testkit::{FullFdTable, Watchdog, shm_leftovers, spawn_child, unique_name};
use rustix::io::Errno;

/// Set in the child: the channel name.
const CHILD: &str = "NODEIPC_CHANNEL_TEST_FD_EXHAUSTION_CHILD";
const TEST: &str = "regression_a_coordinator_out_of_descriptors_reports_that_not_a_dead_worker";

fn child(name: &str) {
    println!(); // our lines start after the harness's "test … ..."
    let channel = Channel::builder(name)
        .workers(1)
        .timeout(Duration::from_secs(5));
    let coordinator = channel.create().unwrap();
    let (joined, wait_joined) = mpsc::channel();
    let (done, wait_done) = mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let worker = channel.join(0).unwrap();
        joined.send(()).unwrap();
        let _ = wait_done.recv();
        drop(worker);
    });
    wait_joined.recv().unwrap();
    let table = FullFdTable::fill(0);
    let result = coordinator.wait_for_workers(Duration::from_secs(1));
    drop(table);
    match result {
        Err(Error::WorkerDied { rank, .. }) => println!("said worker {rank} died"),
        Err(e) => println!("error: {e}"),
        Ok(()) => println!("joined"),
    }
    // With descriptors back, the worker is found alive.
    coordinator
        .wait_for_workers(Duration::from_secs(5))
        .unwrap();
    println!("joined after");
    done.send(()).unwrap();
    worker.join().unwrap();
}

#[test]
fn regression_a_coordinator_out_of_descriptors_reports_that_not_a_dead_worker() {
    if let Ok(name) = std::env::var(CHILD) {
        return child(&name);
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let name = unique_name("emfile-chan");
    let child = spawn_child(
        nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), TEST))
            .env(CHILD, &name),
    );
    let pid = child.id();
    let out = child.output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed: {context}");
    let emfile = std::io::Error::from_raw_os_error(Errno::MFILE.raw_os_error()).to_string();
    let line = stdout
        .lines()
        .find(|l| l.starts_with("error: ") || l.starts_with("said") || l == &"joined")
        .unwrap_or_else(|| panic!("no outcome: {context}"));
    assert!(
        line.contains("checking whether worker 0 lives")
            && line.contains(&format!("pidfd_open failed for process {pid}"))
            && line.contains(&emfile),
        "{line}"
    );
    assert!(stdout.contains("joined after"), "{context}");
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}
