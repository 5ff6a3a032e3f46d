//! The queue's fuzz driver, shared by the proptest properties in
//! `integration-tests/tests/it/queue_fuzz.rs` (run in CI) and the cargo-fuzz target
//! `fuzz/fuzz_targets/queue_region.rs` (run under `NODEIPC_CI_LONG`): a
//! region pre-filled with arbitrary bytes, then a producer and a consumer
//! driven by the rest of the input, with arbitrary writes into the live
//! region between their steps (another process misbehaving). Every call must
//! return; while nothing was garbled the queue must behave as a FIFO of
//! what was pushed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use nodeipc_queue::{Consumer, Producer, Queue};
use nodeipc_shm::Region;

use super::Script;

const SCHEMA: u64 = 0x6675_7a7a; // "fuzz"
/// 24 bytes: a stride of three words.
type Msg = [u64; 3];
const TICK: Duration = Duration::from_micros(50);

fn msg(seq: u64) -> Msg {
    [seq, !seq, seq.wrapping_mul(3)]
}

/// What the queue must hold while nothing was garbled.
struct Model {
    garbled: bool,
    expect: VecDeque<u64>,
    next: u64,
}

impl Model {
    fn pushed(&mut self, n: usize) {
        for _ in 0..n {
            self.expect.push_back(self.next);
            self.next += 1;
        }
    }

    fn popped(&mut self, got: &Msg) {
        if self.garbled {
            return;
        }
        let want = self
            .expect
            .pop_front()
            .expect("a message popped that was never pushed");
        assert_eq!(*got, msg(want), "FIFO order broken");
    }

    fn ok<T: std::fmt::Debug>(&self, what: &str, r: &nodeipc_queue::Result<T>) {
        if !self.garbled {
            assert!(r.is_ok(), "{what} failed on an intact queue: {r:?}");
        }
    }
}

/// Runs one input; returns how many results were checked against the
/// model (none once the region is garbled).
pub fn queue_region(data: &[u8]) -> usize {
    let mut input = Script::new(data);
    let flags = input.byte();
    // Bit 7: no writes into the live region between steps.
    let pokes = flags & 0x80 == 0;
    let capacity = 1u32 << (flags >> 1 & 3);
    let queue = Queue::<Msg>::anonymous(capacity, SCHEMA).expect("a fresh queue");
    let region: Arc<Region> = queue.region().clone();
    let len = region.len();
    // Pre-fill: from the magic (joins refused, most likely) or from the
    // indices on (joins get past the configuration).
    let start = if flags & 1 == 1 { 0 } else { 128 };
    let fill = usize::from(input.u16()) % (len - start + 1);
    let bytes = input.take(fill);
    region.write_at(start, bytes).expect("in bounds");
    let mut model = Model {
        garbled: !bytes.is_empty(),
        expect: VecDeque::new(),
        next: 0,
    };
    let mut tx: Option<Producer<Msg>> = queue.producer().ok();
    let mut rx: Option<Consumer<Msg>> = queue.consumer().ok();
    if !model.garbled {
        assert!(
            tx.is_some() && rx.is_some(),
            "joins of a fresh queue failed"
        );
    }
    let mut out = [[0u64; 3]; 12];
    let (mut steps, mut checked) = (0, 0);
    while !input.is_empty() && steps < 512 {
        steps += 1;
        let op = input.byte();
        let k = usize::from(input.byte() % 12);
        match (op % 10, tx.as_mut(), rx.as_mut()) {
            (0, Some(tx), _) => {
                let r = tx.try_push(&msg(model.next));
                model.ok("try_push", &r);
                if let Ok(true) = r {
                    model.pushed(1);
                }
            }
            (1, Some(tx), _) => {
                let values: Vec<Msg> = (0..k as u64).map(|i| msg(model.next + i)).collect();
                let r = tx.try_push_slice(&values);
                model.ok("try_push_slice", &r);
                if let Ok(n) = r {
                    model.pushed(n);
                }
            }
            (2, Some(tx), _) => {
                let fill = usize::from(input.byte() % 12);
                let publish = op & 0x80 == 0;
                let r = tx.reserve(k);
                model.ok("reserve", &r);
                if let Ok(Some(mut batch)) = r {
                    let mut filled = 0;
                    while filled < fill && batch.push(&msg(model.next + filled as u64)) {
                        filled += 1;
                    }
                    if publish {
                        assert_eq!(batch.publish(), filled);
                        model.pushed(filled);
                    }
                }
            }
            (3, _, Some(rx)) => {
                let r = rx.try_pop();
                model.ok("try_pop", &r);
                if let Ok(Some(m)) = r {
                    model.popped(&m);
                }
            }
            (4, _, Some(rx)) => {
                let r = rx.try_pop_into(&mut out[..k]);
                model.ok("try_pop_into", &r);
                if let Ok(n) = r {
                    for m in &out[..n] {
                        model.popped(m);
                    }
                }
            }
            (5, _, Some(rx)) => match rx.pop_timeout(TICK) {
                Ok(m) => model.popped(&m),
                Err(e) => {
                    if !model.garbled {
                        assert!(
                            model.expect.is_empty(),
                            "pop_timeout failed with messages in: {e}"
                        );
                    }
                }
            },
            (6, Some(tx), _) => {
                if tx.push_timeout(&msg(model.next), TICK).is_ok() {
                    model.pushed(1);
                } else if !model.garbled {
                    assert_eq!(
                        model.expect.len(),
                        capacity as usize,
                        "push_timeout failed with room"
                    );
                }
            }
            (7, tx, rx) => {
                if let Some(tx) = tx {
                    let _ = tx.peer_alive();
                    let _ = tx.peer();
                }
                if let Some(rx) = rx {
                    let r = rx.ready();
                    model.ok("ready", &r);
                    if let (Ok(n), false) = (r, model.garbled) {
                        assert_eq!(n, model.expect.len());
                    }
                    let _ = rx.peer_alive();
                }
            }
            (8, _, _) if pokes => {
                // Another process writes anywhere in the live region.
                let at = usize::from(input.u16()) % len;
                let bytes = input.take(k);
                let end = (at + bytes.len()).min(len);
                region.write_at(at, &bytes[..end - at]).expect("in bounds");
                model.garbled |= end > at;
            }
            (9, _, _) => {
                // One end leaves and a new one takes the role back.
                if op & 0x10 == 0 {
                    drop(tx.take());
                    tx = queue.producer().ok();
                    if !model.garbled {
                        assert!(tx.is_some(), "the producer role was not taken back");
                    }
                } else {
                    drop(rx.take());
                    rx = queue.consumer().ok();
                    if !model.garbled {
                        assert!(rx.is_some(), "the consumer role was not taken back");
                    }
                }
            }
            _ => {}
        }
        if !model.garbled {
            checked += 1;
        }
    }
    checked
}
