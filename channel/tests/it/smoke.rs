//! Coordinator and workers as threads: the request and response paths in
//! every gather mode, both semaphore kinds and depths.

use std::thread;
use std::time::Duration;

use nodeipc_channel::{Aggregated, All, Channel, ChannelBuilder, Error, First, SemKind, Worker};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, PdErrorCode, PullKvResponse,
    PullKvResult, execute_request, execute_response,
};
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};

fn forward(sequence: u64, payload: usize) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![sequence],
            input: (vec![(sequence % 251) as u8; payload]).into(),
        })),
    }
}

fn answer(request: &ExecuteRequest, rank: u32) -> ExecuteResponse {
    ExecuteResponse {
        status: 0,
        msg_type: request.execute_type,
        sequence: request.sequence,
        error: String::new(),
        result: Some(execute_response::Result::Forward(
            nodeipc_proto::execute::ForwardResponse {
                output: (vec![rank as u8]).into(),
            },
        )),
    }
}

/// Workers as threads that answer `count` requests each, checking each one.
fn spawn_workers(channel: &ChannelBuilder, count: u64) -> Vec<thread::JoinHandle<()>> {
    (0..channel.config().workers)
        .map(|rank| {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut worker = channel.join(rank).unwrap();
                for sequence in 0..count {
                    let request = worker.recv().unwrap();
                    assert_eq!(
                        request.sequence, sequence,
                        "worker {rank} got requests out of order"
                    );
                    worker.respond(&answer(&request, rank)).unwrap();
                }
            })
        })
        .collect()
}

fn round_trips(sems: SemKind, workers: u32, depth: u32, count: u64) {
    let _dog = Watchdog::new("round_trips", Duration::from_secs(120));
    let name = unique_name("chan");
    let channel = Channel::builder(&name)
        .workers(workers)
        .depth(depth)
        .sems(sems)
        .timeout(Duration::from_secs(20));
    let coordinator = channel.create().unwrap();
    let handles = spawn_workers(&channel, count);
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    assert!(
        shm_leftovers(&name).is_empty(),
        "names survive wait_for_workers"
    );
    let mut next_to_gather = 0;
    for sequence in 0..count {
        coordinator.send(&forward(sequence, 64)).unwrap();
        // Keep `depth` requests in flight.
        if sequence + 1 - next_to_gather >= u64::from(depth) {
            let responses = coordinator.recv(All).unwrap();
            assert_eq!(responses.len(), workers as usize);
            for (rank, response) in responses.iter().enumerate() {
                assert_eq!(response.sequence, next_to_gather);
                assert!(
                    matches!(&response.result, Some(execute_response::Result::Forward(f)) if f.output[..] == [rank as u8])
                );
            }
            next_to_gather += 1;
        }
    }
    while next_to_gather < count {
        assert_eq!(coordinator.recv(All).unwrap()[0].sequence, next_to_gather);
        next_to_gather += 1;
    }
    for h in handles {
        h.join().unwrap();
    }
    assert!(matches!(
        coordinator.recv(All),
        Err(Error::NothingOutstanding { .. })
    ));
}

#[test]
fn in_region_lock_step() {
    round_trips(SemKind::InRegion, 2, 1, 2000);
}

#[test]
fn in_region_depth_4() {
    round_trips(SemKind::InRegion, 3, 4, 2000);
}

#[test]
fn named_lock_step() {
    round_trips(SemKind::Named, 2, 1, 500);
}

#[test]
fn aggregation_prefers_a_failed_pull_kv_else_rank_0() {
    let _dog = Watchdog::new("aggregation", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("agg"))
        .workers(3)
        .timeout(Duration::from_secs(10));
    let coordinator = channel.create().unwrap();
    let handles: Vec<_> = (0..3u32)
        .map(|rank| {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut worker = channel.join(rank).unwrap();
                for round in 0..2u64 {
                    let request = worker.recv().unwrap();
                    let code = if round == 1 && rank == 2 {
                        PdErrorCode::PdTimeout
                    } else {
                        PdErrorCode::PdSuccess
                    };
                    worker
                        .respond(&ExecuteResponse {
                            msg_type: ExecuteType::PullKv as i32,
                            sequence: request.sequence,
                            result: Some(execute_response::Result::PullKvResponse(
                                PullKvResponse {
                                    results: vec![PullKvResult {
                                        request_id: u64::from(rank),
                                        pd_error_code: code as i32,
                                    }],
                                },
                            )),
                            ..Default::default()
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    coordinator
        .send(&ExecuteRequest {
            sequence: 0,
            ..Default::default()
        })
        .unwrap();
    let all_ok = coordinator.recv(Aggregated).unwrap();
    assert!(
        matches!(all_ok.result, Some(execute_response::Result::PullKvResponse(p)) if p.results[0].request_id == 0)
    );
    coordinator
        .send(&ExecuteRequest {
            sequence: 1,
            ..Default::default()
        })
        .unwrap();
    let failed = coordinator.recv(Aggregated).unwrap();
    assert!(
        matches!(failed.result, Some(execute_response::Result::PullKvResponse(p)) if p.results[0].request_id == 2)
    );
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn regression_a_first_gather_with_depth_never_deadlocks_a_slow_worker() {
    // A First gather leaves the slow worker's answers behind; with depth > 1 the
    // coordinator can then block in send on that worker's frames while the
    // worker blocks on its full response slot. send must drain them.
    let _dog = Watchdog::new("first gather depth", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("first-depth"))
        .workers(2)
        .depth(4)
        .timeout(Duration::from_secs(10));
    let coordinator = channel.create().unwrap();
    let count = 300u64;
    let handles: Vec<_> = (0..2u32)
        .map(|rank| {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut worker = channel.join(rank).unwrap();
                for _ in 0..count {
                    let request = worker.recv().unwrap();
                    if rank == 1 {
                        thread::sleep(Duration::from_micros(300));
                    }
                    worker.respond(&answer(&request, rank)).unwrap();
                }
            })
        })
        .collect();
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    let mut gathered = 0;
    for sequence in 0..count {
        coordinator.send(&forward(sequence, 8)).unwrap();
        if sequence + 1 - gathered >= 4 {
            assert_eq!(coordinator.recv(First).unwrap().1.sequence, gathered);
            gathered += 1;
        }
    }
    while gathered < count {
        coordinator.recv(First).unwrap();
        gathered += 1;
    }
    assert!(
        coordinator.drain().unwrap() > 0,
        "the slow worker's answers were never behind"
    );
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn regression_an_answer_after_the_coordinator_closed_fails_at_once() {
    let _dog = Watchdog::new("answer after close", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("closed"))
        .workers(1)
        .timeout(Duration::from_secs(30));
    let coordinator = channel.create().unwrap();
    let mut worker = channel.join(0).unwrap();
    coordinator.send(&forward(0, 1)).unwrap();
    let request = worker.recv().unwrap();
    worker.respond(&answer(&request, 0)).unwrap(); // the slot now holds an answer nobody takes
    drop(coordinator);
    let start = std::time::Instant::now();
    let err = worker.respond(&answer(&request, 0)).unwrap_err();
    assert!(matches!(err, Error::Closed { .. }), "{err}");
    // At once, not at the 30 s timeout.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "waited {:?} for a closed coordinator",
        start.elapsed()
    );
    assert!(matches!(worker.recv(), Err(Error::Closed { .. })));
}

#[test]
fn response_thread_hands_every_response_to_the_handler_and_stops_promptly() {
    let _dog = Watchdog::new("response thread", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("thread"))
        .workers(2)
        .depth(2)
        .timeout(Duration::from_secs(10));
    let mut coordinator = channel.create().unwrap();
    let handles = spawn_workers(&channel, 200);
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    assert!(
        matches!(
            coordinator.start_response_thread(),
            Err(Error::ResponseThread { .. })
        ),
        "started without a handler"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    coordinator
        .on_response(move |response| tx.send(response.map(|r| r.sequence)).unwrap())
        .unwrap();
    assert!(
        matches!(
            coordinator.on_response(|_| {}),
            Err(Error::ResponseThread { .. })
        ),
        "a second handler"
    );
    coordinator.start_response_thread().unwrap();
    assert!(
        matches!(
            coordinator.start_response_thread(),
            Err(Error::ResponseThread { .. })
        ),
        "started twice"
    );
    assert!(
        matches!(coordinator.recv(All), Err(Error::ResponseThread { .. })),
        "gathered beside the thread"
    );
    for sequence in 0..200 {
        coordinator.send(&forward(sequence, 16)).unwrap();
    }
    for sequence in 0..200 {
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap(),
            sequence
        );
    }
    let start = std::time::Instant::now();
    coordinator.stop_response_thread().unwrap();
    // A wait slice, not the 10 s timeout.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        start.elapsed()
    );
    assert!(matches!(
        coordinator.stop_response_thread(),
        Err(Error::ResponseThread { .. })
    ));
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_worker_of_another_shape_is_refused_naming_both_values() {
    let name = unique_name("shape");
    let _coordinator = Channel::builder(&name)
        .workers(2)
        .timeout(Duration::from_secs(5))
        .create()
        .unwrap();
    let wrong = Channel::builder(&name)
        .workers(3)
        .timeout(Duration::from_secs(5));
    match wrong.join(0) {
        Err(Error::Mismatch {
            what, ours, theirs, ..
        }) => assert_eq!((what, ours, theirs), ("worker count", 3, 2)),
        Err(other) => panic!("expected Mismatch, got {other}"),
        Ok(_) => panic!("a worker of another shape joined"),
    }
    let right = Channel::builder(&name)
        .workers(2)
        .timeout(Duration::from_secs(5));
    assert!(matches!(
        right.join(2),
        Err(Error::RankOutOfRange { rank: 2, .. })
    ));
    let _first = right.join(1).unwrap();
    assert!(matches!(
        right.join(1),
        Err(Error::RankTaken { rank: 1, .. })
    ));
}

#[test]
fn a_worker_that_leaves_can_rejoin_its_rank_where_it_stopped() {
    // Names are gone once every worker is in, so a worker comes back the way
    // the handshake brings it: over the regions' descriptors.
    let _dog = Watchdog::new("rejoin", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("rejoin"))
        .workers(2)
        .depth(2)
        .timeout(Duration::from_secs(10));
    let coordinator = channel.create().unwrap();
    let steady = {
        let channel = channel.clone();
        thread::spawn(move || {
            let mut worker = channel.join(0).unwrap();
            for _ in 0..30 {
                let request = worker.recv().unwrap();
                worker.respond(&answer(&request, 0)).unwrap();
            }
        })
    };
    let fds: Vec<_> = (0..3)
        .map(|_| {
            let dup = |fd: std::os::fd::BorrowedFd<'_>| fd.try_clone_to_owned().unwrap();
            (
                dup(coordinator.request_fd()),
                dup(coordinator.response_fd()),
            )
        })
        .collect();
    let rejoining = {
        let name = channel.config().name.clone();
        thread::spawn(move || {
            let mut next = 0;
            for (stint, (request_fd, response_fd)) in fds.into_iter().enumerate() {
                let mut worker: Worker =
                    Worker::from_fds(&name, 1, request_fd, response_fd, Duration::from_secs(10))
                        .unwrap_or_else(|e| panic!("stint {stint}: {e}"));
                for _ in 0..10 {
                    let request = worker
                        .recv()
                        .unwrap_or_else(|e| panic!("stint {stint}: {e}"));
                    assert_eq!(request.sequence, next, "rejoined at the wrong place");
                    next += 1;
                    worker.respond(&answer(&request, 1)).unwrap();
                }
                drop(worker); // leave; the coordinator keeps sending meanwhile
                thread::sleep(Duration::from_millis(20));
            }
        })
    };
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    for sequence in 0..30 {
        coordinator.send(&forward(sequence, 8)).unwrap();
        let responses = coordinator.recv(All).unwrap();
        assert!(responses.iter().all(|r| r.sequence == sequence));
    }
    steady.join().unwrap();
    rejoining.join().unwrap();
}

#[test]
fn a_taken_rank_cannot_be_joined_twice_but_a_left_one_can() {
    let name = unique_name("taken");
    let channel = Channel::builder(&name)
        .workers(1)
        .timeout(Duration::from_secs(5));
    let _coordinator = channel.create().unwrap();
    let first = channel.join(0).unwrap();
    assert!(matches!(
        channel.join(0),
        Err(Error::RankTaken { rank: 0, .. })
    ));
    drop(first);
    channel.join(0).expect("a rank left cleanly is free again");
}
