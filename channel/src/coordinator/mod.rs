//! [`Coordinator`]: broadcasts requests to every worker and gathers their
//! responses.
//!
//! The types live here with their private fields, which the parts below
//! see and nothing outside does; each part adds `impl` blocks by concern:
//! - `liveness`: whether a worker is still there, and bounded waits on one;
//! - `gather`: taking responses out of the slots, for any [`Mode`] and any
//!   wait — the one byte-level gather every form calls;
//! - `recv`: the public grid over it (`recv`, `try_recv`, `recv_timeout`
//!   for every mode, raw or typed; `drain` and its forms);
//! - `send`: broadcasting a request into the ring;
//! - `thread`: the response thread, and closing the channel on drop.
//!
//! The parts depend one way only: `recv`, `send` and `thread` on `gather`,
//! all of them on `liveness`; this file on none of them.

mod ahead;
mod answers;
mod gather;
mod liveness;
mod loan;
mod mode_log;
mod raw_thread;
mod recv;
mod send;
mod thread;

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use nodeipc_fdpass::{ForkGeneration, PeerWatch};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};
use nodeipc_sem::ShmSemaphore;
use nodeipc_shm::{Prefetch, Region};

pub use ahead::GatherAhead;
pub use answers::{Answers, Gathered, Picked};
pub use loan::RequestLoan;
pub use raw_thread::Reply;
pub use thread::ThreadPolicy;

use crate::config::ChannelConfig;
use crate::layout::Layout;
use crate::payload::Payload;
use crate::sem_kind::{Direction, Role, SemKind};
use crate::sems::SemSet;
use crate::wait::Budget;
use crate::{Error, Result};

use crate::mode::Mode;
#[cfg(doc)]
use crate::mode::{Aggregated, All, First};
use ahead::Ahead;

/// Called by the response thread with each aggregated response, or with the
/// error that ended its gather (or, under [`ThreadPolicy::LogAndContinue`],
/// with every error); for a [`Raw`](crate::Raw) coordinator, with a
/// [`Reply`] per request.
pub type ResponseHandler<Resp = ExecuteResponse> = Box<<Resp as Payload>::Handler>;

/// What a response must be before a gather hands it out: for the execute
/// schema, a known message type and a zero status; for any other, nothing.
pub(crate) type Check<Resp> = fn(&str, u32, Resp) -> Result<Resp>;

/// The coordinator's end of an execute channel, made by a
/// [`ChannelBuilder`](crate::ChannelBuilder).
///
/// [`send`](Coordinator::send) waits until every worker has room (its
/// request-produce semaphore), writes the request straight into the next
/// frame of the request ring — no allocation — and posts every worker's
/// request-consume semaphore. With `depth = k` the coordinator may run `k`
/// requests ahead of the slowest worker. Responses come back one slot per
/// worker and are gathered in a mode ([`All`], [`First`], [`Aggregated`],
/// …) by [`recv`](Coordinator::recv), [`try_recv`](Coordinator::try_recv)
/// (never waits) or [`recv_timeout`](Coordinator::recv_timeout), or handed
/// to a handler on a thread of their own.
///
/// `Req` and `Resp` are any protobuf messages (our `execute.proto` by
/// default), or [`Raw`](crate::Raw) for frames of bytes of any encoding: the
/// calls have the same names, and what they take and return follows from
/// the type (`send(&Req)` or `send(&[u8])`; a `Vec<Resp>` or a
/// [`Gathered`] view of the bytes).
///
/// Threads: the coordinator is `Sync`, and its sends and gathers take
/// `&self`, so one thread may send while another gathers (as the response
/// thread does). A second thread sending, or a second thread gathering, at
/// the same time is refused with [`Error::Busy`] naming the rule; nothing
/// is sent or taken then.
///
/// Nothing waits forever: every call is bounded by the configured timeout
/// or the one it is given (`send_timeout`, `recv_timeout`), and a worker
/// whose process died is reported as [`Error::WorkerDied`] within a fraction
/// of a second. A timeout breaks nothing: the next call resumes where the
/// one that timed out stopped.
pub struct Coordinator<Req = ExecuteRequest, Resp = ExecuteResponse>
where
    Resp: Payload,
{
    shared: Arc<Shared>,
    /// Reached only through `&mut self` (`get_mut`, never locked): in a
    /// mutex so that the coordinator is `Sync` for its `&self` calls.
    handler: Mutex<Option<ResponseHandler<Resp>>>,
    /// The channel's rule for [`Aggregated`] gathers: set through `&mut
    /// self`, locked (never contended) by the one gathering thread.
    rule: Mutex<Option<Box<Resp::Rule>>>,
    check: Check<Resp>,
    thread: Option<ResponseThread<Resp>>,
    _request: PhantomData<fn(&Req)>,
}

// One sending and one gathering thread share a coordinator: it must stay
// `Sync` (and `Send`), whatever field is added.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Coordinator>();
    assert_send_sync::<Coordinator<crate::Raw, crate::Raw>>();
};

struct ResponseThread<Resp: Payload> {
    /// Gives back the handler and the rule it took, for a later start.
    #[allow(clippy::type_complexity)]
    handle: JoinHandle<(ResponseHandler<Resp>, Option<Box<Resp::Rule>>)>,
}

/// What the sending side and the response thread share.
struct Shared {
    config: ChannelConfig,
    layout: Layout,
    request: Region,
    response: Region,
    sems: SemSet,
    /// A watch on each worker's process (fdpass's one liveness policy),
    /// keeping the pidfd of the process it last saw in the worker's entry.
    workers: Vec<Mutex<PeerWatch>>,
    gatherer: Mutex<Gatherer>,
    /// Where an idle response thread waits for a send or a stop.
    idle: thread::Idle,
    stop: AtomicBool,
    /// Set while the response thread runs with more busy threads (the
    /// sender, the response thread, one per worker) than this process has
    /// cores: the coordinator's waits then poll briefly and yield their
    /// core, which the thread that will post may need.
    crowded: AtomicBool,
    /// Set while a [`First`] gather has left answers of slower workers
    /// unconsumed: `send` must then drain them while it waits, or a slow
    /// worker blocked on its full slot could never free a request frame.
    stale: AtomicBool,
    /// Set while a thread is sending: a second sending thread is refused.
    sending: AtomicBool,
    /// Set while a thread is gathering: a second gathering thread is refused.
    gathering: AtomicBool,
    /// While a [`Raw`](crate::Raw) coordinator's response thread runs, the
    /// mode each request was sent for.
    modes: mode_log::ModeLog,
    /// Whether sends record their mode in `modes` (the raw thread runs).
    recording: AtomicBool,
    /// The mode a request is recorded for when it is sent (`Mode`'s number).
    response_mode: AtomicU8,
    /// `Gatherer::next` (the request the next gather answers), written
    /// with the gatherer locked, read without the lock by the response
    /// thread's look for work and by the sender's choice of how to wait.
    next_gather: AtomicU64,
    /// Requests sent. The request header holds a copy for the workers, but
    /// any process mapping the region can write that one: what the
    /// coordinator sends next and gathers is decided by this count alone.
    sent: AtomicU64,
    /// The process that made the channel (and its response thread).
    born: ForkGeneration,
    /// Whether a send waiting for a frame gathers answers ahead for the
    /// response thread (set while the thread runs, as `GatherAhead` says).
    helping: AtomicBool,
    /// The coordinator's choice of when sends gather ahead.
    gather_ahead: AtomicU8,
    /// `Gatherer::ahead`'s length, written with the gatherer locked, read
    /// without the lock by the response thread's look for work.
    ahead_len: AtomicUsize,
    /// How many requests may be gathered ahead.
    ahead_cap: usize,
    /// How many times a send gathering ahead polls for a free frame (set
    /// when the response thread starts).
    ahead_polls: AtomicU32,
}

/// Where gathering stands: which request the next gather answers, how many
/// responses each worker's slot has given up, and what a gather (perhaps
/// interrupted half-way) has taken from each worker's slot for it.
struct Gatherer {
    next: u64,
    consumed: Vec<u64>,
    /// Per worker: `None` until its answer to request `next` is taken;
    /// then `Ok` (the frame's bytes are in `frames`) or why it is unusable.
    taken: Vec<Option<Result<()>>>,
    /// Per worker, the body of the last frame copied out of its slot: the
    /// coordinator's own memory, which no worker can change, reused from
    /// one gather to the next.
    frames: Vec<Vec<u8>>,
    /// Requests the sending thread gathered for the response thread
    /// (`Shared::gather_ahead`), oldest first: handed out before anything
    /// is taken from the slots.
    ahead: VecDeque<Ahead>,
    /// Frame buffers of requests handed out from `ahead`, reused.
    spare: Vec<Vec<Vec<u8>>>,
}

impl<Req: Payload, Resp: Payload> Coordinator<Req, Resp> {
    /// Makes the channel `config` describes, over named regions (workers
    /// join by name) or anonymous ones (sealed memfds: workers get them as
    /// descriptors); what [`ChannelBuilder::create`](crate::ChannelBuilder::create)
    /// does.
    pub(crate) fn create(config: ChannelConfig, anonymous: bool) -> Result<Coordinator<Req, Resp>> {
        config.check()?;
        let layout = config.layout();
        let shm = |source| Error::Shm {
            channel: config.name.clone(),
            source,
        };
        let (request, response) = if anonymous {
            let request = Region::anonymous(layout.request_size()).map_err(shm)?;
            let response = Region::anonymous(layout.response_size()).map_err(shm)?;
            // No worker may truncate a region under the others (SIGBUS).
            request.seal_grow_shrink().map_err(shm)?;
            response.seal_grow_shrink().map_err(shm)?;
            (request, response)
        } else {
            let request = Region::create(&config.request_region_name(), layout.request_size())
                .map_err(shm)?;
            let response = Region::create(&config.response_region_name(), layout.response_size())
                .map_err(shm)?;
            (request, response)
        };
        Coordinator::with_regions(config, layout, request, response)
    }

    fn with_regions(
        config: ChannelConfig,
        layout: Layout,
        request: Region,
        response: Region,
    ) -> Result<Coordinator<Req, Resp>> {
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
        let workers = (0..config.workers)
            .map(|_| Mutex::new(PeerWatch::new()))
            .collect();
        let depth = config.depth;
        let gatherer = Gatherer {
            next: 0,
            consumed: vec![0; config.workers as usize],
            taken: (0..config.workers).map(|_| None).collect(),
            frames: (0..config.workers).map(|_| Vec::new()).collect(),
            ahead: VecDeque::new(),
            spare: Vec::new(),
        };
        let ahead_cap = ahead::cap(&layout, config.workers);
        Ok(Coordinator {
            shared: Arc::new(Shared {
                config,
                layout,
                request,
                response,
                sems,
                workers,
                gatherer: Mutex::new(gatherer),
                idle: thread::Idle::default(),
                stop: AtomicBool::new(false),
                crowded: AtomicBool::new(false),
                stale: AtomicBool::new(false),
                sending: AtomicBool::new(false),
                gathering: AtomicBool::new(false),
                modes: mode_log::ModeLog::new(depth),
                recording: AtomicBool::new(false),
                response_mode: AtomicU8::new(Mode::Aggregated as u8),
                next_gather: AtomicU64::new(0),
                sent: AtomicU64::new(0),
                born: ForkGeneration::current(),
                helping: AtomicBool::new(false),
                gather_ahead: AtomicU8::new(GatherAhead::WhenCrowded as u8),
                ahead_len: AtomicUsize::new(0),
                ahead_cap,
                ahead_polls: AtomicU32::new(0),
            }),
            handler: Mutex::new(None),
            rule: Mutex::new(None),
            check: |_, _, response| Ok(response),
            thread: None,
            _request: PhantomData,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ChannelConfig {
        &self.shared.config
    }

    /// The request region's descriptor (read-write: the coordinator's own).
    /// Hand workers [`request_fd_read_only`](Coordinator::request_fd_read_only)
    /// instead.
    pub fn request_fd(&self) -> BorrowedFd<'_> {
        self.shared.request.as_fd()
    }

    /// A read-only descriptor of the request region, for a worker: it can
    /// map the ring only `PROT_READ`, so a request it reads in place cannot
    /// be changed by it, nor another worker's view of it.
    ///
    /// # Errors
    /// [`Error::Shm`] if the descriptor cannot be reopened.
    pub fn request_fd_read_only(&self) -> Result<OwnedFd> {
        self.shared
            .request
            .reopen_read_only()
            .map_err(|source| Error::Shm {
                channel: self.shared.config.name.clone(),
                source,
            })
    }

    /// The response region's descriptor, to hand to workers.
    pub fn response_fd(&self) -> BorrowedFd<'_> {
        self.shared.response.as_fd()
    }

    /// Sizes of the request and response regions, in bytes.
    pub fn region_sizes(&self) -> (usize, usize) {
        (self.shared.request.len(), self.shared.response.len())
    }

    /// Never locks: `&mut self` is the only access (see the field).
    fn handler_mut(&mut self) -> &mut Option<ResponseHandler<Resp>> {
        self.handler
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Never locks: `&mut self` is the only access.
    fn rule_mut(&mut self) -> &mut Option<Box<Resp::Rule>> {
        self.rule.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// The channel's rule, for the gathering thread (whose turn makes the
    /// lock uncontended: only `&mut self` calls take it otherwise).
    fn lock_rule(&self) -> MutexGuard<'_, Option<Box<Resp::Rule>>> {
        self.rule.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// With `check` for every response a typed gather decodes, and `rule`
    /// as the channel's aggregation rule.
    pub(crate) fn with_rules(mut self, check: Check<Resp>, rule: Option<Box<Resp::Rule>>) -> Self {
        self.check = check;
        *self.rule_mut() = rule;
        self
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

    /// The budget of a call that has no timeout of its own.
    fn default_budget(&self) -> Budget {
        Budget::new(self.shared.config.timeout)
    }
}

impl Coordinator<ExecuteRequest, ExecuteResponse> {
    /// The execute schema's rules: a response with a non-zero status or an
    /// unknown message type is refused, and aggregation is the pull-KV rule.
    pub(crate) fn execute_rules(self) -> Self {
        self.with_rules(
            crate::aggregate::validate,
            Some(Box::new(crate::aggregate::PullKvRule)),
        )
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

    /// Asks for worker `rank`'s `(direction, role)` semaphore line, owned,
    /// ahead of a post to it: the post's wait for the line (the worker
    /// took or polled it last) then overlaps the frame or slot work done
    /// before the post. In-region semaphores only: a named one lives in a
    /// mapping of its own.
    fn prefetch_semaphore(&self, direction: Direction, role: Role, rank: u32) {
        if self.config.sems == SemKind::InRegion {
            let at = self.layout.semaphore(direction, role, rank);
            self.response
                .prefetch(at, ShmSemaphore::SIZE, Prefetch::Write);
        }
    }

    /// [`prefetch_semaphore`](Shared::prefetch_semaphore) for every worker.
    fn prefetch_semaphores(&self, direction: Direction, role: Role) {
        for rank in 0..self.config.workers {
            self.prefetch_semaphore(direction, role, rank);
        }
    }

    fn lock_gatherer(&self) -> MutexGuard<'_, Gatherer> {
        self.gatherer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This thread's turn to `op` as the sending or the gathering thread,
    /// or [`Error::Busy`] while another thread has it: a coordinator takes
    /// one sending and one gathering thread at a time.
    fn turn(&self, role: Turn, op: &'static str) -> Result<TurnGuard<'_>> {
        let (flag, busy) = match role {
            Turn::Send => (&self.sending, "sending"),
            Turn::Gather => (&self.gathering, "gathering"),
        };
        if flag.swap(true, Ordering::Acquire) {
            return Err(Error::Busy {
                channel: self.config.name.clone(),
                op,
                busy,
                rule: "a coordinator takes one sending and one gathering thread at a time",
            });
        }
        Ok(TurnGuard(flag))
    }
}

/// The two roles a thread may take on a coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    Send,
    Gather,
}

/// A thread's turn as sender or gatherer, given back on drop.
struct TurnGuard<'a>(&'a AtomicBool);

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
