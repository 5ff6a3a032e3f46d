//! Agave's own scheduler messages through nodeipc queues, as Agave declares
//! them, in two versions of `agave-scheduler-bindings`:
//!
//! - the current one, 8.0.0 from crates.io (`processed_code: u8`), in
//!   `nodeipc_integration_tests::agave_bindings` (the scheduler session
//!   runs on it);
//! - the one with `WorkerToPackMessage.processed: bool`, below: its type
//!   definitions as they stood at anza-xyz/agave commit
//!   `0fcc3099c7d57d62326b440e0d8611eddbb8e4b1` (`scheduler-bindings/src/lib.rs`,
//!   before the crate's first release on crates.io: the published 0.1.0
//!   is an empty placeholder and 3.1.1 already has `u8` codes), with
//!   `#[derive(nodeipc_queue::Message)]` added.
//!
//! Each type crosses a queue with its padding written as zeros; a `bool`
//! another process set to a byte other than 0 or 1 is an error naming the
//! field and its offset, found on the consumer's own copy.

use std::mem::offset_of;

use nodeipc_integration_tests::agave_bindings as v8;
use nodeipc_queue::{Error, Message, Queue, SLOTS_OFFSET};

/// Agave commit 0fcc3099's `scheduler-bindings`: type definitions only.
#[allow(dead_code, missing_docs, unreachable_pub)]
mod with_bool {
    use nodeipc_queue::Message;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct SharableTransactionRegion {
        pub offset: usize,
        pub length: u32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct SharablePubkeys {
        pub offset: usize,
        pub num_pubkeys: u32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct SharableTransactionBatchRegion {
        pub num_transactions: u8,
        pub transactions_offset: u32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct TransactionResponseRegion {
        pub tag: u8,
        pub num_transaction_responses: u8,
        pub transaction_responses_offset: u32,
    }

    // As Agave declared it at that commit: no `#[repr(C)]`, so its field
    // order is the compiler's to choose and a peer built otherwise could
    // disagree. The derive refuses such a type (queue/tests/it/outside.rs
    // shows its error); it is copied here unchanged and left out.
    pub struct TpuToPackMessage {
        pub transaction: SharableTransactionRegion,
        pub flags: u8,
        pub src_addr: [u8; 16],
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct ProgressMessage {
        pub current_slot: u64,
        pub next_leader_slot: u64,
        pub remaining_cost_units: u64,
        pub current_slot_progress: u8,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct PackToWorkerMessage {
        pub flags: u16,
        pub max_execution_slot: u64,
        pub batch: SharableTransactionBatchRegion,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct WorkerToPackMessage {
        pub batch: SharableTransactionBatchRegion,
        pub processed: bool,
        pub responses: TransactionResponseRegion,
    }

    pub mod worker_message_types {
        use nodeipc_queue::Message;

        use super::SharablePubkeys;

        #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
        #[repr(C)]
        pub struct ExecutionResponse {
            not_included_reason: u8,
            pub cost_units: u64,
            pub fee_payer_balance: u64,
        }

        #[derive(Clone, Copy, Debug, PartialEq, Eq, Message)]
        #[repr(C)]
        pub struct Resolved {
            pub success: bool,
            pub slot: u64,
            pub min_alt_deactivation_slot: u64,
            pub resolved_pubkeys: SharablePubkeys,
        }
    }
}

const SCHEMA: u64 = 0x0061_6761_7665;

/// Sends `value` through a fresh queue and returns it with the slot's
/// bytes as the consumer's peer would see them.
fn through<T: Message + PartialEq + std::fmt::Debug>(value: T) -> Vec<u8> {
    let queue = Queue::<T>::anonymous(2, SCHEMA).expect("queue");
    let (mut tx, mut rx) = (queue.producer().unwrap(), queue.consumer().unwrap());
    assert!(tx.try_push(&value).unwrap());
    let mut slot = vec![0u8; size_of::<T>()];
    queue.region().read_at(SLOTS_OFFSET, &mut slot).unwrap();
    assert_eq!(rx.try_pop().unwrap(), Some(value));
    slot
}

/// The bytes a field-by-field encoder must produce: each field's own
/// bytes at its offset, zeros elsewhere (the padding).
fn expect(size: usize, fields: &[(usize, &[u8])]) -> Vec<u8> {
    let mut bytes = vec![0u8; size];
    for (at, field) in fields {
        bytes[*at..*at + field.len()].copy_from_slice(field);
    }
    bytes
}

#[test]
fn the_current_bindings_cross_a_queue_with_their_padding_zeroed() {
    let batch = v8::SharableTransactionBatchRegion {
        num_transactions: 3,
        transactions_offset: 0x1234_5678,
    };
    let tpu = v8::TpuToPackMessage {
        transaction: v8::SharableTransactionRegion {
            offset: 4096,
            length: 1232,
        },
        flags: 5,
        src_addr: [7; 16],
    };
    assert_eq!(
        through(tpu),
        expect(
            size_of::<v8::TpuToPackMessage>(),
            &[
                (0, &4096usize.to_ne_bytes()),
                (8, &1232u32.to_ne_bytes()),
                (offset_of!(v8::TpuToPackMessage, flags), &[5]),
                (offset_of!(v8::TpuToPackMessage, src_addr), &[7; 16]),
            ]
        )
    );
    let done = v8::CheckWorkerToPackMessage {
        batch,
        processed_code: 2,
        responses: v8::CheckResponseRegion {
            num_transaction_responses: 3,
            transaction_responses_offset: 64,
        },
    };
    assert_eq!(
        through(done),
        expect(
            size_of::<v8::CheckWorkerToPackMessage>(),
            &[
                (0, &[3]),
                (8, &0x1234_5678usize.to_ne_bytes()),
                (
                    offset_of!(v8::CheckWorkerToPackMessage, processed_code),
                    &[2]
                ),
                (offset_of!(v8::CheckWorkerToPackMessage, responses), &[3]),
                (
                    offset_of!(v8::CheckWorkerToPackMessage, responses) + 8,
                    &64usize.to_ne_bytes()
                ),
            ]
        )
    );
    // Every message type of the current bindings goes through.
    through(v8::ProgressMessage {
        leader_state: 2,
        current_slot_progress: 40,
        epoch: 900,
        current_slot: 1,
        next_leader_slot: 2,
        leader_range_end: 5,
        remaining_cost_units: 48_000_000,
        remaining_allocated_accounts_data_size: 1 << 20,
        latest_blockhash: [9; 32],
        target_bank_time_ms: 400,
    });
    through(v8::PackToExecutionWorkerMessage {
        flags: 6,
        max_working_slot: 3,
        batch,
    });
    through(v8::PackToCheckWorkerMessage { flags: 14, batch });
    through(v8::ExecutionWorkerToPackMessage {
        batch,
        processed_code: 0,
        responses: v8::ExecutionResponseRegion {
            num_transaction_responses: 3,
            transaction_responses_offset: 128,
        },
    });
    through(v8::worker_message_types::ExecutionResponse {
        execution_slot: 3,
        not_included_reason: 0,
        execution_status: 1,
        cost_units: 1500,
        fee_payer_balance: 10_000,
    });
    through(v8::worker_message_types::CheckResponse {
        parsing_and_sanitization_flags: 0,
        status_cache_check_flags: 3,
        fee_payer_balance_flags: 3,
        resolve_flags: 3,
        scheduling_details_flags: 1,
        age_nonce_check_flags: 3,
        included_slot: 0,
        transaction_fee: 5000,
        prioritization_fee: 100,
        estimated_cost_units: 1500,
        allocated_accounts_data_size: 0,
        balance_slot: 3,
        fee_payer_balance: 10_000,
        resolution_slot: 3,
        min_alt_deactivation_slot: u64::MAX,
        resolved_pubkeys: v8::SharablePubkeys {
            offset: 0,
            num_pubkeys: 0,
        },
    });
}

#[test]
fn the_bool_bindings_cross_a_queue_and_a_bad_bool_is_named() {
    use with_bool::*;
    let batch = SharableTransactionBatchRegion {
        num_transactions: 2,
        transactions_offset: 640,
    };
    let responses = TransactionResponseRegion {
        tag: 1,
        num_transaction_responses: 2,
        transaction_responses_offset: 1280,
    };
    for processed in [true, false] {
        let message = WorkerToPackMessage {
            batch,
            processed,
            responses,
        };
        let at = offset_of!(WorkerToPackMessage, processed);
        let slot = through(message);
        assert_eq!(slot[at], u8::from(processed));
        assert_eq!(
            slot,
            expect(
                size_of::<WorkerToPackMessage>(),
                &[
                    (0, &[2]),
                    (4, &640u32.to_ne_bytes()),
                    (at, &[u8::from(processed)]),
                    (offset_of!(WorkerToPackMessage, responses), &[1, 2]),
                    (
                        offset_of!(WorkerToPackMessage, responses) + 4,
                        &1280u32.to_ne_bytes()
                    ),
                ]
            )
        );
    }
    through(ProgressMessage {
        current_slot: 1,
        next_leader_slot: 4,
        remaining_cost_units: 12,
        current_slot_progress: 50,
    });
    through(PackToWorkerMessage {
        flags: 2,
        max_execution_slot: 9,
        batch,
    });

    // Another process writes 2 into `processed`: the consumer's copy is
    // refused, naming the field and its offset.
    let queue = Queue::<WorkerToPackMessage>::anonymous(4, SCHEMA).unwrap();
    let (mut tx, mut rx) = (queue.producer().unwrap(), queue.consumer().unwrap());
    let message = WorkerToPackMessage {
        batch,
        processed: true,
        responses,
    };
    assert!(tx.try_push(&message).unwrap());
    assert!(tx.try_push(&message).unwrap());
    let at = offset_of!(WorkerToPackMessage, processed);
    queue.region().write_at(SLOTS_OFFSET + at, &[2]).unwrap();
    match rx.try_pop() {
        Err(Error::Invalid {
            slot: 0, invalid, ..
        }) => {
            assert_eq!((invalid.field.as_str(), invalid.offset), ("processed", at));
            assert_eq!(invalid.value, 2);
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(rx.try_pop().unwrap(), Some(message), "the next one is fine");

    // A `Resolved` whose `success` is 0xff, in slot 1.
    let resolved = worker_message_types::Resolved {
        success: true,
        slot: 7,
        min_alt_deactivation_slot: u64::MAX,
        resolved_pubkeys: SharablePubkeys {
            offset: 8192,
            num_pubkeys: 4,
        },
    };
    let queue = Queue::<worker_message_types::Resolved>::anonymous(2, SCHEMA).unwrap();
    let (mut tx, mut rx) = (queue.producer().unwrap(), queue.consumer().unwrap());
    assert!(tx.try_push(&resolved).unwrap());
    assert_eq!(rx.try_pop().unwrap(), Some(resolved));
    assert!(tx.try_push(&resolved).unwrap());
    let stride_r = size_of::<worker_message_types::Resolved>().div_ceil(8) * 8;
    queue
        .region()
        .write_at(SLOTS_OFFSET + stride_r, &[0xff])
        .unwrap();
    let err = rx.try_pop().unwrap_err().to_string();
    assert!(
        err.contains("(slot 1): field success at offset 0 holds 255, not a bool: 0 or 1"),
        "{err}"
    );
}
