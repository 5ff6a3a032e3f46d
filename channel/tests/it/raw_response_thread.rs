//! A `Raw` coordinator's response thread, the one the C ABI and the C++
//! classes wrap: each request gathered in the mode recorded at its send,
//! replies in send order, `First`'s leftovers drained on the thread, only a
//! non-blocking send inside the handler, a dead worker reported by rank.

use std::ops::ControlFlow;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nodeipc_channel::{
    Answers, Channel, Coordinator, Error, GatherAhead, Gathered, Mode, Raw, Reply,
};
use nodeipc_testkit::{Watchdog, spawn_child, this_test_in_a_child, unique_name};

const LONG: Duration = Duration::from_secs(20);

/// What a reply said, owned: `(id, mode, [(rank, bytes)])` or the error
/// (its text, after the rank it names if any).
type Heard = (u64, Mode, Result<Vec<(u32, Vec<u8>)>, String>);

fn owned(reply: Reply<'_>) -> Heard {
    let answers = reply
        .answers
        .map_err(|e| format!("{:?}: {e}", e.rank()))
        .map(|a| match a {
            Answers::All(all) => all.iter().map(|(r, b)| (r, b.to_vec())).collect(),
            Answers::One(one) => vec![(one.rank(), one.bytes().to_vec())],
        });
    (reply.id, reply.mode, answers)
}

/// Worker threads answering each request with `[request[0], rank]`, worker
/// `slow` (if any) after `delay`.
fn workers(
    channel: &nodeipc_channel::ChannelBuilder<Raw, Raw>,
    count: u32,
    slow: Option<(u32, Duration)>,
) -> Vec<JoinHandle<()>> {
    (0..count)
        .map(|rank| {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut worker = channel.join(rank).unwrap();
                loop {
                    let request = match worker.recv() {
                        Ok(request) => request,
                        Err(Error::Closed { .. }) => return,
                        Err(e) => panic!("worker {rank}: {e}"),
                    };
                    if let Some((r, delay)) = slow
                        && r == rank
                    {
                        thread::sleep(delay);
                    }
                    match worker.respond(&[request[0], rank as u8]) {
                        Ok(()) => {}
                        // Closed with answers still owed: done.
                        Err(Error::Closed { .. }) => return,
                        Err(e) => panic!("worker {rank}: {e}"),
                    }
                }
            })
        })
        .collect()
}

/// A raw channel of `count` worker threads (see [`workers`]) at `depth`,
/// every worker joined.
fn running(
    tag: &str,
    count: u32,
    depth: u32,
    slow: Option<(u32, Duration)>,
) -> (Coordinator<Raw, Raw>, Vec<JoinHandle<()>>) {
    let channel = Channel::builder(unique_name(tag))
        .workers(count)
        .depth(depth)
        .timeout(LONG)
        .raw();
    let coordinator = channel.create().unwrap();
    let threads = workers(&channel, count, slow);
    coordinator.wait_for_workers(LONG).unwrap();
    (coordinator, threads)
}

/// Closes the channel, then waits for its worker threads to end.
fn close(coordinator: Coordinator<Raw, Raw>, threads: Vec<JoinHandle<()>>) {
    drop(coordinator);
    threads.into_iter().for_each(|t| t.join().unwrap());
}

/// Registers a handler that passes every reply on, owned, and goes on.
fn forward_replies(coordinator: &mut Coordinator<Raw, Raw>) -> Receiver<Heard> {
    let (tx, rx) = heard_channel();
    coordinator
        .on_response(move |reply: Reply<'_>| {
            tx.send(owned(reply)).unwrap();
            ControlFlow::Continue(())
        })
        .unwrap();
    rx
}

fn heard_channel() -> (Sender<Heard>, Receiver<Heard>) {
    mpsc::channel()
}

#[test]
fn each_request_is_gathered_in_the_mode_it_was_sent_with_in_send_order() {
    let _dog = Watchdog::new("raw thread modes", Duration::from_secs(60));
    let (mut coordinator, threads) = running(
        "raw-thread-modes",
        3,
        4,
        Some((2, Duration::from_millis(30))),
    );
    // The rule picks the highest rank.
    coordinator.set_aggregate(|all: &Gathered<'_>| Ok(all.len() as u32 - 1));
    let rx = forward_replies(&mut coordinator);
    coordinator.start_response_thread().unwrap();
    let modes = [
        Mode::All,
        Mode::First,
        Mode::Aggregated,
        Mode::Rank0AfterAll,
        Mode::First,
        Mode::All,
    ];
    for (i, mode) in modes.iter().enumerate() {
        coordinator.set_response_mode(*mode);
        assert_eq!(coordinator.send(&[i as u8]).unwrap(), i as u64);
    }
    for (i, mode) in modes.iter().enumerate() {
        let (id, heard_mode, answers) = rx.recv_timeout(LONG).unwrap();
        assert_eq!((id, heard_mode), (i as u64, *mode));
        let answers = answers.unwrap();
        let b = i as u8;
        match mode {
            Mode::All => assert_eq!(
                answers,
                vec![(0, vec![b, 0]), (1, vec![b, 1]), (2, vec![b, 2])]
            ),
            Mode::Aggregated => assert_eq!(answers, vec![(2, vec![b, 2])]),
            Mode::Rank0AfterAll => assert_eq!(answers, vec![(0, vec![b, 0])]),
            // Worker 2 is slow: the first answer is another's.
            Mode::First => {
                assert_eq!(answers.len(), 1);
                let (rank, bytes) = &answers[0];
                assert_eq!(bytes, &vec![b, *rank as u8]);
            }
            Mode::Init => unreachable!(),
        }
    }
    // A gather or a drain of the caller's is refused by name meanwhile.
    match coordinator.try_recv(Mode::All) {
        Err(Error::ResponseThread { reason, .. }) => {
            assert!(reason.contains("response thread is running"), "{reason}")
        }
        other => panic!("{:?}", other.map(|o| o.is_some())),
    }
    assert!(matches!(
        coordinator.drain(),
        Err(Error::ResponseThread { .. })
    ));
    coordinator.stop_response_thread().unwrap();
    // Every leftover of the First requests was drained on the thread.
    assert_eq!(coordinator.try_drain().unwrap(), Some(0));
    close(coordinator, threads);
}

/// What worker threads from [`workers`] answer request `i` in `mode`, the
/// rule picking the highest of `count` ranks; `None` for a First request,
/// whose answer may be any worker's.
fn expected(i: usize, mode: Mode, count: u32) -> Option<Vec<(u32, Vec<u8>)>> {
    let b = i as u8;
    match mode {
        Mode::All => Some((0..count).map(|r| (r, vec![b, r as u8])).collect()),
        Mode::Aggregated => Some(vec![(count - 1, vec![b, (count - 1) as u8])]),
        Mode::Rank0AfterAll => Some(vec![(0, vec![b, 0])]),
        Mode::First | Mode::Init => None,
    }
}

fn check_heard(i: usize, mode: Mode, count: u32, heard: Heard) {
    let (id, heard_mode, answers) = heard;
    assert_eq!((id, heard_mode), (i as u64, mode), "request {i}");
    let answers = answers.unwrap_or_else(|e| panic!("request {i}: {e}"));
    match expected(i, mode, count) {
        Some(expected) => assert_eq!(answers, expected, "request {i} in {mode:?}"),
        None => {
            let [(rank, bytes)] = answers.as_slice() else {
                panic!("request {i}: {answers:?}")
            };
            assert_eq!(bytes, &vec![i as u8, *rank as u8], "request {i}");
        }
    }
}

#[test]
fn with_sends_gathering_ahead_or_not_every_reply_comes_in_send_order_in_its_mode() {
    let _dog = Watchdog::new("raw thread gather ahead", Duration::from_secs(120));
    let modes = [
        Mode::All,
        Mode::Aggregated,
        Mode::Rank0AfterAll,
        Mode::All,
        Mode::First,
    ];
    for when in [
        GatherAhead::Always,
        GatherAhead::Never,
        GatherAhead::WhenCrowded,
    ] {
        let (mut coordinator, threads) = running("raw-thread-ahead", 2, 2, None);
        coordinator.set_aggregate(|all: &Gathered<'_>| Ok(all.len() as u32 - 1));
        coordinator.set_gather_ahead(when);
        let rx = forward_replies(&mut coordinator);
        coordinator.start_response_thread().unwrap();
        let requests = 600;
        for i in 0..requests {
            coordinator.set_response_mode(modes[i % modes.len()]);
            assert_eq!(coordinator.send(&[i as u8]).unwrap(), i as u64);
        }
        for i in 0..requests {
            check_heard(i, modes[i % modes.len()], 2, rx.recv_timeout(LONG).unwrap());
        }
        coordinator.stop_response_thread().unwrap();
        assert_eq!(coordinator.try_drain().unwrap(), Some(0), "{when:?}");
        close(coordinator, threads);
    }
}

#[test]
fn requests_left_when_the_handler_ends_the_thread_are_the_next_gathers() {
    let _dog = Watchdog::new("raw thread ahead then recv", Duration::from_secs(60));
    let (mut coordinator, threads) = running("raw-thread-ahead-left", 2, 8, None);
    coordinator.set_aggregate(|all: &Gathered<'_>| Ok(all.len() as u32 - 1));
    coordinator.set_gather_ahead(GatherAhead::Always);
    let (requests, last_handled) = (60usize, 49u64);
    // The handler ends the thread at request 49; the ten after it are sent
    // by then or fit the ring and the slots (2 x depth) without a gather.
    let (tx, rx) = heard_channel();
    coordinator
        .on_response(move |reply: Reply<'_>| {
            let id = reply.id;
            tx.send(owned(reply)).unwrap();
            if id == last_handled {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    coordinator.start_response_thread().unwrap();
    let mode_of = |i: usize| [Mode::All, Mode::Aggregated][i % 2];
    for i in 0..requests {
        coordinator.set_response_mode(mode_of(i));
        assert_eq!(coordinator.send(&[i as u8]).unwrap(), i as u64);
    }
    for i in 0..=last_handled as usize {
        check_heard(i, mode_of(i), 2, rx.recv_timeout(LONG).unwrap());
    }
    coordinator.stop_response_thread().unwrap();
    // Whether the sender had queued them or they wait in the slots, the
    // rest come out in send order, in the mode each gather asks for.
    for i in last_handled as usize + 1..requests {
        let answers: Vec<(u32, Vec<u8>)> = match coordinator.recv(Mode::All).unwrap() {
            Answers::All(all) => all.iter().map(|(r, b)| (r, b.to_vec())).collect(),
            Answers::One(_) => panic!("an All gather gives every answer"),
        };
        assert_eq!(answers, expected(i, Mode::All, 2).unwrap(), "request {i}");
    }
    assert!(matches!(
        coordinator.try_recv(Mode::All),
        Err(Error::NothingOutstanding { .. })
    ));
    close(coordinator, threads);
}

#[test]
fn aggregated_without_a_rule_is_that_requests_error_and_the_channel_stays_in_step() {
    let _dog = Watchdog::new("raw thread no rule", Duration::from_secs(60));
    let (mut coordinator, threads) = running("raw-thread-norule", 2, 1, None);
    let rx = forward_replies(&mut coordinator);
    assert_eq!(coordinator.response_mode(), Mode::Aggregated);
    coordinator.start_response_thread().unwrap();
    coordinator.send(&[7]).unwrap();
    coordinator.set_response_mode(Mode::Rank0AfterAll);
    coordinator.send(&[8]).unwrap();
    let (id, _, first) = rx.recv_timeout(LONG).unwrap();
    assert_eq!(id, 0);
    assert!(first.unwrap_err().contains("no aggregation rule"));
    let (id, _, second) = rx.recv_timeout(LONG).unwrap();
    assert_eq!((id, second.unwrap()), (1, vec![(0, vec![8, 0])]));
    close(coordinator, threads);
}

#[test]
fn inside_the_handler_only_try_send_is_allowed() {
    let _dog = Watchdog::new("raw thread handler sends", Duration::from_secs(60));
    let (mut coordinator, threads) = running("raw-thread-inside", 1, 2, None);
    coordinator.set_response_mode(Mode::All);
    let this: Arc<OnceLock<Weak<Coordinator<Raw, Raw>>>> = Arc::new(OnceLock::new());
    let seen = Arc::clone(&this);
    let (tx, rx) = mpsc::channel::<(u64, String)>();
    coordinator
        .on_response(move |reply: Reply<'_>| {
            let coordinator = seen.get().and_then(Weak::upgrade).unwrap();
            let said = if reply.id == 0 {
                let blocking = match coordinator.send(&[1]) {
                    Err(Error::ResponseThread { reason, .. }) => reason.to_owned(),
                    other => format!("not refused: {other:?}"),
                };
                let tried = coordinator.try_send(&[2]).map(|s| format!("{s:?}"));
                format!("{blocking} | {tried:?}")
            } else {
                format!("{:?}", reply.answers.map(|a| matches!(a, Answers::All(_))))
            };
            tx.send((reply.id, said)).unwrap();
            ControlFlow::Continue(())
        })
        .unwrap();
    coordinator.start_response_thread().unwrap();
    let coordinator = Arc::new(coordinator);
    this.set(Arc::downgrade(&coordinator)).unwrap();
    coordinator.send(&[0]).unwrap();
    let (id, said) = rx.recv_timeout(LONG).unwrap();
    assert_eq!(id, 0);
    assert_eq!(
        said,
        "inside a response handler a send may not wait: only try_send is allowed | Ok(\"Some(1)\")"
    );
    // The request the handler sent is answered like any other.
    assert_eq!(rx.recv_timeout(LONG).unwrap(), (1, "Ok(true)".to_owned()));
    // The handler's strong reference ends with its call.
    let mut coordinator = coordinator;
    let mut coordinator = loop {
        match Arc::try_unwrap(coordinator) {
            Ok(alone) => break alone,
            Err(shared) => coordinator = shared,
        }
        thread::sleep(Duration::from_millis(1));
    };
    coordinator.stop_response_thread().unwrap();
    close(coordinator, threads);
}

#[test]
fn a_send_waits_on_a_full_ring_only_never_on_the_handler() {
    let _dog = Watchdog::new(
        "raw thread send never waits on handler",
        Duration::from_secs(60),
    );
    let (mut coordinator, threads) = running("raw-thread-pipeline", 1, 4, None);
    coordinator.set_response_mode(Mode::First);
    // The handler is held until the test lets it go: meanwhile the sender
    // runs ahead as far as the ring and the slot let it, and no further.
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let handler_gate = Arc::clone(&gate);
    let (tx, rx) = mpsc::channel::<u64>();
    coordinator
        .on_response(move |reply: Reply<'_>| {
            drop(handler_gate.lock().unwrap());
            tx.send(reply.id).unwrap();
            ControlFlow::Continue(())
        })
        .unwrap();
    coordinator.start_response_thread().unwrap();
    // Sends go out until the ring stays full (a send times out).
    let sent = send_until_full(&coordinator, 64);
    // At least the ring's depth went out while the handler was held.
    assert!(sent >= 4, "{sent}");
    assert_eq!(coordinator.try_send(&[0]).unwrap(), None);
    drop(held);
    for id in 0..sent {
        assert_eq!(rx.recv_timeout(LONG).unwrap(), id);
    }
    coordinator.stop_response_thread().unwrap();
    close(coordinator, threads);
}

/// Sends request `i` as the byte `i` until one waits 200 ms for a frame
/// (the ring stays full); returns how many went out, fewer than `most`.
fn send_until_full(coordinator: &Coordinator<Raw, Raw>, most: u64) -> u64 {
    let mut sent = 0u64;
    loop {
        match coordinator.send_timeout(&[sent as u8], Duration::from_millis(200)) {
            Ok(id) => assert_eq!(id, sent),
            Err(Error::Timeout { .. }) => return sent,
            Err(e) => panic!("{e}"),
        }
        sent += 1;
        assert!(sent < most, "the ring never filled");
    }
}

#[test]
fn sends_while_the_handler_is_held_stop_at_a_bound_and_replies_follow_in_order() {
    let _dog = Watchdog::new("raw thread held handler", Duration::from_secs(60));
    let depth = 2;
    let (mut coordinator, threads) = running("raw-thread-ahead-held", 1, depth, None);
    coordinator.set_response_mode(Mode::All);
    coordinator.set_gather_ahead(GatherAhead::Always);
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let handler_gate = Arc::clone(&gate);
    let (tx, rx) = mpsc::channel::<(u64, Vec<u8>)>();
    coordinator
        .on_response(move |reply: Reply<'_>| {
            drop(handler_gate.lock().unwrap());
            let answer = match reply.answers {
                Ok(Answers::All(all)) => all.iter().map(|(_, bytes)| bytes[0]).collect(),
                other => panic!("request {}: {:?}", reply.id, other.err()),
            };
            tx.send((reply.id, answer)).unwrap();
            ControlFlow::Continue(())
        })
        .unwrap();
    coordinator.start_response_thread().unwrap();
    // With the handler held on the first request, sends go out until the
    // ring stays full: as far as the frames and the answer slots hold when
    // the thread took that request from the slots (it holds them while its
    // handler runs), and further, up to the queue's 64 requests, when a
    // send had gathered it ahead (its answers are then the queue's).
    let sent = send_until_full(&coordinator, 1000);
    let frames_and_slots = u64::from(3 * depth);
    assert!(
        (u64::from(depth)..=frames_and_slots + 64 + 1).contains(&sent),
        "{sent} went out"
    );
    drop(held);
    for id in 0..sent {
        assert_eq!(rx.recv_timeout(LONG).unwrap(), (id, vec![id as u8]));
    }
    coordinator.stop_response_thread().unwrap();
    close(coordinator, threads);
}

const DEAD_CHILD: &str = "NODEIPC_TEST_RAW_THREAD_DEAD_WORKER";

#[test]
fn a_dead_worker_reaches_the_handler_by_rank_within_a_second() {
    if let Ok(name) = std::env::var(DEAD_CHILD) {
        // The child: worker 1, which takes a request and dies without an
        // answer (no destructor runs: it does not leave, it dies).
        let channel = Channel::builder(&name).workers(2).timeout(LONG).raw();
        let mut worker = channel.join(1).unwrap();
        let _request = worker.recv().unwrap();
        std::process::exit(0);
    }
    let _dog = Watchdog::new("raw thread dead worker", Duration::from_secs(60));
    let name = unique_name("raw-thread-dead");
    let channel = Channel::builder(&name).workers(2).timeout(LONG).raw();
    let mut coordinator = channel.create().unwrap();
    let threads = workers(&channel, 1, None);
    let mut child = spawn_child(
        this_test_in_a_child(&nodeipc_testkit::test_path(
            module_path!(),
            "a_dead_worker_reaches_the_handler_by_rank_within_a_second",
        ))
        .env(DEAD_CHILD, &name),
    );
    coordinator.wait_for_workers(LONG).unwrap();
    let rx = forward_replies(&mut coordinator);
    coordinator.set_response_mode(Mode::All);
    coordinator.start_response_thread().unwrap();
    coordinator.send(&[5]).unwrap();
    let status = child.wait_timeout(LONG);
    let died = Instant::now();
    assert!(status.success(), "{status}");
    let (id, mode, answers) = rx.recv_timeout(LONG).unwrap();
    let late = died.elapsed();
    assert_eq!((id, mode), (0, Mode::All));
    let error = answers.unwrap_err();
    assert!(error.starts_with("Some(1): "), "{error}");
    assert!(error.contains("worker 1"), "{error}");
    assert!(
        late <= Duration::from_secs(1),
        "heard after {late:?}: {error}"
    );
    // StopOnError: the thread ended by itself.
    let deadline = Instant::now() + LONG;
    while coordinator.response_thread_running() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(!coordinator.response_thread_running());
    close(coordinator, threads);
}

#[test]
fn a_handler_is_replaced_only_while_no_thread_runs() {
    let _dog = Watchdog::new("raw thread handler replaced", Duration::from_secs(60));
    let (mut coordinator, threads) = running("raw-thread-replace", 1, 1, None);
    assert!(coordinator.remove_response_handler().unwrap().is_none());
    coordinator
        .on_response(|_: Reply<'_>| ControlFlow::Continue(()))
        .unwrap();
    assert!(matches!(
        coordinator.on_response(|_: Reply<'_>| ControlFlow::Continue(())),
        Err(Error::ResponseThread { .. })
    ));
    assert!(coordinator.remove_response_handler().unwrap().is_some());
    let rx = forward_replies(&mut coordinator);
    coordinator.set_response_mode(Mode::All);
    coordinator.start_response_thread().unwrap();
    match coordinator.remove_response_handler() {
        Err(Error::ResponseThread { reason, .. }) => {
            assert!(reason.contains("stop it"), "{reason}")
        }
        other => panic!("{:?}", other.map(|h| h.is_some())),
    }
    coordinator.send(&[3]).unwrap();
    assert_eq!(
        rx.recv_timeout(LONG).unwrap(),
        (0, Mode::All, Ok(vec![(0, vec![3, 0])]))
    );
    close(coordinator, threads);
}

#[test]
fn a_try_send_inside_the_handler_is_refused_while_another_thread_sends() {
    let _dog = Watchdog::new("raw thread two senders", Duration::from_secs(60));
    let (mut coordinator, threads) = running("raw-thread-busy", 1, 2, None);
    coordinator.set_response_mode(Mode::All);
    // The ring must fill while the handler is held: a send that gathered
    // ahead would free frames (and go on) without the thread.
    coordinator.set_gather_ahead(GatherAhead::Never);
    let this: Arc<OnceLock<Weak<Coordinator<Raw, Raw>>>> = Arc::new(OnceLock::new());
    let seen = Arc::clone(&this);
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let handler_gate = Arc::clone(&gate);
    let (tx, rx) = mpsc::channel::<String>();
    coordinator
        .on_response(move |reply: Reply<'_>| {
            if reply.id == 0 {
                drop(handler_gate.lock().unwrap());
                let coordinator = seen.get().and_then(Weak::upgrade).unwrap();
                // The other sender waits on the full ring with the sending
                // turn; until it is there, a try finds the ring full.
                let deadline = Instant::now() + LONG;
                let said = loop {
                    match coordinator.try_send(&[9]) {
                        Err(Error::Busy { busy, .. }) => break busy.to_owned(),
                        Ok(None) if Instant::now() < deadline => {
                            thread::sleep(Duration::from_millis(1))
                        }
                        other => break format!("{other:?}"),
                    }
                };
                tx.send(said).unwrap();
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    coordinator.start_response_thread().unwrap();
    let coordinator = Arc::new(coordinator);
    this.set(Arc::downgrade(&coordinator)).unwrap();
    // Fill the ring while the handler is held on request 0.
    let mut sent = 0u64;
    while coordinator
        .send_timeout(&[sent as u8], Duration::from_millis(200))
        .is_ok()
    {
        sent += 1;
        assert!(sent < 64, "the ring never filled");
    }
    let sender = {
        let coordinator = Arc::clone(&coordinator);
        thread::spawn(move || coordinator.send_timeout(&[8], LONG).map(|_| ()))
    };
    drop(held);
    assert_eq!(rx.recv_timeout(LONG).unwrap(), "sending");
    // The other sender's request goes out once the thread gathers.
    sender.join().unwrap().unwrap();
    let mut coordinator = coordinator;
    let mut coordinator = loop {
        match Arc::try_unwrap(coordinator) {
            Ok(alone) => break alone,
            Err(shared) => coordinator = shared,
        }
        thread::sleep(Duration::from_millis(1));
    };
    coordinator.stop_response_thread().unwrap();
    close(coordinator, threads);
}
