//! The execute channel's integration tests, one module per former test
//! binary, linked once. `handshake.rs` stays a binary of its own: it counts
//! this process's descriptors, which tests running beside it would change.

mod alloc;
mod any_schema;
mod broadcast;
mod bytes_and_in_place;
mod depth;
mod fd_exhaustion;
mod fork;
mod grid;
mod handshake_connect;
mod handshake_limits;
mod hostile_logons;
mod hostile_slots;
mod loans;
mod per_call_timeouts;
mod raw_response_thread;
mod read_only_ring;
mod response_thread_policy;
mod response_thread_stop;
mod roles;
mod smoke;
mod validation;
