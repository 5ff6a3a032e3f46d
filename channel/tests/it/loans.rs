//! Payloads built where they travel: a request written in its frame
//! (`Coordinator::loan`, `send_with`), an answer written in its slot
//! (`Worker::respond_with`, `InPlace::respond_with`); a loan not committed
//! sends nothing and gives the frame back.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread;
use std::time::Duration;

use nodeipc_channel::{All, Channel, Coordinator, Error, Raw, Worker};
use nodeipc_testkit::{Watchdog, unique_name};

fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn pattern(round: u64, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = (i as u64 * 131 + round * 7) as u8;
    }
}

/// A raw channel of `workers` thread workers and `depth` frames, and the
/// builder to join it.
fn channel(
    tag: &str,
    workers: u32,
    depth: u32,
) -> (
    Coordinator<Raw, Raw>,
    nodeipc_channel::ChannelBuilder<Raw, Raw>,
) {
    let builder = Channel::builder(unique_name(tag))
        .workers(workers)
        .depth(depth)
        .request_capacity(2 << 20)
        .response_slot_size(2 << 20)
        .timeout(Duration::from_secs(20))
        .raw();
    (builder.create().unwrap(), builder)
}

#[test]
fn requests_built_in_their_frame_and_answers_in_their_slot_round_trip() {
    let _dog = Watchdog::new("loan round trip", Duration::from_secs(120));
    let (coordinator, builder) = channel("loan-trip", 2, 2);
    let rounds = 24u64;
    let sizes = [0usize, 1, 4096, 1 << 20];
    let handles: Vec<_> = (0..2u32)
        .map(|rank| {
            let builder = builder.clone();
            thread::spawn(move || {
                let mut worker: Worker<Raw, Raw> = builder.join(rank).unwrap();
                for round in 0..rounds {
                    let len = sizes[round as usize % sizes.len()];
                    if round % 2 == 0 {
                        // Read in place, answer in the slot with the
                        // request still readable.
                        let request = worker.recv_in_place().unwrap();
                        assert_eq!(request.index(), round);
                        request
                            .respond_with(len + 9, |request, out| {
                                out[..8].copy_from_slice(&digest(request).to_le_bytes());
                                out[8] = rank as u8;
                                pattern(round, &mut out[9..]);
                            })
                            .unwrap();
                    } else {
                        let mut request = Vec::new();
                        worker.recv_into(&mut request).unwrap();
                        worker
                            .respond_with(len + 9, |out| {
                                out[..8].copy_from_slice(&digest(&request).to_le_bytes());
                                out[8] = rank as u8;
                                pattern(round, &mut out[9..]);
                            })
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    for round in 0..rounds {
        let len = sizes[round as usize % sizes.len()];
        let mut sent = vec![0; len];
        pattern(round, &mut sent);
        let index = if round % 3 == 0 {
            coordinator
                .send_with(len, |out| pattern(round, out))
                .unwrap()
        } else {
            let mut loan = coordinator.loan(len).unwrap();
            assert_eq!((loan.len(), loan.index()), (len, round));
            pattern(round, loan.bytes_mut());
            loan.commit().unwrap()
        };
        assert_eq!(index, round);
        let gathered = coordinator.recv(All).unwrap();
        let mut expected = vec![0; len];
        pattern(round, &mut expected);
        for (rank, answer) in gathered.iter() {
            assert_eq!(answer.len(), len + 9, "rank {rank}, round {round}");
            assert_eq!(
                &answer[..8],
                digest(&sent).to_le_bytes(),
                "rank {rank} read another request in round {round}"
            );
            assert_eq!(answer[8], rank as u8);
            assert!(
                answer[9..] == expected,
                "rank {rank}'s answer in round {round}"
            );
        }
    }
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_loan_dropped_or_failed_sends_nothing_and_gives_the_frame_back() {
    let _dog = Watchdog::new("loan dropped", Duration::from_secs(60));
    // One frame: a frame not given back would make the next loan wait.
    let (coordinator, builder) = channel("loan-drop", 1, 1);
    let mut worker: Worker<Raw, Raw> = builder.join(0).unwrap();
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();

    let mut loan = coordinator.try_loan(3).unwrap().expect("a free frame");
    loan.bytes_mut().copy_from_slice(b"bad");
    drop(loan);
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        coordinator.send_with(3, |out| {
            out.copy_from_slice(b"bad");
            panic!("the payload could not be built");
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(worker.try_recv().unwrap(), None, "nothing was announced");

    // The frame is free at once, and the index was not used.
    let mut loan = coordinator
        .try_loan(4)
        .unwrap()
        .expect("the frame came back");
    assert_eq!(loan.index(), 0);
    loan.bytes_mut().copy_from_slice(b"good");
    assert_eq!(loan.commit().unwrap(), 0);
    assert_eq!(worker.try_recv().unwrap().as_deref(), Some(&b"good"[..]));

    // A panic in the worker's fill announces nothing and keeps the slot.
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        worker.respond_with(3, |_| panic!("the answer could not be built"))
    }));
    assert!(panicked.is_err());
    assert!(
        coordinator.try_recv(All).unwrap().is_none(),
        "no answer was announced"
    );
    worker
        .respond_with(2, |out| out.copy_from_slice(b"ok"))
        .unwrap();
    let gathered = coordinator.recv(All).unwrap();
    assert_eq!(gathered.get(0), Some(&b"ok"[..]));
}

#[test]
fn a_loan_holds_the_senders_turn_and_is_bounded_like_a_send() {
    let _dog = Watchdog::new("loan turn", Duration::from_secs(60));
    let (coordinator, builder) = channel("loan-turn", 1, 1);
    let mut worker: Worker<Raw, Raw> = builder.join(0).unwrap();
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();

    // Larger than a frame: refused before anything is taken.
    match coordinator.loan(2 << 20) {
        Err(Error::TooLarge { slot, max, .. }) => {
            assert_eq!((slot, max), ("request frame", 2 << 20));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }

    let loan = coordinator.loan(1).unwrap();
    // While it is open, another send is refused (the loan is the sender).
    match coordinator.try_send(b"x") {
        Err(Error::Busy { op, busy, .. }) => assert_eq!((op, busy), ("try_send", "sending")),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(matches!(coordinator.try_loan(1), Err(Error::Busy { .. })));
    loan.commit().unwrap();

    // The worker holds the one frame: no loan until it lets go.
    let held = worker.recv_in_place().unwrap();
    assert!(coordinator.try_loan(1).unwrap().is_none());
    match coordinator.loan_timeout(1, Duration::from_millis(100)) {
        Err(Error::Timeout { op, .. }) => assert!(op.contains("worker 0"), "{op}"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    held.respond(b"done").unwrap();
    coordinator.recv(All).unwrap();
    let index = coordinator
        .send_with(2, |out| out.copy_from_slice(b"go"))
        .unwrap();
    assert_eq!(index, 1);
    assert_eq!(worker.recv().unwrap(), b"go");
}
