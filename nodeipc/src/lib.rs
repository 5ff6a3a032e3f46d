#![doc = include_str!("../README.md")]

#[cfg(feature = "barrier")]
#[doc(inline)]
pub use nodeipc_barrier as barrier;
#[cfg(feature = "channel")]
#[doc(inline)]
pub use nodeipc_channel as channel;
#[cfg(feature = "fdpass")]
#[doc(inline)]
pub use nodeipc_fdpass as fdpass;
#[cfg(feature = "fs")]
#[doc(inline)]
pub use nodeipc_fs as fs;
#[cfg(feature = "handshake")]
#[doc(inline)]
pub use nodeipc_handshake as handshake;
#[cfg(feature = "launch")]
#[doc(inline)]
pub use nodeipc_launch as launch;
#[cfg(feature = "monitor")]
#[doc(inline)]
pub use nodeipc_monitor as monitor;
#[cfg(feature = "monitor-host")]
#[doc(inline)]
pub use nodeipc_monitor_host as monitor_host;
#[cfg(feature = "pool")]
#[doc(inline)]
pub use nodeipc_pool as pool;
#[cfg(feature = "proto")]
#[doc(inline)]
pub use nodeipc_proto as proto;
#[cfg(feature = "queue")]
#[doc(inline)]
pub use nodeipc_queue as queue;
#[cfg(feature = "sem")]
#[doc(inline)]
pub use nodeipc_sem as sem;
#[cfg(feature = "shm")]
#[doc(inline)]
pub use nodeipc_shm as shm;
#[cfg(feature = "text")]
#[doc(inline)]
pub use nodeipc_text as text;
