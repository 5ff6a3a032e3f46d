//! Timeouts per call, beside the configured one: a call that times out
//! takes nothing and poisons nothing, and the next call resumes where it
//! stopped; `try_recv` never waits.

use std::thread;
use std::time::{Duration, Instant};

use nodeipc_channel::{All, Channel, Error};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};
use nodeipc_testkit::{Watchdog, unique_name};

fn request(sequence: u64) -> ExecuteRequest {
    ExecuteRequest {
        sequence,
        ..Default::default()
    }
}

#[test]
fn a_gather_that_times_out_resumes_where_it_stopped() {
    let _dog = Watchdog::new("gather_timeout", Duration::from_secs(60));
    // A configured timeout far longer than the per-call ones: only theirs
    // can explain a prompt return.
    let channel = Channel::builder(unique_name("pct-gather"))
        .workers(2)
        .timeout(Duration::from_secs(30));
    let coordinator = channel.create().unwrap();
    let handles: Vec<_> = (0..2u32)
        .map(|rank| (rank, channel.clone()))
        .map(|(rank, channel)| {
            thread::spawn(move || {
                let mut worker = channel.join(rank).unwrap();
                let request = worker.recv().unwrap();
                (worker, request)
            })
        })
        .collect();
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    coordinator.send(&request(7)).unwrap();
    let mut workers: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // Only worker 0 answers.
    let (w0, r0) = &mut workers[0];
    w0.respond(&ExecuteResponse {
        sequence: r0.sequence,
        ..Default::default()
    })
    .unwrap();
    let started = Instant::now();
    let err = coordinator
        .recv_timeout(All, Duration::from_millis(200))
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("worker 1"), "{err}");
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // Worker 1 answers late; the retry gets both, worker 0's kept from before.
    let (w1, r1) = &mut workers[1];
    w1.respond(&ExecuteResponse {
        sequence: r1.sequence + 100,
        ..Default::default()
    })
    .unwrap();
    let all = coordinator
        .recv_timeout(All, Duration::from_secs(5))
        .unwrap();
    assert_eq!(all[0].sequence, 7);
    assert_eq!(all[1].sequence, 107);
}

#[test]
fn try_recv_never_waits_and_recv_timeout_takes_nothing_when_it_times_out() {
    let _dog = Watchdog::new("worker_timeouts", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("pct-worker"))
        .workers(1)
        .timeout(Duration::from_secs(30));
    let coordinator = channel.create().unwrap();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel::<()>();
    let (waited_tx, waited_rx) = std::sync::mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        let mut worker = channel.join(0).unwrap();
        let started = Instant::now();
        assert!(worker.try_recv().unwrap().is_none());
        // No wait at all, not the 30 s timeout (room for a loaded machine).
        assert!(started.elapsed() < Duration::from_secs(5));
        let started = Instant::now();
        let err = worker.recv_timeout(Duration::from_millis(150)).unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(
            took >= Duration::from_millis(150) && took < Duration::from_secs(5),
            "{took:?}"
        );
        assert!(worker.try_recv_in_place().unwrap().is_none());
        waited_tx.send(()).unwrap();
        sent_rx.recv().unwrap();
        // The request sent meanwhile is the next one taken, whichever call.
        let request = worker.try_recv().unwrap().expect("a request was sent");
        assert_eq!(request.sequence, 1);
        worker
            .respond(&ExecuteResponse {
                sequence: 1,
                ..Default::default()
            })
            .unwrap();
    });
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    waited_rx.recv().unwrap();
    coordinator.send(&request(1)).unwrap();
    sent_tx.send(()).unwrap();
    assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 1);
    worker.join().unwrap();
}

#[test]
fn a_send_that_times_out_sends_nothing_and_the_next_send_goes_through() {
    let _dog = Watchdog::new("send_timeout", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("pct-send"))
        .workers(1)
        .timeout(Duration::from_secs(30));
    let coordinator = channel.create().unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        let mut worker = channel.join(0).unwrap();
        go_rx.recv().unwrap();
        for sequence in [1, 2] {
            let request = worker.recv().unwrap();
            assert_eq!(
                request.sequence, sequence,
                "the timed-out send left a request"
            );
            worker
                .respond(&ExecuteResponse {
                    sequence,
                    ..Default::default()
                })
                .unwrap();
        }
    });
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    coordinator.send(&request(1)).unwrap();
    // Depth 1, the worker not reading yet: no frame free.
    let err = coordinator
        .send_timeout(&request(99), Duration::from_millis(150))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    go_tx.send(()).unwrap();
    assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 1);
    assert_eq!(coordinator.send(&request(2)).unwrap(), 1);
    assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 2);
    worker.join().unwrap();
}
