//! Agave's scheduler messages, as `agave-scheduler-bindings` 8.0.0 (crates.io,
//! the current release; source in github.com/anza-xyz/agave-sdk) declares
//! them: the type definitions only — names, fields, field types and
//! `#[repr(C)]` exactly as there — with `#[derive(nodeipc_queue::Message)]`
//! added. Padding and all, they cross nodeipc queues as they are.
//!
//! The constants the scheduler session needs are its own (see
//! [`crate::scheduler_session`]); the bindings' documentation says what
//! each field means.

#![allow(missing_docs)]

use nodeipc_queue::Message;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct SharableTransactionRegion {
    pub offset: usize,
    pub length: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct SharablePubkeys {
    pub offset: usize,
    pub num_pubkeys: u32,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy, Message)]
#[repr(C)]
pub struct SharableTransactionBatchRegion {
    pub num_transactions: u8,
    pub transactions_offset: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct ExecutionResponseRegion {
    pub num_transaction_responses: u8,
    pub transaction_responses_offset: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct CheckResponseRegion {
    pub num_transaction_responses: u8,
    pub transaction_responses_offset: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct TpuToPackMessage {
    pub transaction: SharableTransactionRegion,
    pub flags: u8,
    pub src_addr: [u8; 16],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct ProgressMessage {
    pub leader_state: u8,
    pub current_slot_progress: u8,
    pub epoch: u64,
    pub current_slot: u64,
    pub next_leader_slot: u64,
    pub leader_range_end: u64,
    pub remaining_cost_units: u64,
    pub remaining_allocated_accounts_data_size: u64,
    pub latest_blockhash: [u8; 32],
    pub target_bank_time_ms: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct PackToExecutionWorkerMessage {
    pub flags: u16,
    pub max_working_slot: u64,
    pub batch: SharableTransactionBatchRegion,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct PackToCheckWorkerMessage {
    pub flags: u16,
    pub batch: SharableTransactionBatchRegion,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct ExecutionWorkerToPackMessage {
    pub batch: SharableTransactionBatchRegion,
    pub processed_code: u8,
    pub responses: ExecutionResponseRegion,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[repr(C)]
pub struct CheckWorkerToPackMessage {
    pub batch: SharableTransactionBatchRegion,
    pub processed_code: u8,
    pub responses: CheckResponseRegion,
}

pub mod worker_message_types {
    use nodeipc_queue::Message;

    use crate::agave_bindings::SharablePubkeys;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct ExecutionResponse {
        pub execution_slot: u64,
        pub not_included_reason: u8,
        pub execution_status: u8,
        pub cost_units: u64,
        pub fee_payer_balance: u64,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
    #[repr(C)]
    pub struct CheckResponse {
        pub parsing_and_sanitization_flags: u8,
        pub status_cache_check_flags: u8,
        pub fee_payer_balance_flags: u8,
        pub resolve_flags: u8,
        pub scheduling_details_flags: u8,
        pub age_nonce_check_flags: u8,
        pub included_slot: u64,
        pub transaction_fee: u64,
        pub prioritization_fee: u64,
        pub estimated_cost_units: u64,
        pub allocated_accounts_data_size: u64,
        pub balance_slot: u64,
        pub fee_payer_balance: u64,
        pub resolution_slot: u64,
        pub min_alt_deactivation_slot: u64,
        pub resolved_pubkeys: SharablePubkeys,
    }
}
