//! `#[derive(Message)]`: padding leaves as zeros, `bool` and enum fields
//! are checked on the consumer's copy, a bad one names the queue, the slot,
//! the field and its offset, and plain layouts keep the fast path.

use nodeipc_queue::{Error, Invalid, Message, Queue, SLOTS_OFFSET};

const SCHEMA: u64 = 0x6d7367;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
#[repr(u8)]
enum Kind {
    Check = 1,
    Execute = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
#[repr(C)]
struct Region {
    count: u8,
    // 7 bytes of padding here
    offset: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
#[repr(C)]
struct Work {
    batch: Region,
    kind: Kind,
    done: bool,
    flags: [bool; 3],
    // 3 bytes of padding here
    slot: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
#[repr(C)]
struct Words {
    a: u64,
    b: [u32; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
#[repr(C)]
struct Tuple(u32, bool);

fn work(slot: u32) -> Work {
    Work {
        batch: Region {
            count: 3,
            offset: 4096,
        },
        kind: Kind::Execute,
        done: true,
        flags: [false, true, false],
        slot,
    }
}

/// The region's bytes of slot `slot` (a test's view of shared memory).
fn slot_bytes<T: Message>(queue: &Queue<T>, slot: usize) -> Vec<u8> {
    let stride = size_of::<T>().div_ceil(8) * 8;
    let mut buf = vec![0u8; size_of::<T>()];
    queue
        .region()
        .read_at(SLOTS_OFFSET + slot * stride, &mut buf)
        .unwrap();
    buf
}

fn poke<T: Message>(queue: &Queue<T>, slot: usize, at: usize, byte: u8) {
    let stride = size_of::<T>().div_ceil(8) * 8;
    queue
        .region()
        .write_at(SLOTS_OFFSET + slot * stride + at, &[byte])
        .unwrap();
}

#[test]
fn plain_is_computed_from_the_fields_and_the_padding() {
    // Checked when this test compiles.
    const {
        assert!(Words::PLAIN, "u64 and u32 fields with no padding are plain");
        assert!(<[u64; 8]>::PLAIN && u32::PLAIN, "Pod types are plain");
        assert!(!Region::PLAIN, "padding: not plain");
        assert!(!Work::PLAIN && !Kind::PLAIN && !Tuple::PLAIN);
    }
}

#[test]
fn derived_messages_round_trip_with_their_padding_zeroed() {
    let queue = Queue::<Work>::anonymous(4, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    // A value whose padding bytes are not zero: built from bytes of 0xAA,
    // as a stack that held something else would leave it.
    let mut dirty = std::mem::MaybeUninit::<Work>::uninit();
    // SAFETY: every byte of `dirty` is written (0xAA) before any field is
    // set; then each field is set to a valid value, and only then read.
    let dirty = unsafe {
        std::ptr::write_bytes(dirty.as_mut_ptr().cast::<u8>(), 0xAA, size_of::<Work>());
        let p = dirty.as_mut_ptr();
        (*p).batch.count = 3;
        (*p).batch.offset = 4096;
        (*p).kind = Kind::Execute;
        (*p).done = true;
        (*p).flags = [false, true, false];
        (*p).slot = 9;
        dirty.assume_init()
    };
    assert_eq!(dirty, work(9));
    assert!(tx.try_push(&dirty).unwrap());
    let bytes = slot_bytes(&queue, 0);
    let padding: Vec<usize> = (1..8).chain(21..24).chain(28..32).collect();
    for at in padding {
        assert_eq!(bytes[at], 0, "padding byte {at} left as {:#x}", bytes[at]);
    }
    assert_eq!(bytes[16], 2, "kind's discriminant");
    assert_eq!(bytes[17], 1, "done");
    assert_eq!(rx.try_pop().unwrap(), Some(work(9)));
    let t = Tuple(5, true);
    let tuples = Queue::<Tuple>::anonymous(2, SCHEMA).unwrap();
    assert!(tuples.producer().unwrap().try_push(&t).unwrap());
    assert_eq!(tuples.consumer().unwrap().try_pop().unwrap(), Some(t));
}

#[test]
fn an_invalid_bool_names_queue_slot_field_and_offset_and_the_next_pop_goes_on() {
    let queue = Queue::<Work>::anonymous(4, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    for slot in 0..3 {
        assert!(tx.try_push(&work(slot)).unwrap());
    }
    assert_eq!(rx.try_pop().unwrap(), Some(work(0)));
    // Message 1 is in slot 1: its `done` (offset 17) becomes 2, and
    // message 2's `flags[2]` (offset 20) becomes 7.
    poke(&queue, 1, 17, 2);
    poke(&queue, 2, 20, 7);
    match rx.try_pop() {
        Err(Error::Invalid {
            queue: name,
            index: 1,
            slot: 1,
            invalid,
        }) => {
            assert_eq!(name, queue.region().label());
            assert_eq!(
                invalid,
                Invalid {
                    field: "done".to_owned(),
                    offset: 17,
                    value: 2,
                    expected: "a bool: 0 or 1",
                }
            );
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    let err = rx.try_pop().unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("message 2 (slot 2)") && text.contains("flags[2] at offset 20 holds 7"),
        "{text}"
    );
    assert_eq!(rx.try_pop().unwrap(), None, "both bad ones were taken off");
    assert!(tx.try_push(&work(3)).unwrap());
    assert_eq!(rx.try_pop().unwrap(), Some(work(3)));
}

#[test]
fn an_undeclared_enum_value_in_a_nested_field_is_named_by_its_path() {
    #[derive(Clone, Copy, Debug, PartialEq, Message)]
    #[repr(C)]
    struct Outer {
        id: u64,
        inner: Work,
    }
    let queue = Queue::<Outer>::anonymous(2, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    assert!(
        tx.try_push(&Outer {
            id: 1,
            inner: work(1)
        })
        .unwrap()
    );
    // Outer.inner at 8, Work.kind at 16: byte 24 holds Kind's discriminant.
    poke(&queue, 0, 24, 9);
    match rx.try_pop() {
        Err(Error::Invalid { invalid, slot, .. }) => {
            assert_eq!(slot, 0);
            assert_eq!(invalid.field, "inner.kind");
            assert_eq!(invalid.offset, 24);
            assert_eq!(invalid.value, 9);
            assert_eq!(invalid.expected, "one of Check, Execute");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn a_batch_pop_returns_the_good_messages_before_a_bad_one() {
    let queue = Queue::<Work>::anonymous(8, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    assert_eq!(
        tx.try_push_slice(&[work(0), work(1), work(2), work(3)])
            .unwrap(),
        4
    );
    poke(&queue, 2, 18, 0xff); // flags[0] of message 2
    let mut out = [work(99); 8];
    assert_eq!(rx.try_pop_into(&mut out).unwrap(), 2);
    assert_eq!(&out[..2], &[work(0), work(1)]);
    assert!(matches!(
        rx.try_pop_into(&mut out),
        Err(Error::Invalid { index: 2, .. })
    ));
    assert_eq!(rx.try_pop_into(&mut out).unwrap(), 1);
    assert_eq!(out[0], work(3));
}

#[test]
fn a_queue_of_an_enum_checks_the_discriminant() {
    let queue = Queue::<Kind>::anonymous(2, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    assert!(tx.try_push(&Kind::Check).unwrap());
    assert_eq!(rx.try_pop().unwrap(), Some(Kind::Check));
    assert!(tx.try_push(&Kind::Check).unwrap());
    poke(&queue, 1, 0, 0);
    let err = rx.try_pop().unwrap_err().to_string();
    assert!(
        err.contains("field the message at offset 0 holds 0, not one of Check, Execute"),
        "{err}"
    );
}

#[test]
fn messages_written_to_bytes_and_read_back_are_checked_the_same_way() {
    let mut bytes = [0xAAu8; 32];
    work(4).write_bytes(&mut bytes);
    assert_eq!(&bytes[1..8], &[0; 7], "padding written as zeros");
    assert_eq!(Work::read_bytes(&bytes).unwrap(), work(4));
    bytes[17] = 3; // `done`
    let invalid = Work::read_bytes(&bytes).unwrap_err();
    assert_eq!((invalid.field.as_str(), invalid.offset), ("done", 17));
}
