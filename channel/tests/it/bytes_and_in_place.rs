//! Frames of any encoding on a `Raw` channel: `send(&[u8])`, requests read
//! in place in the read-only ring, `respond(&[u8])`, and the gathers that
//! hand back slices of the coordinator's own buffers.

use std::thread;
use std::time::{Duration, Instant};

use nodeipc_channel::{All, Channel, Error, First, Raw, Worker};
use nodeipc_testkit::{Watchdog, unique_name};

fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn payload(round: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 31 + round) as u8).collect()
}

#[test]
fn raw_frames_round_trip_read_in_place_and_answered_with_digests() {
    let _dog = Watchdog::new("bytes_round_trip", Duration::from_secs(60));
    let coordinator = Channel::anonymous(unique_name("bytes"))
        .workers(2)
        .request_capacity(256 << 10)
        .depth(2)
        .timeout(Duration::from_secs(10))
        .raw()
        .create()
        .unwrap();
    let rounds = 50u64;
    let handles: Vec<_> = (0..2u32)
        .map(|rank| {
            let request = coordinator.request_fd_read_only().unwrap();
            let response = coordinator.response_fd().try_clone_to_owned().unwrap();
            let name = coordinator.config().name.clone();
            thread::spawn(move || {
                let mut worker = Worker::<Raw, Raw>::from_fds(
                    &name,
                    rank,
                    request,
                    response,
                    Duration::from_secs(10),
                )
                .unwrap();
                for round in 0..rounds {
                    let request = worker.recv_in_place().unwrap();
                    assert_eq!(request.index(), round);
                    let mut answer = digest(request.bytes()).to_le_bytes().to_vec();
                    answer.push(rank as u8);
                    request.respond(&answer).unwrap();
                }
            })
        })
        .collect();
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    for round in 0..rounds {
        let len = [0, 1, 64, 4096, 200 << 10][round as usize % 5];
        let sent = payload(round, len);
        assert_eq!(coordinator.send(&sent).unwrap(), round);
        let gathered = coordinator.recv(All).unwrap();
        assert_eq!(gathered.len(), 2);
        for (rank, answer) in gathered.iter() {
            assert_eq!(answer.len(), 9, "rank {rank}");
            assert_eq!(
                &answer[..8],
                digest(&sent).to_le_bytes(),
                "rank {rank} read another request"
            );
            assert_eq!(answer[8], rank as u8);
        }
    }
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn raw_recv_into_and_the_first_gather_as_bytes() {
    let _dog = Watchdog::new("raw recv_into", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("bytes-first"))
        .workers(2)
        .timeout(Duration::from_secs(10))
        .raw();
    let coordinator = channel.create().unwrap();
    let handles: Vec<_> = (0..2u32)
        .map(|rank| {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut worker = channel.join(rank).unwrap();
                let mut into = Vec::new();
                worker.recv_into(&mut into).unwrap();
                assert_eq!(into, b"hello");
                if rank == 1 {
                    thread::sleep(Duration::from_millis(200));
                }
                worker.respond(&[rank as u8; 3]).unwrap();
            })
        })
        .collect();
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    coordinator.send(b"hello").unwrap();
    let first = coordinator.recv(First).unwrap();
    assert_eq!(first.rank(), 0, "rank 1 answers 200 ms later");
    assert_eq!(first.bytes(), [0, 0, 0]);
    drop(first);
    assert_eq!(coordinator.drain().unwrap(), 1);
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_guard_held_past_the_timeout_makes_send_time_out_naming_the_rank_and_nothing_breaks() {
    let _dog = Watchdog::new("guard_held", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("held"))
        .workers(2)
        .timeout(Duration::from_secs(10))
        .raw();
    let coordinator = channel.create().unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    // Worker 0 answers every request at once; worker 1 holds its first
    // request in place until told to let go.
    let quick = {
        let channel = channel.clone();
        thread::spawn(move || {
            let mut worker = channel.join(0).unwrap();
            for _ in 0..2 {
                let request = worker.recv_in_place().unwrap();
                let len = request.bytes().len() as u8;
                request.respond(&[len]).unwrap();
            }
        })
    };
    let slow = {
        let channel = channel.clone();
        thread::spawn(move || {
            let mut worker = channel.join(1).unwrap();
            let request = worker.recv_in_place().unwrap();
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let len = request.bytes().len() as u8;
            request.respond(&[len]).unwrap();
            let request = worker.recv_in_place().unwrap();
            let len = request.bytes().len() as u8;
            request.respond(&[len]).unwrap();
        })
    };
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    coordinator.send(b"first").unwrap();
    held_rx.recv().unwrap();
    // Depth 1: the next send needs the frame worker 1 holds.
    let started = Instant::now();
    let err = coordinator
        .send_timeout(b"second", Duration::from_millis(300))
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("worker 1"), "{err}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // Gathering the first request still works; then worker 1 lets go and
    // the same send goes through: the timeout broke nothing.
    go_tx.send(()).unwrap();
    let gathered = coordinator.recv(All).unwrap();
    assert_eq!(gathered.get(0), Some(&[5u8][..]));
    assert_eq!(gathered.get(1), Some(&[5u8][..]));
    drop(gathered);
    assert_eq!(coordinator.send(b"second").unwrap(), 1);
    let gathered = coordinator.recv(All).unwrap();
    assert!(gathered.iter().all(|(_, b)| b == [6]));
    drop(gathered);
    quick.join().unwrap();
    slow.join().unwrap();
}
