//! Property tests: any sequence of operations behaves as a bounded FIFO, and
//! any bytes in a region make joins and operations fail cleanly, never panic.

use std::collections::VecDeque;
use std::sync::Arc;

use nodeipc_queue::Queue;
use proptest::prelude::*;

const SCHEMA: u64 = 0x70726f70;

#[derive(Debug, Clone)]
enum Op {
    Push(u32),
    PushSlice(Vec<u32>),
    Reserve { want: usize, fill: usize },
    Pop,
    PopInto(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u32>().prop_map(Op::Push),
        proptest::collection::vec(any::<u32>(), 0..12).prop_map(Op::PushSlice),
        (0usize..12, 0usize..12).prop_map(|(want, fill)| Op::Reserve { want, fill }),
        Just(Op::Pop),
        (0usize..12).prop_map(Op::PopInto),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn operations_match_a_bounded_fifo(cap_log in 0u32..4, ops in proptest::collection::vec(op(), 1..200)) {
        let capacity = 1u32 << cap_log;
        let queue = Queue::<[u32; 3]>::anonymous(capacity, SCHEMA).unwrap();
        let mut tx = queue.producer().unwrap();
        let mut rx = queue.consumer().unwrap();
        let mut model: VecDeque<u32> = VecDeque::new();
        let m = |v: u32| [v, !v, v.rotate_left(7)];
        for op in ops {
            match op {
                Op::Push(v) => {
                    let fits = model.len() < capacity as usize;
                    prop_assert_eq!(tx.try_push(&m(v)).unwrap(), fits);
                    if fits { model.push_back(v); }
                }
                Op::PushSlice(values) => {
                    let items: Vec<[u32; 3]> = values.iter().map(|&v| m(v)).collect();
                    let n = tx.try_push_slice(&items).unwrap();
                    prop_assert_eq!(n, values.len().min(capacity as usize - model.len()));
                    model.extend(&values[..n]);
                }
                Op::Reserve { want, fill } => {
                    let room = capacity as usize - model.len();
                    match tx.reserve(want).unwrap() {
                        None => prop_assert!(room == 0 || want == 0),
                        Some(mut batch) => {
                            prop_assert_eq!(batch.reserved(), want.min(room));
                            let mut filled = 0;
                            for i in 0..fill {
                                if batch.push(&m(i as u32 + 1000)) { filled += 1; }
                            }
                            prop_assert_eq!(batch.publish(), filled);
                            model.extend((0..filled).map(|i| i as u32 + 1000));
                        }
                    }
                }
                Op::Pop => {
                    prop_assert_eq!(rx.try_pop().unwrap(), model.pop_front().map(m));
                }
                Op::PopInto(n) => {
                    let mut out = vec![[0u32; 3]; n];
                    let got = rx.try_pop_into(&mut out).unwrap();
                    prop_assert_eq!(got, n.min(model.len()));
                    for value in &out[..got] {
                        prop_assert_eq!(Some(*value), model.pop_front().map(m));
                    }
                }
            }
            prop_assert_eq!(rx.ready().unwrap(), model.len());
        }
    }

    /// A queue whose header words (past the magic and configuration, which
    /// stay valid so joins get that far) hold arbitrary values: joins and
    /// every operation return, Ok or Err, without a panic or an access
    /// outside the region.
    #[test]
    fn arbitrary_header_words_never_panic(words in proptest::collection::vec(any::<u32>(), 6), slots in proptest::collection::vec(any::<u8>(), 0..192)) {
        let queue = Queue::<[u8; 24]>::anonymous(8, SCHEMA).unwrap();
        let region: Arc<nodeipc_shm::Region> = queue.region().clone();
        // tail, head, producer pid/joins, parked counts.
        for (offset, word) in [128usize, 256, 384, 388, 512, 640].into_iter().zip(&words) {
            region.write_at(offset, &word.to_ne_bytes()).unwrap();
        }
        region.write_at(nodeipc_queue::SLOTS_OFFSET, &slots).unwrap();
        if let Ok(mut tx) = queue.producer() {
            let _ = tx.try_push(&[7; 24]);
            let _ = tx.try_push_slice(&[[1; 24]; 5]);
            let _ = tx.push_timeout(&[2; 24], std::time::Duration::from_millis(1));
        }
        if let Ok(mut rx) = queue.consumer() {
            let _ = rx.try_pop();
            let _ = rx.try_pop_into(&mut [[0; 24]; 9]);
            let _ = rx.pop_timeout(std::time::Duration::from_millis(1));
            let _ = rx.peer_alive();
        }
    }

    /// A whole region of arbitrary bytes: a join is refused with an error.
    #[test]
    fn arbitrary_regions_are_refused_or_joined_cleanly(bytes in proptest::collection::vec(any::<u8>(), 768..1200)) {
        let region = nodeipc_shm::Region::anonymous(bytes.len()).unwrap();
        region.write_at(0, &bytes).unwrap();
        region.seal_grow_shrink().unwrap();
        let region = Arc::new(region);
        let _ = nodeipc_queue::Producer::<u64>::join(region.clone(), SCHEMA);
        let _ = nodeipc_queue::Consumer::<u64>::join(region, SCHEMA);
    }
}
