#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod caller;
mod connect;
mod cred;
mod error;
mod handle;
mod listener;
mod liveness;
mod pidfd;
mod procstat;
mod scm;
mod signals;

pub use caller::{NotOpen, borrow_open};
pub use connect::{connect_failure_reason, connect_unix, connect_unix_when_up};
pub use cred::{Credentials, peer_credentials, peer_pidfd, require_peer_uid};
pub use error::{Error, Result};
pub use handle::{
    FdHandle, ForeignFd, Ptracer, Transport, allow_ptracer, open_verified, pidfd_getfd_available,
    process_start_time,
};
pub use listener::Listener;
pub use liveness::{
    Identity, PeerRecord, PeerWatch, Taken, first_exited, open_if_alive, peer_alive,
};
/// Re-exported from `nodeipc-shm`, its home: which process a handle belongs
/// to once `fork(2)` has copied it into a child.
pub use nodeipc_shm::{ForkGeneration, Forked};
pub use pidfd::{Pidfd, Signal};
pub use procstat::{ProcStat, process_stat};
pub use scm::{Received, SCM_MAX_FD, recv_fds, recv_fds_exact, send_fds, send_fds_to};
pub use signals::{StopSignals, block_terminating_signals, clear_signal_mask, terminating_signals};
