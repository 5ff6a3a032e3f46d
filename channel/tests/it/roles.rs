//! One coordinator, several threads: one sending and one gathering thread
//! at once work; a second sender or a second gatherer is refused by name,
//! and nothing is sent or taken for it.

use std::thread;
use std::time::Duration;

use nodeipc_channel::{All, Channel, Coordinator, Error, First, Raw, Worker};
use nodeipc_testkit::{Watchdog, unique_name};

fn channel(tag: &str) -> (Coordinator<Raw, Raw>, Worker<Raw, Raw>) {
    let timeout = Duration::from_secs(20);
    let name = unique_name(tag);
    let coordinator = Channel::anonymous(&name)
        .workers(1)
        .timeout(timeout)
        .raw()
        .create()
        .unwrap();
    let worker = Worker::from_fds(
        &name,
        0,
        coordinator.request_fd_read_only().unwrap(),
        coordinator.response_fd().try_clone_to_owned().unwrap(),
        timeout,
    )
    .unwrap();
    coordinator.wait_for_workers(timeout).unwrap();
    (coordinator, worker)
}

#[test]
fn a_sending_thread_and_a_gathering_thread_share_a_coordinator() {
    let _dog = Watchdog::new("send and gather threads", Duration::from_secs(60));
    let (coordinator, mut worker) = channel("roles-pair");
    const ROUNDS: u64 = 200;
    thread::scope(|s| {
        s.spawn(|| {
            for i in 0..ROUNDS {
                let request = worker.recv_in_place().unwrap();
                let answer = request.bytes().to_vec();
                request.respond(&answer).unwrap();
                assert_eq!(answer, i.to_le_bytes());
            }
        });
        let (sent, answered) = std::sync::mpsc::channel();
        let coordinator = &coordinator;
        s.spawn(move || {
            for i in 0..ROUNDS {
                assert_eq!(coordinator.send(&i.to_le_bytes()).unwrap(), i);
                sent.send(()).unwrap();
            }
        });
        for i in 0..ROUNDS {
            // A gather waits for the request it answers to be sent.
            answered.recv().unwrap();
            let gathered = coordinator.recv(All).unwrap();
            assert_eq!(gathered.get(0).unwrap(), i.to_le_bytes());
        }
    });
}

#[test]
fn regression_a_second_sender_or_gatherer_is_refused_by_name() {
    let _dog = Watchdog::new("second sender or gatherer", Duration::from_secs(60));
    let (coordinator, mut worker) = channel("roles-busy");
    let limit = Duration::from_secs(20);
    coordinator.send(b"zero").unwrap();
    // The worker holds request 0 in place: its frame stays taken (depth 1),
    // so the next send waits, and no answer comes for a gather to take.
    let held = worker.recv_in_place().unwrap();
    thread::scope(|s| {
        let sender = s.spawn(|| coordinator.send_timeout(b"one", limit));
        let gatherer = s.spawn(|| {
            coordinator
                .recv_timeout(All, limit)
                .map(|gathered| gathered.get(0).unwrap().to_vec())
        });
        thread::sleep(Duration::from_millis(200));
        match coordinator.send(b"two") {
            Err(Error::Busy { op, busy, rule, .. }) => {
                assert_eq!((op, busy), ("send", "sending"));
                assert!(
                    rule.contains("one sending and one gathering thread"),
                    "{rule}"
                );
            }
            other => panic!("a second sender was not refused: {other:?}"),
        }
        for refused in [
            coordinator.recv(All).map(|_| ()),
            coordinator.drain().map(|_| ()),
            coordinator.recv(First).map(|_| ()),
        ] {
            match refused {
                Err(
                    e @ Error::Busy {
                        busy: "gathering", ..
                    },
                ) => {
                    assert!(e.to_string().contains("another thread is gathering"), "{e}")
                }
                other => panic!("a second gatherer was not refused: {other:?}"),
            }
        }
        held.respond(b"answer zero").unwrap();
        assert_eq!(sender.join().unwrap().unwrap(), 1);
        assert_eq!(gatherer.join().unwrap().unwrap(), b"answer zero");
    });
    // Nothing was sent or taken for the refused calls.
    let request = worker.recv_in_place().unwrap();
    assert_eq!(request.bytes(), b"one");
    request.respond(b"answer one").unwrap();
    assert_eq!(
        coordinator.recv(All).unwrap().get(0).unwrap(),
        b"answer one"
    );
    assert!(matches!(
        coordinator.recv(All),
        Err(Error::NothingOutstanding { .. })
    ));
}
