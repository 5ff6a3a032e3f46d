//! [`Coordinator`]: broadcasts requests to every worker and gathers their
//! responses.
//!
//! The types live here with their private fields, which the parts below
//! see and nothing outside does; each part adds `impl` blocks by concern:
//! - `liveness`: whether a worker is still there, and bounded waits on one;
//! - `gather`: taking responses out of the slots (`recv_*`, `drain`);
//! - `send`: broadcasting a request into the ring;
//! - `thread`: the response thread, and closing the channel on drop.
//!
//! The parts depend one way only: `send` and `thread` on `gather`, all
//! three on `liveness`; this file on none of them.

mod gather;
mod liveness;
mod send;
mod thread;

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use nodeipc_fdpass::Pidfd;
use nodeipc_proto::execute::ExecuteResponse;
use nodeipc_shm::Region;

use crate::config::ChannelConfig;
use crate::layout::Layout;
use crate::sem_kind::{Direction, Role};
use crate::sems::SemSet;
use crate::{Error, Result};

/// Called by the response thread with each aggregated response, or with the
/// error that ended its gather.
pub type ResponseHandler = Box<dyn FnMut(Result<ExecuteResponse>) + Send>;

/// The coordinator's end of an execute channel.
///
/// [`send`](Coordinator::send) waits until every worker has room (its
/// request-produce semaphore), encodes the request straight into the next
/// frame of the request ring — no allocation — and posts every worker's
/// request-consume semaphore. With `depth = k` the coordinator may run `k`
/// requests ahead of the slowest worker. Responses come back one slot per
/// worker and are gathered with [`recv_all`](Coordinator::recv_all),
/// [`recv_all_aggregated`](Coordinator::recv_all_aggregated),
/// [`recv_first`](Coordinator::recv_first) or [`recv_init`](Coordinator::recv_init),
/// or handed to a handler on a thread of their own.
///
/// Nothing waits forever: every wait is bounded by the configured timeout,
/// and a worker whose process died is reported as [`Error::WorkerDied`]
/// within a fraction of a second.
pub struct Coordinator {
    shared: Arc<Shared>,
    handler: Option<ResponseHandler>,
    thread: Option<ResponseThread>,
}

struct ResponseThread {
    handle: JoinHandle<ResponseHandler>,
}

/// What the sending side and the response thread share.
struct Shared {
    config: ChannelConfig,
    layout: Layout,
    request: Region,
    response: Region,
    sems: SemSet,
    /// Verified pidfds of the workers, with the pid each was opened for:
    /// opened once a worker registers, again when another process takes the rank.
    workers: Vec<Mutex<Option<(u32, Pidfd)>>>,
    gatherer: Mutex<Gatherer>,
    /// Wakes an idle response thread when a request is sent.
    idle: (Mutex<()>, Condvar),
    thread_idle: AtomicBool,
    stop: AtomicBool,
    /// Set while `recv_first` has left answers of slower workers unconsumed:
    /// `send` must then drain them while it waits, or a slow worker blocked
    /// on its full slot could never free a request frame.
    stale: AtomicBool,
    /// Requests sent. The request header holds a copy for the workers, but
    /// any process mapping the region can write that one: what the
    /// coordinator sends next and gathers is decided by this count alone.
    sent: AtomicU64,
    /// Where a worker's answer is copied out of its slot before decoding,
    /// sized once for the largest slot. Gathers run one at a time (under
    /// `gatherer`), so this lock is never contended.
    slot_copy: Mutex<Vec<u8>>,
}

/// Where gathering stands: which request the next gather answers, how many
/// responses each worker's slot has given up, and what a gather interrupted
/// half-way had collected.
struct Gatherer {
    next: u64,
    consumed: Vec<u64>,
    partial: Vec<Option<Result<ExecuteResponse>>>,
}

impl Coordinator {
    /// Creates a channel whose regions (and semaphores, if named) have names
    /// derived from `config.name`, so workers can [`join`](crate::Worker::join)
    /// by name. Call [`wait_for_workers`](Coordinator::wait_for_workers) next:
    /// it removes every name once all workers are in.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`]; [`Error::Shm`] / [`Error::Sem`] (a name
    /// already taken, say).
    pub fn create(config: ChannelConfig) -> Result<Coordinator> {
        config.check()?;
        let layout = config.layout();
        let shm = |source| Error::Shm {
            channel: config.name.clone(),
            source,
        };
        let request =
            Region::create(&config.request_region_name(), layout.request_size()).map_err(shm)?;
        let response =
            Region::create(&config.response_region_name(), layout.response_size()).map_err(shm)?;
        Coordinator::with_regions(config, layout, request, response)
    }

    /// Creates a channel over anonymous regions (sealed memfds) that have no
    /// name at all: workers get them as descriptors, through the handshake
    /// ([`HandshakeServer`](crate::HandshakeServer)) or any other way, and
    /// join with [`Worker::from_fds`](crate::Worker::from_fds).
    ///
    /// # Errors
    /// As [`create`](Coordinator::create).
    pub fn create_anonymous(config: ChannelConfig) -> Result<Coordinator> {
        config.check()?;
        let layout = config.layout();
        let shm = |source| Error::Shm {
            channel: config.name.clone(),
            source,
        };
        let request = Region::anonymous(layout.request_size()).map_err(shm)?;
        let response = Region::anonymous(layout.response_size()).map_err(shm)?;
        // No worker may truncate a region under the others (SIGBUS).
        request.seal_grow_shrink().map_err(shm)?;
        response.seal_grow_shrink().map_err(shm)?;
        Coordinator::with_regions(config, layout, request, response)
    }

    fn with_regions(
        config: ChannelConfig,
        layout: Layout,
        request: Region,
        response: Region,
    ) -> Result<Coordinator> {
        let sems = SemSet::create(&config, &layout, &response)?;
        // Workers check the coordinator by pid and start time: a start time
        // we failed to read would make them take us for dead.
        let me = std::process::id();
        let start_time =
            nodeipc_fdpass::process_start_time(me).map_err(|source| Error::FdPass {
                context: format!("channel {}: reading our own start time", config.name),
                source,
            })?;
        layout.publish(&request, &response, config.sems, me, start_time);
        let workers = (0..config.workers).map(|_| Mutex::new(None)).collect();
        let gatherer = Gatherer {
            next: 0,
            consumed: vec![0; config.workers as usize],
            partial: (0..config.workers).map(|_| None).collect(),
        };
        let largest_slot = layout.response_slot_size.max(layout.init_slot_size);
        Ok(Coordinator {
            shared: Arc::new(Shared {
                config,
                layout,
                request,
                response,
                sems,
                workers,
                gatherer: Mutex::new(gatherer),
                idle: (Mutex::new(()), Condvar::new()),
                thread_idle: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                stale: AtomicBool::new(false),
                sent: AtomicU64::new(0),
                slot_copy: Mutex::new(vec![0; largest_slot]),
            }),
            handler: None,
            thread: None,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ChannelConfig {
        &self.shared.config
    }

    /// The request region's descriptor, to hand to workers.
    pub fn request_fd(&self) -> BorrowedFd<'_> {
        self.shared.request.as_fd()
    }

    /// The response region's descriptor, to hand to workers.
    pub fn response_fd(&self) -> BorrowedFd<'_> {
        self.shared.response.as_fd()
    }

    /// Sizes of the request and response regions, in bytes.
    pub fn region_sizes(&self) -> (usize, usize) {
        (self.shared.request.len(), self.shared.response.len())
    }

    fn check_no_thread(&self) -> Result<()> {
        if self.thread.is_some() {
            return Err(
                self.thread_error("the response thread is running: it gathers every response")
            );
        }
        Ok(())
    }

    fn thread_error(&self, reason: &'static str) -> Error {
        Error::ResponseThread {
            channel: self.shared.config.name.clone(),
            reason,
        }
    }
}

impl Shared {
    fn sem(
        &self,
        direction: Direction,
        role: Role,
        rank: u32,
    ) -> &(dyn nodeipc_sem::Semaphore + Sync) {
        self.sems
            .get(&self.response, &self.layout, direction, role, rank, false)
    }

    fn lock_gatherer(&self) -> MutexGuard<'_, Gatherer> {
        self.gatherer.lock().unwrap_or_else(|e| e.into_inner())
    }
}
