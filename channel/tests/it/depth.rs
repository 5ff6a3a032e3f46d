//! `depth = k`: the coordinator runs exactly `k` requests ahead of a worker
//! that does not receive; the next `send` is a `Timeout` after the
//! configured wait, sends nothing, and the channel goes on once the worker
//! takes a request. Answers have a ring of `depth` slots per worker too.

use std::time::{Duration, Instant};

use nodeipc_channel::{All, Channel, Coordinator, Error, Init, SemKind, Worker};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse, ExecuteType};
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};

const TIMEOUT: Duration = Duration::from_millis(300);

fn request(sequence: u64) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        ..Default::default()
    }
}

/// A channel of `depth` with one worker, both ends in this thread.
fn one_worker(name: &str, sems: SemKind, depth: u32) -> (Coordinator, Worker) {
    let channel = Channel::builder(name)
        .workers(1)
        .depth(depth)
        .sems(sems)
        .timeout(TIMEOUT);
    let coordinator = channel.create().unwrap();
    let worker = channel.join(0).unwrap();
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    (coordinator, worker)
}

fn full_ring(sems: SemKind, depth: u32) {
    let name = unique_name("depth");
    let (coordinator, mut worker) = one_worker(&name, sems, depth);

    // The worker receives nothing yet: exactly `depth` sends find a frame.
    for sequence in 0..u64::from(depth) {
        assert_eq!(
            coordinator.send(&request(sequence)).unwrap(),
            sequence,
            "depth {depth}: send {sequence} of {depth}"
        );
    }
    let start = Instant::now();
    match coordinator.send(&request(u64::from(depth))) {
        Err(Error::Timeout {
            channel,
            op,
            waited,
        }) => {
            assert_eq!(channel, name);
            assert!(op.contains("worker 0"), "{op}");
            assert!(waited >= TIMEOUT, "gave up after {waited:?}");
        }
        other => panic!("depth {depth}: send {depth} should time out, got {other:?}"),
    }
    // Roughly the configured timeout, not a hang (the watchdog is the hard bound).
    assert!(
        start.elapsed() < TIMEOUT + Duration::from_secs(5),
        "the full ring held send for {:?}",
        start.elapsed()
    );

    // One request received frees one frame: the next send goes, as the next
    // request; the one that timed out was never sent.
    assert_eq!(worker.recv().unwrap().sequence, 0);
    assert_eq!(
        coordinator.send(&request(u64::from(depth))).unwrap(),
        u64::from(depth)
    );
    // And the ring is full again.
    assert!(matches!(
        coordinator.send(&request(u64::from(depth) + 1)),
        Err(Error::Timeout { .. })
    ));
    for sequence in 1..=u64::from(depth) {
        assert_eq!(worker.recv().unwrap().sequence, sequence);
    }
    // Nothing else is in the ring: a further receive waits and times out.
    assert!(matches!(worker.recv(), Err(Error::Timeout { .. })));

    drop(worker);
    drop(coordinator);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

#[test]
fn a_full_ring_of_depth_k_times_out_the_next_send_then_frees_a_frame_per_receive() {
    let _dog = Watchdog::new("full ring", Duration::from_secs(60));
    for depth in [2, 4] {
        full_ring(SemKind::InRegion, depth);
    }
    full_ring(SemKind::Named, 3);
}

/// With several workers, a send that times out on a later rank must give
/// back the frames it already took from the earlier ranks: otherwise worker
/// 0 has one frame fewer for good after every such timeout, and with depth 1
/// the channel can never send again though every worker has caught up.
#[test]
fn a_send_timed_out_on_one_worker_leaves_the_others_frames_free() {
    let _dog = Watchdog::new("timed-out send frees frames", Duration::from_secs(60));
    let name = unique_name("depth-two");
    let channel = Channel::builder(&name).workers(2).timeout(TIMEOUT);
    let coordinator = channel.create().unwrap();
    let mut prompt = channel.join(0).unwrap();
    let mut behind = channel.join(1).unwrap();
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    assert_eq!(coordinator.send(&request(0)).unwrap(), 0);
    assert_eq!(prompt.recv().unwrap().sequence, 0);
    // Worker 0 has room, worker 1 has not.
    match coordinator.send(&request(1)) {
        Err(Error::Timeout { op, .. }) => assert!(op.contains("worker 1"), "{op}"),
        other => panic!("expected a timeout on worker 1, got {other:?}"),
    }
    assert_eq!(behind.recv().unwrap().sequence, 0);
    // Both have caught up: request 1 must go.
    assert_eq!(coordinator.send(&request(1)).unwrap(), 1);
    assert_eq!(prompt.recv().unwrap().sequence, 1);
    assert_eq!(behind.recv().unwrap().sequence, 1);
    drop((prompt, behind, coordinator));
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

fn answer(sequence: u64) -> ExecuteResponse {
    ExecuteResponse {
        sequence,
        ..Default::default()
    }
}

/// Each worker has a ring of `depth` answers: it answers `depth` requests
/// the coordinator has not gathered yet (an init answer among them, which
/// counts in the same ring), the next answer waits for a gather and times
/// out naming the full ring, and the gathers then read every answer in
/// order. A worker that leaves and rejoins goes on where its answers
/// stopped.
#[test]
fn a_worker_answers_depth_requests_ahead_of_the_gathers_then_waits() {
    let _dog = Watchdog::new("answer ring", Duration::from_secs(60));
    for sems in [SemKind::InRegion, SemKind::Named] {
        let name = unique_name("answers");
        let depth = 3;
        let (coordinator, mut worker) = one_worker(&name, sems, depth);
        for sequence in 0..u64::from(depth) {
            coordinator.send(&request(sequence)).unwrap();
            let received = worker.recv().unwrap();
            let response = answer(received.sequence);
            if sequence == 1 {
                worker.respond_init(&response).unwrap();
            } else {
                worker.respond(&response).unwrap();
            }
        }
        // Every answer slot is full: the next answer waits for a gather.
        coordinator.send(&request(3)).unwrap();
        assert_eq!(worker.recv().unwrap().sequence, 3);
        match worker.respond(&answer(3)) {
            Err(Error::Timeout { op, .. }) => {
                assert!(op.contains("every answer slot full"), "{op}")
            }
            other => panic!("{sems:?}: a fourth answer should time out, got {other:?}"),
        }
        assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 0);
        // One gathered: its slot takes the answer that timed out.
        worker.respond(&answer(3)).unwrap();
        assert_eq!(coordinator.recv(Init).unwrap()[0].sequence, 1);
        assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 2);
        if sems == SemKind::InRegion {
            rejoin_behind_an_answer(&name, &coordinator, worker);
        } else {
            drop(worker);
            assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 3);
        }
        drop(coordinator);
        assert!(
            shm_leftovers(&name).is_empty(),
            "{:?}",
            shm_leftovers(&name)
        );
    }
}

/// Rejoining with an answer not yet gathered: the next answer goes after
/// it, not over it. The names are gone once every worker is in: a worker
/// comes back over the regions' descriptors (in-region semaphores, as the
/// handshake brings them).
fn rejoin_behind_an_answer(name: &str, coordinator: &Coordinator, worker: Worker) {
    drop(worker);
    let dup = |fd: std::os::fd::BorrowedFd<'_>| fd.try_clone_to_owned().unwrap();
    let mut worker: Worker = Worker::from_fds(
        name,
        0,
        dup(coordinator.request_fd()),
        dup(coordinator.response_fd()),
        TIMEOUT,
    )
    .unwrap();
    coordinator.send(&request(4)).unwrap();
    assert_eq!(worker.recv().unwrap().sequence, 4);
    worker.respond(&answer(4)).unwrap();
    assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 3);
    assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 4);
}
