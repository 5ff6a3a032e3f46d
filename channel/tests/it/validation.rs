//! What the coordinator does with a response that arrived intact but says
//! something is wrong: a non-zero `status` is `WorkerFailed`, a `msg_type`
//! this side does not know is `UnknownMessageType`, each naming the worker,
//! through every gather that validates — and the channel stays in step.
//!
//! Coordinator and workers live in this one process (the workers on the
//! test's own thread: with depth 1 and one request in flight nothing blocks).

use std::sync::mpsc;
use std::time::Duration;

use nodeipc_channel::{Aggregated, All, Channel, Coordinator, Error, Init, Worker};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse, ExecuteType};
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};

const WORKERS: u32 = 3;

/// A coordinator and `WORKERS` workers that have joined; the names are gone.
fn channel(tag: &str) -> (String, Coordinator, Vec<Worker>) {
    let name = unique_name(tag);
    let channel = Channel::builder(&name)
        .workers(WORKERS)
        .timeout(Duration::from_secs(10));
    let coordinator = channel.create().unwrap();
    let workers = (0..WORKERS)
        .map(|rank| channel.join(rank).unwrap())
        .collect();
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    (name, coordinator, workers)
}

fn request(sequence: u64) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        ..Default::default()
    }
}

fn ok(request: &ExecuteRequest) -> ExecuteResponse {
    ExecuteResponse {
        msg_type: request.execute_type,
        sequence: request.sequence,
        ..Default::default()
    }
}

/// Sends `sequence`; every worker receives it, and answers with what
/// `answer(rank, request)` makes (in its init slot if `init`).
fn round(
    coordinator: &mut Coordinator,
    workers: &mut [Worker],
    sequence: u64,
    init: bool,
    answer: impl Fn(u32, &ExecuteRequest) -> ExecuteResponse,
) {
    coordinator.send(&request(sequence)).unwrap();
    for worker in workers.iter_mut() {
        let request = worker.recv().unwrap();
        assert_eq!(request.sequence, sequence);
        let response = answer(worker.rank(), &request);
        if init {
            worker.respond_init(&response).unwrap();
        } else {
            worker.respond(&response).unwrap();
        }
    }
}

fn failed(rank: u32, request: &ExecuteRequest, status: i32) -> ExecuteResponse {
    ExecuteResponse {
        status,
        error: format!("rank {rank}: CUDA out of memory"),
        ..ok(request)
    }
}

/// Checks `result` is `WorkerFailed` from `rank` with `status` for
/// `sequence`, and that its text names the channel and the worker.
fn assert_worker_failed<T: std::fmt::Debug>(
    result: nodeipc_channel::Result<T>,
    name: &str,
    rank: u32,
    sequence: u64,
    status: i32,
) {
    match result {
        Err(
            ref e @ Error::WorkerFailed {
                ref channel,
                rank: r,
                sequence: s,
                status: st,
                ref message,
            },
        ) => {
            assert_eq!(channel, name);
            assert_eq!((r, s, st), (rank, sequence, status), "{e}");
            assert_eq!(message, &format!("rank {rank}: CUDA out of memory"));
            let text = e.to_string();
            for fragment in [
                name.to_owned(),
                format!("worker {rank} "),
                format!("request {sequence} "),
                format!("status {status}"),
                message.clone(),
            ] {
                assert!(text.contains(&fragment), "{text:?} lacks {fragment:?}");
            }
        }
        other => panic!("expected WorkerFailed from worker {rank}, got {other:?}"),
    }
}

fn assert_unknown_type<T: std::fmt::Debug>(
    result: nodeipc_channel::Result<T>,
    name: &str,
    rank: u32,
    value: i32,
) {
    match result {
        Err(
            ref e @ Error::UnknownMessageType {
                ref channel,
                rank: r,
                value: v,
            },
        ) => {
            assert_eq!(channel, name);
            assert_eq!((r, v), (rank, value), "{e}");
            let text = e.to_string();
            for fragment in [
                name.to_owned(),
                format!("worker {rank} "),
                format!("unknown message type {value}"),
            ] {
                assert!(text.contains(&fragment), "{text:?} lacks {fragment:?}");
            }
        }
        other => panic!("expected UnknownMessageType from worker {rank}, got {other:?}"),
    }
}

/// After a refused response the next request goes through whole: every
/// slot was consumed, nobody is a request behind.
fn assert_in_step(coordinator: &mut Coordinator, workers: &mut [Worker], sequence: u64) {
    round(coordinator, workers, sequence, false, |_, r| ok(r));
    let responses = coordinator.recv(All).unwrap();
    assert_eq!(responses.len(), WORKERS as usize);
    assert!(
        responses.iter().all(|r| r.sequence == sequence),
        "{responses:?}"
    );
}

#[test]
fn a_non_zero_status_is_worker_failed_with_rank_status_and_message() {
    let _dog = Watchdog::new("worker failed", Duration::from_secs(60));
    let (name, mut coordinator, mut workers) = channel("failed");

    // recv(All): only rank 1 fails.
    round(&mut coordinator, &mut workers, 10, false, |rank, r| {
        if rank == 1 {
            failed(rank, r, 13)
        } else {
            ok(r)
        }
    });
    assert_worker_failed(coordinator.recv(All), &name, 1, 10, 13);
    assert_in_step(&mut coordinator, &mut workers, 11);

    // recv(Aggregated), a negative status from the last rank.
    round(&mut coordinator, &mut workers, 12, false, |rank, r| {
        if rank == 2 {
            failed(rank, r, -2)
        } else {
            ok(r)
        }
    });
    assert_worker_failed(coordinator.recv(Aggregated), &name, 2, 12, -2);
    assert_in_step(&mut coordinator, &mut workers, 13);

    // Two ranks fail: the first in rank order is reported.
    round(&mut coordinator, &mut workers, 14, false, |rank, r| {
        if rank == 0 {
            ok(r)
        } else {
            failed(rank, r, 100 + rank as i32)
        }
    });
    assert_worker_failed(coordinator.recv(All), &name, 1, 14, 101);
    assert_in_step(&mut coordinator, &mut workers, 15);

    // recv(Init) reads the init slots and validates them the same way.
    round(&mut coordinator, &mut workers, 16, true, |rank, r| {
        if rank == 2 { failed(rank, r, 7) } else { ok(r) }
    });
    assert_worker_failed(coordinator.recv(Init), &name, 2, 16, 7);
    assert_in_step(&mut coordinator, &mut workers, 17);

    drop(workers);
    drop(coordinator);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

#[test]
fn an_unknown_msg_type_is_unknown_message_type_with_rank_and_value() {
    let _dog = Watchdog::new("unknown msg_type", Duration::from_secs(60));
    let (name, mut coordinator, mut workers) = channel("unknown-type");
    let unknown = 999;
    assert!(ExecuteType::try_from(unknown).is_err(), "999 became a type");

    round(&mut coordinator, &mut workers, 20, false, |rank, r| {
        let mut response = ok(r);
        if rank == 2 {
            response.msg_type = unknown;
        }
        response
    });
    assert_unknown_type(coordinator.recv(All), &name, 2, unknown);
    assert_in_step(&mut coordinator, &mut workers, 21);

    // A negative value, through the aggregated gather.
    round(&mut coordinator, &mut workers, 22, false, |rank, r| {
        let mut response = ok(r);
        if rank == 0 {
            response.msg_type = -1;
        }
        response
    });
    assert_unknown_type(coordinator.recv(Aggregated), &name, 0, -1);
    assert_in_step(&mut coordinator, &mut workers, 23);

    // In an init slot.
    round(&mut coordinator, &mut workers, 24, true, |rank, r| {
        let mut response = ok(r);
        if rank == 1 {
            response.msg_type = unknown;
        }
        response
    });
    assert_unknown_type(coordinator.recv(Init), &name, 1, unknown);
    assert_in_step(&mut coordinator, &mut workers, 25);

    drop(workers);
    drop(coordinator);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

#[test]
fn the_response_thread_hands_the_refusal_to_the_handler_and_goes_on() {
    let _dog = Watchdog::new("refusal on the response thread", Duration::from_secs(60));
    let (name, mut coordinator, mut workers) = channel("failed-thread");
    let (tx, rx) = mpsc::channel();
    coordinator
        .on_response(move |response| tx.send(response).unwrap())
        .unwrap();
    coordinator.start_response_thread().unwrap();
    let wait = Duration::from_secs(10);

    round(&mut coordinator, &mut workers, 30, false, |rank, r| {
        if rank == 1 {
            failed(rank, r, 42)
        } else {
            ok(r)
        }
    });
    assert_worker_failed(rx.recv_timeout(wait).unwrap(), &name, 1, 30, 42);

    round(&mut coordinator, &mut workers, 31, false, |rank, r| {
        let mut response = ok(r);
        if rank == 0 {
            response.msg_type = 555;
        }
        response
    });
    assert_unknown_type(rx.recv_timeout(wait).unwrap(), &name, 0, 555);

    // One refused response does not end the thread.
    round(&mut coordinator, &mut workers, 32, false, |_, r| ok(r));
    assert_eq!(rx.recv_timeout(wait).unwrap().unwrap().sequence, 32);
    assert!(coordinator.response_thread_running());
    coordinator.stop_response_thread().unwrap();

    drop(workers);
    drop(coordinator);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}
