//! The channel's call grid: every gather mode in each of its forms
//! (`recv`, `try_recv`, `recv_timeout`), typed and raw, the runtime `Mode`,
//! `drain` and `send` in theirs, and the worker's forms.
//!
//! Workers are threads that answer a request only when the test opens
//! their gate, and say so once the answer is posted: so a `try_recv` is
//! `None` and a `recv_timeout` times out exactly while an answer is held
//! back, and both succeed as soon as it is let through — nothing here
//! depends on how fast a thread runs.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use nodeipc_channel::{
    Aggregated, AggregatedBy, All, Answers, Channel, Coordinator, Error, First, Gathered, Init,
    Mode, Payload, Rank0AfterAll, Raw,
};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardResponse, execute_response,
};
use nodeipc_testkit::{Watchdog, unique_name};

const WORKERS: u32 = 3;
/// Generous: only a broken gather waits this long.
const LONG: Duration = Duration::from_secs(20);
/// How long a gather that must time out is given.
const SHORT: Duration = Duration::from_millis(50);

/// The three forms of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Recv,
    TryRecv,
    RecvTimeout,
}

/// One call in a form: what a test's gather closure is asked to make.
#[derive(Clone, Copy, Debug)]
enum Call {
    Wait,
    Try,
    Within(Duration),
}

/// A channel of `WORKERS` worker threads behind gates.
struct Harness<Req, Resp>
where
    Resp: Payload,
{
    coordinator: Coordinator<Req, Resp>,
    gates: Vec<Sender<()>>,
    acks: Receiver<u32>,
    workers: Vec<JoinHandle<()>>,
    _dog: Watchdog,
}

/// The answer worker `rank` gives a typed request.
fn typed_answer(request: &ExecuteRequest, rank: u32) -> ExecuteResponse {
    ExecuteResponse {
        msg_type: request.execute_type,
        sequence: request.sequence,
        result: Some(execute_response::Result::Forward(ForwardResponse {
            output: vec![rank as u8].into(),
        })),
        ..ExecuteResponse::default()
    }
}

/// The rank a typed answer says it came from.
fn typed_rank(response: &ExecuteResponse) -> u32 {
    match &response.result {
        Some(execute_response::Result::Forward(f)) => u32::from(f.output[0]),
        other => panic!("not an answer of ours: {other:?}"),
    }
}

fn typed_request(sequence: u64, init: bool) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: if init {
            ExecuteType::ModelInit
        } else {
            ExecuteType::Execute
        } as i32,
        sequence,
        ..ExecuteRequest::default()
    }
}

/// A raw request: its kind (1: init) and its sequence.
fn raw_request(sequence: u8, init: bool) -> [u8; 2] {
    [u8::from(init), sequence]
}

/// The answer worker `rank` gives a raw request: its rank, the sequence,
/// and a filler as long as the rank (answers of different lengths).
fn raw_answer(request: &[u8], rank: u32) -> Vec<u8> {
    let mut answer = vec![rank as u8, request[1]];
    answer.extend(std::iter::repeat_n(0xa5, rank as usize));
    answer
}

impl Harness<ExecuteRequest, ExecuteResponse> {
    fn typed(test: &str) -> Self {
        let channel = Channel::builder(unique_name("grid"))
            .workers(WORKERS)
            .timeout(LONG);
        let coordinator = channel.create().unwrap();
        Harness::start(test, coordinator, move |rank, gate, ack| {
            let mut worker = channel.join(rank).unwrap();
            loop {
                let request = match worker.recv() {
                    Ok(request) => request,
                    Err(Error::Closed { .. }) => return,
                    Err(e) => panic!("worker {rank}: {e}"),
                };
                if gate.recv().is_err() {
                    return;
                }
                let answer = typed_answer(&request, rank);
                if request.execute_type == ExecuteType::ModelInit as i32 {
                    worker.respond_init(&answer).unwrap();
                } else {
                    worker.respond(&answer).unwrap();
                }
                ack.send(rank).unwrap();
            }
        })
    }
}

impl Harness<Raw, Raw> {
    fn raw(test: &str) -> Self {
        let channel = Channel::builder(unique_name("grid-raw"))
            .workers(WORKERS)
            .timeout(LONG)
            .raw();
        let coordinator = channel.create().unwrap();
        Harness::start(test, coordinator, move |rank, gate, ack| {
            let mut worker = channel.join(rank).unwrap();
            loop {
                let request = match worker.recv() {
                    Ok(request) => request,
                    Err(Error::Closed { .. }) => return,
                    Err(e) => panic!("worker {rank}: {e}"),
                };
                if gate.recv().is_err() {
                    return;
                }
                let answer = raw_answer(&request, rank);
                if request[0] == 1 {
                    worker.respond_init(&answer).unwrap();
                } else {
                    worker.respond(&answer).unwrap();
                }
                ack.send(rank).unwrap();
            }
        })
    }
}

impl<Req: Payload, Resp: Payload> Harness<Req, Resp> {
    fn start(
        test: &str,
        coordinator: Coordinator<Req, Resp>,
        serve: impl Fn(u32, Receiver<()>, Sender<u32>) + Clone + Send + 'static,
    ) -> Self {
        let dog = Watchdog::new(test, Duration::from_secs(60));
        let (ack, acks) = channel();
        let mut gates = Vec::new();
        let mut workers = Vec::new();
        for rank in 0..WORKERS {
            let (gate, opened) = channel();
            gates.push(gate);
            let (serve, ack) = (serve.clone(), ack.clone());
            workers.push(thread::spawn(move || serve(rank, opened, ack)));
        }
        coordinator.wait_for_workers(LONG).unwrap();
        Harness {
            coordinator,
            gates,
            acks,
            workers,
            _dog: dog,
        }
    }

    /// Lets each of `ranks` answer one request, and waits until they have.
    fn answer(&self, ranks: &[u32]) {
        self.open(ranks);
        self.answered(ranks);
    }

    /// Lets each of `ranks` answer one request.
    fn open(&self, ranks: &[u32]) {
        for &rank in ranks {
            self.gates[rank as usize].send(()).unwrap();
        }
    }

    /// Waits until each of `ranks` has answered (and no other worker).
    fn answered(&self, ranks: &[u32]) {
        let mut seen: Vec<u32> = ranks
            .iter()
            .map(|_| self.acks.recv_timeout(LONG).expect("a worker's answer"))
            .collect();
        seen.sort_unstable();
        let mut expected = ranks.to_vec();
        expected.sort_unstable();
        assert_eq!(seen, expected, "other workers answered than were let");
    }

    /// Gathers one request's answers in `form` through `gather`. For the
    /// try and timeout forms, the answer of the last worker (every answer,
    /// for `first`) is held back first: the try must be `None` and the
    /// timeout a timeout then; once the last worker has answered, both
    /// must gather. The plain form gathers with every worker let through
    /// (only the last, for `first`, so which answers first is known).
    fn gather<T>(
        &self,
        form: Form,
        first: bool,
        mut gather: impl FnMut(Call) -> Result<Option<T>, Error>,
    ) -> T {
        let last = WORKERS - 1;
        let early: Vec<u32> = if first { vec![] } else { (0..last).collect() };
        match form {
            Form::Recv => {
                let mut ranks = early;
                ranks.push(last);
                self.open(&ranks);
                let gathered = gather(Call::Wait)
                    .unwrap()
                    .expect("a waiting gather gathers");
                self.answered(&ranks);
                gathered
            }
            Form::TryRecv => {
                self.answer(&early);
                for _ in 0..3 {
                    assert!(
                        gather(Call::Try).unwrap().is_none(),
                        "gathered without worker {last}'s answer"
                    );
                }
                self.answer(&[last]);
                gather(Call::Try)
                    .unwrap()
                    .expect("every answer is there: the try gathers")
            }
            Form::RecvTimeout => {
                self.answer(&early);
                match gather(Call::Within(SHORT)) {
                    Err(Error::Timeout { waited, .. }) => assert!(waited >= SHORT / 2),
                    Err(e) => panic!("expected a timeout, got {e}"),
                    Ok(_) => panic!("gathered without worker {last}'s answer"),
                }
                self.answer(&[last]);
                gather(Call::Within(LONG))
                    .unwrap()
                    .expect("a waiting gather gathers")
            }
        }
    }

    /// Lets every worker answer what it holds, and waits for every thread.
    fn finish(self) {
        let Harness {
            coordinator,
            gates,
            workers,
            ..
        } = self;
        drop(gates);
        drop(coordinator);
        for worker in workers {
            worker.join().unwrap();
        }
    }
}

/// One call of `recv`, `try_recv` or `recv_timeout` in `$mode` on `$c`.
macro_rules! call {
    ($c:expr, $mode:expr) => {
        |call: Call| match call {
            Call::Wait => $c.recv($mode).map(Some),
            Call::Try => $c.try_recv($mode),
            Call::Within(d) => $c.recv_timeout($mode, d).map(Some),
        }
    };
}

fn typed_all(form: Form) {
    let h = Harness::typed("typed all");
    h.coordinator.send(&typed_request(7, false)).unwrap();
    let all = h.gather(form, false, call!(h.coordinator, All));
    let ranks: Vec<u32> = all.iter().map(typed_rank).collect();
    assert_eq!(ranks, [0, 1, 2]);
    assert!(all.iter().all(|r| r.sequence == 7));
    h.finish();
}

fn typed_first(form: Form) {
    let h = Harness::typed("typed first");
    h.coordinator.send(&typed_request(8, false)).unwrap();
    let (rank, response) = h.gather(form, true, call!(h.coordinator, First));
    assert_eq!((rank, typed_rank(&response), response.sequence), (2, 2, 8));
    // The slower workers' answers are left behind: drained once given.
    h.answer(&[0, 1]);
    assert_eq!(h.coordinator.drain().unwrap(), 2);
    h.finish();
}

fn typed_aggregated(form: Form) {
    let mut h = Harness::typed("typed aggregated");
    // The channel's rule: the highest rank's answer.
    h.coordinator
        .set_aggregate(|mut all: Vec<ExecuteResponse>| Ok(all.pop().unwrap()));
    h.coordinator.send(&typed_request(9, false)).unwrap();
    let one = h.gather(form, false, call!(h.coordinator, Aggregated));
    assert_eq!((typed_rank(&one), one.sequence), (2, 9));
    h.finish();
}

fn typed_aggregated_by(form: Form) {
    let h = Harness::typed("typed aggregated by");
    // A fold of every answer into a new one: the ranks' sum.
    let mut folds = 0;
    let mut sum = |all: Vec<ExecuteResponse>| {
        folds += 1;
        let total: u32 = all.iter().map(typed_rank).sum();
        Ok(typed_answer(&typed_request(all[0].sequence, false), total))
    };
    h.coordinator.send(&typed_request(10, false)).unwrap();
    let one = h.gather(form, false, call!(h.coordinator, AggregatedBy(&mut sum)));
    assert_eq!((typed_rank(&one), one.sequence), (3, 10));
    assert_eq!(folds, 1, "the rule folds once, when every answer is in");
    h.finish();
}

fn typed_rank0_after_all(form: Form) {
    let h = Harness::typed("typed rank0 after all");
    h.coordinator.send(&typed_request(11, false)).unwrap();
    // Worker 2 is held back: rank 0's answer waits for it.
    let one = h.gather(form, false, call!(h.coordinator, Rank0AfterAll));
    assert_eq!((typed_rank(&one), one.sequence), (0, 11));
    h.finish();
}

fn typed_init(form: Form) {
    let h = Harness::typed("typed init");
    h.coordinator.send(&typed_request(12, true)).unwrap();
    let all = h.gather(form, false, call!(h.coordinator, Init));
    let ranks: Vec<u32> = all.iter().map(typed_rank).collect();
    assert_eq!(ranks, [0, 1, 2]);
    assert!(all.iter().all(|r| r.sequence == 12));
    h.finish();
}

/// Every worker's raw answer, as (rank, bytes).
fn raw_all(gathered: &Gathered<'_>) -> Vec<(u32, Vec<u8>)> {
    gathered.iter().map(|(r, b)| (r, b.to_vec())).collect()
}

fn raw_expected(sequence: u8) -> Vec<(u32, Vec<u8>)> {
    (0..WORKERS)
        .map(|rank| (rank, raw_answer(&raw_request(sequence, false), rank)))
        .collect()
}

fn raw_all_mode(form: Form) {
    let h = Harness::raw("raw all");
    h.coordinator.send(&raw_request(7, false)).unwrap();
    let gathered = h.gather(form, false, call!(h.coordinator, All));
    assert_eq!(gathered.len(), WORKERS as usize);
    assert_eq!(raw_all(&gathered), raw_expected(7));
    drop(gathered);
    h.finish();
}

fn raw_first(form: Form) {
    let h = Harness::raw("raw first");
    h.coordinator.send(&raw_request(8, false)).unwrap();
    let picked = h.gather(form, true, call!(h.coordinator, First));
    assert_eq!(
        (picked.rank(), picked.bytes()),
        (2, &raw_answer(&[0, 8], 2)[..])
    );
    drop(picked);
    h.answer(&[0, 1]);
    assert_eq!(h.coordinator.drain().unwrap(), 2);
    h.finish();
}

fn raw_aggregated(form: Form) {
    let mut h = Harness::raw("raw aggregated");
    // The channel's rule: the longest answer (the highest rank's).
    h.coordinator
        .set_aggregate(|all: &Gathered<'_>| Ok(all.iter().max_by_key(|(_, b)| b.len()).unwrap().0));
    h.coordinator.send(&raw_request(9, false)).unwrap();
    let picked = h.gather(form, false, call!(h.coordinator, Aggregated));
    assert_eq!(
        (picked.rank(), picked.bytes()),
        (2, &raw_answer(&[0, 9], 2)[..])
    );
    drop(picked);
    h.finish();
}

fn raw_aggregated_by(form: Form) {
    let h = Harness::raw("raw aggregated by");
    let mut seen = Vec::new();
    let mut middle = |all: &Gathered<'_>| {
        seen = raw_all(all);
        Ok(1)
    };
    h.coordinator.send(&raw_request(10, false)).unwrap();
    let picked = h.gather(form, false, call!(h.coordinator, AggregatedBy(&mut middle)));
    assert_eq!(
        (picked.rank(), picked.bytes()),
        (1, &raw_answer(&[0, 10], 1)[..])
    );
    drop(picked);
    assert_eq!(seen, raw_expected(10), "the rule saw every answer");
    h.finish();
}

fn raw_rank0_after_all(form: Form) {
    let h = Harness::raw("raw rank0 after all");
    h.coordinator.send(&raw_request(11, false)).unwrap();
    let picked = h.gather(form, false, call!(h.coordinator, Rank0AfterAll));
    assert_eq!(
        (picked.rank(), picked.bytes()),
        (0, &raw_answer(&[0, 11], 0)[..])
    );
    drop(picked);
    h.finish();
}

fn raw_init(form: Form) {
    let h = Harness::raw("raw init");
    h.coordinator.send(&raw_request(12, true)).unwrap();
    let gathered = h.gather(form, false, call!(h.coordinator, Init));
    let expected: Vec<_> = (0..WORKERS)
        .map(|rank| (rank, raw_answer(&raw_request(12, true), rank)))
        .collect();
    assert_eq!(raw_all(&gathered), expected);
    drop(gathered);
    h.finish();
}

/// Every runtime mode in `form` on a raw coordinator: what each hands out.
fn raw_runtime_modes(form: Form) {
    let mut h = Harness::raw("raw runtime modes");
    h.coordinator
        .set_aggregate(|_: &Gathered<'_>| Ok(WORKERS - 1));
    for (sequence, mode) in (20u8..).zip(Mode::EVERY) {
        assert_eq!(Mode::from_number(mode as u32), Some(mode));
        h.coordinator
            .send(&raw_request(sequence, mode == Mode::Init))
            .unwrap();
        let answers = h.gather(form, mode == Mode::First, call!(h.coordinator, mode));
        let request = raw_request(sequence, mode == Mode::Init);
        match (mode, answers) {
            (Mode::All | Mode::Init, Answers::All(gathered)) => {
                let expected: Vec<_> = (0..WORKERS)
                    .map(|rank| (rank, raw_answer(&request, rank)))
                    .collect();
                assert_eq!(raw_all(&gathered), expected, "{mode}");
            }
            (Mode::First | Mode::Aggregated, Answers::One(picked)) => {
                assert_eq!(picked.rank(), 2, "{mode}");
                assert_eq!(picked.bytes(), raw_answer(&request, 2), "{mode}");
            }
            (Mode::Rank0AfterAll, Answers::One(picked)) => {
                assert_eq!(picked.rank(), 0);
                assert_eq!(picked.bytes(), raw_answer(&request, 0));
            }
            (mode, Answers::All(_)) => panic!("{mode} handed out every answer"),
            (mode, Answers::One(_)) => panic!("{mode} handed out one answer"),
        }
        if mode == Mode::First {
            h.answer(&[0, 1]);
            assert_eq!(h.coordinator.drain().unwrap(), 2);
        }
    }
    h.finish();
}

/// Three tests, one per form, of each checker.
macro_rules! forms {
    ($($name:ident => $check:ident,)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn recv() {
                $check(Form::Recv)
            }
            #[test]
            fn try_recv() {
                $check(Form::TryRecv)
            }
            #[test]
            fn recv_timeout() {
                $check(Form::RecvTimeout)
            }
        }
    )*};
}

forms! {
    typed_all_mode => typed_all,
    typed_first_mode => typed_first,
    typed_aggregated_mode => typed_aggregated,
    typed_aggregated_by_mode => typed_aggregated_by,
    typed_rank0_after_all_mode => typed_rank0_after_all,
    typed_init_mode => typed_init,
    raw_all_mode => raw_all_mode,
    raw_first_mode => raw_first,
    raw_aggregated_mode => raw_aggregated,
    raw_aggregated_by_mode => raw_aggregated_by,
    raw_rank0_after_all_mode => raw_rank0_after_all,
    raw_init_mode => raw_init,
    raw_runtime_mode => raw_runtime_modes,
}

/// `drain` in `form`: the answers a First gather left, taken once given.
fn drain(form: Form) {
    let h = Harness::typed("drain");
    h.coordinator.send(&typed_request(1, false)).unwrap();
    h.answer(&[0]);
    assert_eq!(h.coordinator.recv(First).unwrap().0, 0);
    // Nothing left to drain yet for worker 2; worker 1's answer is given.
    h.answer(&[1]);
    let drained = match form {
        Form::Recv => {
            h.open(&[2]);
            h.coordinator.drain().unwrap()
        }
        Form::TryRecv => {
            assert_eq!(
                h.coordinator.try_drain().unwrap(),
                None,
                "worker 2 is behind"
            );
            h.answer(&[2]);
            // Worker 1's was taken by the try before.
            h.coordinator
                .try_drain()
                .unwrap()
                .expect("every answer given")
                + 1
        }
        Form::RecvTimeout => {
            assert!(matches!(
                h.coordinator.drain_timeout(SHORT),
                Err(Error::Timeout { .. })
            ));
            h.answer(&[2]);
            // Worker 1's was taken before the timeout.
            h.coordinator.drain_timeout(LONG).unwrap() + 1
        }
    };
    assert_eq!(drained, 2, "workers 1 and 2 were behind");
    assert_eq!(h.coordinator.try_drain().unwrap(), Some(0));
    h.finish();
}

#[test]
fn drain_waits_for_the_answers_first_left() {
    drain(Form::Recv);
}

#[test]
fn try_drain_takes_what_is_there_and_says_whether_all_was() {
    drain(Form::TryRecv);
}

#[test]
fn drain_timeout_times_out_then_resumes() {
    drain(Form::RecvTimeout);
}

#[test]
fn aggregated_without_a_rule_is_refused_before_anything_is_taken() {
    let h = Harness::raw("no rule");
    h.coordinator.send(&raw_request(1, false)).unwrap();
    h.answer(&[0, 1, 2]);
    for refused in [
        h.coordinator.recv(Aggregated).err(),
        h.coordinator.try_recv(Aggregated).err(),
        h.coordinator.recv(Mode::Aggregated).err(),
    ] {
        assert!(
            matches!(&refused, Some(Error::ResponseThread { reason, .. }) if reason.contains("set_aggregate")),
            "{refused:?}"
        );
    }
    // Nothing was taken: every answer is still there.
    assert_eq!(raw_all(&h.coordinator.recv(All).unwrap()), raw_expected(1));
    h.finish();
}

#[test]
fn a_pick_of_a_rank_outside_the_channel_is_refused() {
    let h = Harness::raw("pick outside");
    h.coordinator.send(&raw_request(1, false)).unwrap();
    h.answer(&[0, 1, 2]);
    let refused = h
        .coordinator
        .recv(AggregatedBy(&mut |_: &Gathered<'_>| Ok(WORKERS)))
        .err();
    assert!(
        matches!(
            refused,
            Some(Error::RankOutOfRange {
                rank: WORKERS,
                workers: WORKERS,
                ..
            })
        ),
        "{refused:?}"
    );
    h.finish();
}

#[test]
fn the_execute_schema_aggregates_by_its_rule_and_another_schema_needs_one() {
    let h = Harness::typed("execute rule");
    // The execute schema's rule: no failed pull-KV result, so rank 0's.
    h.coordinator.send(&typed_request(3, false)).unwrap();
    h.answer(&[0, 1, 2]);
    assert_eq!(typed_rank(&h.coordinator.recv(Aggregated).unwrap()), 0);
    h.finish();
    let other = Channel::anonymous("/nodeipc-grid-typed")
        .typed::<ExecuteRequest, ExecuteResponse>()
        .create()
        .unwrap();
    assert!(matches!(
        other.recv(Aggregated),
        Err(Error::ResponseThread { .. })
    ));
}

/// `send` in `form`: at depth 1, a request no worker has read yet holds
/// the next send back; the try is `None` and the timeout a timeout, and
/// neither sends anything, until the workers read it.
fn send(form: Form) {
    let h = Harness::raw("send forms");
    let c = &h.coordinator;
    let eventually = |sequence: u8| loop {
        if let Some(index) = c.try_send(&raw_request(sequence, false)).unwrap() {
            break index;
        }
        thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(c.send(&raw_request(0, false)).unwrap(), 0);
    // Once every worker has read request 0 (and waits to answer it), its
    // frame is free for request 1, which no worker reads before it has
    // answered request 0: request 2 has no frame.
    assert_eq!(eventually(1), 1);
    let index = match form {
        Form::Recv => {
            h.answer(&[0, 1, 2]);
            c.send(&raw_request(2, false)).unwrap()
        }
        Form::TryRecv => {
            for _ in 0..3 {
                assert_eq!(c.try_send(&raw_request(2, false)).unwrap(), None);
            }
            h.answer(&[0, 1, 2]);
            eventually(2)
        }
        Form::RecvTimeout => {
            match c.send_timeout(&raw_request(2, false), SHORT) {
                Err(Error::Timeout { op, .. }) => {
                    assert!(op.contains("free a request frame"), "{op}")
                }
                other => panic!("expected a timeout, got {:?}", other.map(drop)),
            }
            h.answer(&[0, 1, 2]);
            c.send_timeout(&raw_request(2, false), LONG).unwrap()
        }
    };
    assert_eq!(index, 2, "a refused send sent nothing");
    // Every request went once, in order.
    for sequence in 0..3 {
        if sequence > 0 {
            h.answer(&[0, 1, 2]);
        }
        assert_eq!(raw_all(&c.recv(All).unwrap()), raw_expected(sequence));
    }
    h.finish();
}

#[test]
fn send_waits_for_a_free_frame() {
    send(Form::Recv);
}

#[test]
fn try_send_sends_nothing_without_a_free_frame() {
    send(Form::TryRecv);
}

#[test]
fn send_timeout_times_out_sending_nothing() {
    send(Form::RecvTimeout);
}

#[test]
fn typed_try_send_and_send_timeout_send_a_message() {
    let h = Harness::typed("typed send forms");
    assert_eq!(
        h.coordinator.try_send(&typed_request(0, false)).unwrap(),
        Some(0)
    );
    h.answer(&[0, 1, 2]);
    assert_eq!(h.coordinator.recv(All).unwrap()[2].sequence, 0);
    assert_eq!(
        h.coordinator
            .send_timeout(&typed_request(1, false), LONG)
            .unwrap(),
        1
    );
    h.answer(&[0, 1, 2]);
    assert_eq!(h.coordinator.recv(All).unwrap()[1].sequence, 1);
    h.finish();
}

/// The worker's forms of receiving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Receive {
    Recv,
    TryRecv,
    RecvTimeout,
    RecvInto,
    InPlace,
    TryInPlace,
    InPlaceTimeout,
}

impl Receive {
    /// Before any request is sent: a try finds nothing and a timeout
    /// times out, taking nothing.
    fn nothing_yet<W, T>(
        self,
        worker: &mut W,
        try_form: impl FnOnce(&mut W) -> Result<Option<T>, Error>,
        timeout_form: impl FnOnce(&mut W, Duration) -> Result<T, Error>,
    ) {
        match self {
            Receive::TryRecv | Receive::TryInPlace => {
                assert!(
                    try_form(worker).unwrap().is_none(),
                    "{self:?} took a request before any was sent"
                );
            }
            Receive::RecvTimeout | Receive::InPlaceTimeout => {
                assert!(
                    matches!(timeout_form(worker, SHORT), Err(Error::Timeout { .. })),
                    "{self:?} did not time out"
                );
            }
            _ => {}
        }
    }
}

fn typed_worker(form: Receive) {
    let _dog = Watchdog::new("typed worker forms", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("grid-worker"))
        .timeout(LONG)
        .depth(2);
    let coordinator = channel.create().unwrap();
    let mut worker = channel.join(0).unwrap();
    match form {
        Receive::TryRecv | Receive::RecvTimeout => {
            form.nothing_yet(&mut worker, |w| w.try_recv(), |w, d| w.recv_timeout(d));
        }
        _ => form.nothing_yet(
            &mut worker,
            |w| w.try_recv_in_place().map(|held| held.map(drop)),
            |w, d| w.recv_in_place_timeout(d).map(drop),
        ),
    }
    coordinator.send(&typed_request(5, false)).unwrap();
    let mut reused = ExecuteRequest::default();
    match form {
        Receive::Recv | Receive::TryRecv | Receive::RecvTimeout | Receive::RecvInto => {
            let request = match form {
                Receive::Recv => worker.recv().unwrap(),
                Receive::TryRecv => worker.try_recv().unwrap().expect("a request was sent"),
                Receive::RecvTimeout => worker.recv_timeout(LONG).unwrap(),
                _ => {
                    worker.recv_into(&mut reused).unwrap();
                    reused.clone()
                }
            };
            assert_eq!(request, typed_request(5, false));
            worker.respond(&typed_answer(&request, 0)).unwrap();
        }
        Receive::InPlace | Receive::TryInPlace | Receive::InPlaceTimeout => {
            let held = match form {
                Receive::InPlace => worker.recv_in_place().unwrap(),
                Receive::TryInPlace => worker.try_recv_in_place().unwrap().expect("sent"),
                _ => worker.recv_in_place_timeout(LONG).unwrap(),
            };
            assert_eq!(held.index(), 0);
            assert_eq!(
                held.bytes(),
                prost::Message::encode_to_vec(&typed_request(5, false))
            );
            let request = held.decode().unwrap();
            assert_eq!(request, typed_request(5, false));
            held.respond(&typed_answer(&request, 0)).unwrap();
        }
    }
    let answer = coordinator.recv(All).unwrap();
    assert_eq!((answer[0].sequence, typed_rank(&answer[0])), (5, 0));
}

fn raw_worker(form: Receive) {
    let _dog = Watchdog::new("raw worker forms", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("grid-raw-worker"))
        .timeout(LONG)
        .depth(2)
        .raw();
    let coordinator = channel.create().unwrap();
    let mut worker = channel.join(0).unwrap();
    match form {
        Receive::TryRecv | Receive::RecvTimeout => {
            form.nothing_yet(&mut worker, |w| w.try_recv(), |w, d| w.recv_timeout(d));
        }
        _ => form.nothing_yet(
            &mut worker,
            |w| w.try_recv_in_place().map(|held| held.map(drop)),
            |w, d| w.recv_in_place_timeout(d).map(drop),
        ),
    }
    let request = b"raw request, any encoding";
    coordinator.send(request).unwrap();
    let mut reused = Vec::with_capacity(4);
    match form {
        Receive::Recv | Receive::TryRecv | Receive::RecvTimeout | Receive::RecvInto => {
            let got = match form {
                Receive::Recv => worker.recv().unwrap(),
                Receive::TryRecv => worker.try_recv().unwrap().expect("a request was sent"),
                Receive::RecvTimeout => worker.recv_timeout(LONG).unwrap(),
                _ => {
                    worker.recv_into(&mut reused).unwrap();
                    reused.clone()
                }
            };
            assert_eq!(got, request);
            worker.respond(&got[..4]).unwrap();
        }
        Receive::InPlace | Receive::TryInPlace | Receive::InPlaceTimeout => {
            let held = match form {
                Receive::InPlace => worker.recv_in_place().unwrap(),
                Receive::TryInPlace => worker.try_recv_in_place().unwrap().expect("sent"),
                _ => worker.recv_in_place_timeout(LONG).unwrap(),
            };
            assert_eq!((held.index(), held.bytes()), (0, &request[..]));
            let answer = held.bytes()[..4].to_vec();
            held.respond(&answer).unwrap();
        }
    }
    assert_eq!(coordinator.recv(All).unwrap().get(0), Some(&b"raw "[..]));
}

/// One test per receiving form, typed and raw.
macro_rules! receives {
    ($($name:ident => $form:ident,)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn typed() {
                typed_worker(Receive::$form)
            }
            #[test]
            fn raw() {
                raw_worker(Receive::$form)
            }
        }
    )*};
}

receives! {
    worker_recv => Recv,
    worker_try_recv => TryRecv,
    worker_recv_timeout => RecvTimeout,
    worker_recv_into => RecvInto,
    worker_recv_in_place => InPlace,
    worker_try_recv_in_place => TryInPlace,
    worker_recv_in_place_timeout => InPlaceTimeout,
}
