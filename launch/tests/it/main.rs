//! The launcher's in-process tests, one module per former test binary,
//! linked once. Apart: `leaks.rs` (counts this process's descriptors and
//! threads), `stuck.rs` (a FUSE mount in this process), and the etcd tests
//! (`harness = false`: each launcher runs on a process's main thread).

mod ft_table;
mod library;
