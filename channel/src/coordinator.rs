//! [`Coordinator`]: broadcasts requests to every worker and gathers their
//! responses.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use nodeipc_fdpass::{Pidfd, open_verified};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};
use nodeipc_shm::Region;
use prost::Message;

use crate::aggregate::{aggregate, validate};
use crate::config::{ChannelConfig, Direction, Role};
use crate::layout::{self, Layout, worker_flags};
use crate::sems::SemSet;
use crate::wait::{self, Poll};
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

/// Who waits on a worker: the response thread also stops waiting when
/// asked to stop.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Waiter {
    Caller,
    ResponseThread,
}

/// What the sending side and the response thread share.
pub(crate) struct Shared {
    pub(crate) config: ChannelConfig,
    pub(crate) layout: Layout,
    pub(crate) request: Region,
    pub(crate) response: Region,
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

/// Which response slots a gather reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Response,
    Init,
}

impl Slot {
    fn name(self) -> &'static str {
        match self {
            Slot::Response => "response slot",
            Slot::Init => "init slot",
        }
    }
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
        let layout = Layout::of(&config);
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
        let layout = Layout::of(&config);
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

    /// Waits (bounded) until every worker has joined, then removes every name
    /// the channel had: from here on a crash of any process leaves nothing.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming how many joined; [`Error::WorkerDied`].
    pub fn wait_for_workers(&self, timeout: Duration) -> Result<()> {
        let mut poll = Poll::new(Duration::from_micros(50), Duration::from_millis(5), timeout);
        loop {
            let mut joined = 0;
            for rank in 0..self.shared.config.workers {
                if self.shared.joined(rank) {
                    self.shared.check_worker(rank)?;
                    joined += 1;
                }
            }
            if joined == self.shared.config.workers {
                break;
            }
            poll.pause(&self.shared.config.name, || {
                format!(
                    "waiting for workers to join ({joined} of {} did)",
                    self.shared.config.workers
                )
            })?;
        }
        let _ = self.shared.request.unlink_now();
        let _ = self.shared.response.unlink_now();
        self.shared.sems.unlink_names();
        Ok(())
    }

    /// Broadcasts `request` to every worker; returns its index (0, 1, …).
    ///
    /// Waits for every worker's request-produce semaphore (room in the
    /// ring), encodes the request into the ring frame, posts every worker's
    /// request-consume semaphore. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is waited for or written;
    /// [`Error::WorkerDied`], [`Error::WorkerLeft`], [`Error::Timeout`].
    pub fn send(&mut self, request: &ExecuteRequest) -> Result<u64> {
        let shared = &*self.shared;
        let capacity = shared.layout.request_capacity;
        let size = request.encoded_len() + nodeipc_proto::LEN_PREFIX;
        if size > capacity {
            return Err(Error::TooLarge {
                channel: shared.config.name.clone(),
                slot: "request frame",
                size,
                max: capacity,
            });
        }
        let header = layout::request_header(&shared.request);
        let index = shared.sent.load(Ordering::Relaxed);
        for rank in 0..shared.config.workers {
            let freed = if shared.stale.load(Ordering::Acquire) {
                shared.wait_frame_draining(rank)
            } else {
                shared.wait_worker(Direction::Request, Role::Produce, rank)
            };
            if let Err(e) = freed {
                // Nothing is written: give back the frames already taken from
                // the workers before this one, or they would stay taken and
                // every later send would wait on them in vain.
                for earlier in 0..rank {
                    let _ = shared
                        .sem(Direction::Request, Role::Produce, earlier)
                        .post();
                }
                return Err(e);
            }
        }
        let frame = shared.layout.frame(index);
        // SAFETY: every worker's produce semaphore was taken for this frame,
        // so by the channel's protocol no process reads or writes it until
        // the consume semaphores below are posted.
        let out =
            unsafe { shared.request.bytes_mut(frame, capacity) }.map_err(|source| Error::Shm {
                channel: shared.config.name.clone(),
                source,
            })?;
        nodeipc_proto::encode_frame(request, out).map_err(|source| Error::Proto {
            context: format!("channel {}", shared.config.name),
            source,
        })?;
        // Ours first, then the workers' copy in the header (which a hostile
        // worker may overwrite; nothing of ours is computed from it).
        shared.sent.store(index.wrapping_add(1), Ordering::SeqCst);
        header.sent.store(index.wrapping_add(1), Ordering::SeqCst);
        for rank in 0..shared.config.workers {
            shared
                .sem(Direction::Request, Role::Consume, rank)
                .post()
                .map_err(|source| Error::Sem {
                    channel: shared.config.name.clone(),
                    source,
                })?;
        }
        if shared.thread_idle.load(Ordering::SeqCst) {
            let _guard = shared.idle.0.lock().unwrap_or_else(|e| e.into_inner());
            shared.idle.1.notify_all();
        }
        Ok(index)
    }

    /// Every worker's response to the oldest request not yet gathered, in
    /// rank order.
    ///
    /// # Errors
    /// The first of: [`Error::WorkerFailed`] (non-zero status),
    /// [`Error::UnknownMessageType`], [`Error::Corrupt`], [`Error::Decode`]
    /// — every worker's slot is still consumed, so the channel stays in step;
    /// or [`Error::WorkerDied`], [`Error::Timeout`],
    /// [`Error::NothingOutstanding`].
    pub fn recv_all(&mut self) -> Result<Vec<ExecuteResponse>> {
        self.gather(Slot::Response)?.into_iter().collect()
    }

    /// One response for the oldest request not yet gathered: the first whose
    /// pull-KV results carry a code other than success, else rank 0's.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all).
    pub fn recv_all_aggregated(&mut self) -> Result<ExecuteResponse> {
        aggregate(self.recv_all()?)
    }

    /// Every worker's init response (from its fixed-size init slot), in rank order.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all).
    pub fn recv_init(&mut self) -> Result<Vec<ExecuteResponse>> {
        self.gather(Slot::Init)?.into_iter().collect()
    }

    /// The first response to arrive for the oldest request not yet gathered,
    /// with the rank that sent it. The other workers' responses to it are
    /// consumed (and dropped) by the next gather.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all), for the response returned.
    pub fn recv_first(&mut self) -> Result<(u32, ExecuteResponse)> {
        self.check_no_thread()?;
        let shared = Arc::clone(&self.shared);
        let mut gatherer = shared.lock_gatherer();
        let n = gatherer.next;
        shared.check_outstanding(n)?;
        // A gather interrupted half-way may already hold an answer.
        if let Some(rank) = gatherer
            .partial
            .iter()
            .position(|p| matches!(p, Some(Ok(_))))
        {
            let response = gatherer.partial[rank].take().expect("just found")?;
            gatherer.partial.iter_mut().for_each(|p| *p = None);
            gatherer.next += 1;
            return Ok((rank as u32, response));
        }
        let mut poll = Poll::new(
            Duration::from_micros(5),
            Duration::from_millis(1),
            shared.config.timeout,
        );
        loop {
            for rank in 0..shared.config.workers {
                let r = rank as usize;
                while gatherer.consumed[r] < n {
                    match shared.try_consume(rank, Slot::Response)? {
                        Some(_) => gatherer.consumed[r] += 1,
                        None => break,
                    }
                }
                if gatherer.consumed[r] == n
                    && let Some(response) = shared.try_consume(rank, Slot::Response)?
                {
                    gatherer.consumed[r] += 1;
                    gatherer.next += 1;
                    let next = gatherer.next;
                    let behind = gatherer.consumed.iter().any(|&c| c < next);
                    shared.stale.store(behind, Ordering::Release);
                    return response.map(|response| (rank, response));
                }
            }
            for rank in 0..shared.config.workers {
                shared.check_worker(rank)?;
            }
            poll.pause(&shared.config.name, || {
                format!("waiting for any worker's response to request {n}")
            })?;
        }
    }

    /// Consumes (and drops) every answer [`recv_first`](Coordinator::recv_first)
    /// left behind, waiting for the slower workers to give them; returns how
    /// many. Call it before closing the channel after `recv_first`, so every
    /// worker can finish its last answer.
    ///
    /// # Errors
    /// [`Error::WorkerDied`], [`Error::Timeout`].
    pub fn drain(&mut self) -> Result<u64> {
        self.check_no_thread()?;
        let shared = &*self.shared;
        let mut gatherer = shared.lock_gatherer();
        let next = gatherer.next;
        let mut drained = 0;
        for rank in 0..shared.config.workers {
            while gatherer.consumed[rank as usize] < next {
                let _ = shared.consume(Waiter::Caller, rank, Slot::Response)?;
                gatherer.consumed[rank as usize] += 1;
                drained += 1;
            }
        }
        shared.stale.store(false, Ordering::Release);
        Ok(drained)
    }

    fn gather(&mut self, slot: Slot) -> Result<Vec<Result<ExecuteResponse>>> {
        self.check_no_thread()?;
        self.shared.gather(Waiter::Caller, slot)
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

    /// Registers the handler the response thread calls with every aggregated
    /// response (or the error that ended a gather).
    ///
    /// # Errors
    /// [`Error::ResponseThread`] if one is registered already.
    pub fn on_response(
        &mut self,
        handler: impl FnMut(Result<ExecuteResponse>) + Send + 'static,
    ) -> Result<()> {
        if self.handler.is_some() || self.thread.is_some() {
            return Err(self.thread_error("a response handler is registered already"));
        }
        self.handler = Some(Box::new(handler));
        Ok(())
    }

    /// Starts a thread that gathers every response ([`recv_all_aggregated`](Coordinator::recv_all_aggregated)
    /// for each request sent) and calls the handler with it. The thread ends
    /// by itself after an error that breaks the channel (a dead worker, a
    /// timeout); after an error of one response it goes on.
    ///
    /// # Errors
    /// [`Error::ResponseThread`] without a handler or when already running;
    /// [`Error::Io`] if the thread cannot be spawned.
    pub fn start_response_thread(&mut self) -> Result<()> {
        if self.thread.is_some() {
            return Err(self.thread_error("the response thread is running already"));
        }
        let Some(handler) = self.handler.take() else {
            return Err(
                self.thread_error("no response handler is registered (call on_response first)")
            );
        };
        self.shared.stop.store(false, Ordering::SeqCst);
        let shared = Arc::clone(&self.shared);
        let handle = thread::Builder::new()
            .name(format!("nodeipc-responses {}", self.shared.config.name))
            .spawn(move || shared.response_loop(handler))
            .map_err(|source| Error::Io {
                context: format!("channel {}", self.shared.config.name),
                op: "spawn response thread",
                source,
            })?;
        self.thread = Some(ResponseThread { handle });
        Ok(())
    }

    /// Stops the response thread and waits for it (within one wait slice);
    /// the handler stays registered for a later start.
    ///
    /// # Errors
    /// [`Error::ResponseThread`] if it is not running.
    pub fn stop_response_thread(&mut self) -> Result<()> {
        let Some(thread) = self.thread.take() else {
            return Err(self.thread_error("the response thread is not running"));
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.idle.0.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.idle.1.notify_all();
        }
        match thread.handle.join() {
            Ok(handler) => {
                self.handler = Some(handler);
                Ok(())
            }
            Err(_) => Err(self.thread_error("the response handler panicked")),
        }
    }

    /// Whether the response thread is running (it ends by itself after an
    /// error that breaks the channel).
    pub fn response_thread_running(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|t| !t.handle.is_finished())
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop_response_thread();
        }
        // Wake every worker waiting for a request: they see the channel closed.
        layout::request_header(&self.shared.request)
            .closed
            .store(1, Ordering::SeqCst);
        for rank in 0..self.shared.config.workers {
            let _ = self
                .shared
                .sem(Direction::Request, Role::Consume, rank)
                .post();
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

    fn joined(&self, rank: u32) -> bool {
        self.layout
            .worker(&self.response, rank)
            .flags
            .load(Ordering::Acquire)
            & worker_flags::JOINED
            != 0
    }

    fn check_outstanding(&self, n: u64) -> Result<()> {
        if n >= self.sent.load(Ordering::Acquire) {
            return Err(Error::NothingOutstanding {
                channel: self.config.name.clone(),
            });
        }
        Ok(())
    }

    /// Whether worker `rank` is still there: once it has registered, its
    /// process alive. A worker that left cleanly may come back (a reconnect)
    /// while its process lives; once that process is gone too, it has left.
    fn check_worker(&self, rank: u32) -> Result<()> {
        let entry = self.layout.worker(&self.response, rank);
        let flags = entry.flags.load(Ordering::Acquire);
        if flags & worker_flags::JOINED == 0 || flags & worker_flags::CLAIMING != 0 {
            return Ok(());
        }
        let pid = entry.pid.load(Ordering::Relaxed);
        let died = || Error::WorkerDied {
            channel: self.config.name.clone(),
            rank,
            pid,
        };
        let mut cached = self.workers[rank as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if cached
            .as_ref()
            .is_none_or(|(cached_pid, _)| *cached_pid != pid)
        {
            // Only the kernel saying the process is gone (or a later start
            // time) is a death; failing to look (EMFILE, say) is reported as
            // itself.
            let pidfd = open_verified(pid, entry.start_time.load(Ordering::Relaxed)).map_err(
                |e| match e {
                    nodeipc_fdpass::Error::ProcessGone { .. } => died(),
                    source => self.fdpass(rank, source),
                },
            )?;
            *cached = Some((pid, pidfd));
        }
        let (_, pidfd) = cached.as_ref().expect("just filled");
        if pidfd.has_exited().map_err(|e| self.fdpass(rank, e))? {
            if flags & worker_flags::LEFT != 0 {
                return Err(Error::WorkerLeft {
                    channel: self.config.name.clone(),
                    rank,
                });
            }
            return Err(died());
        }
        Ok(())
    }

    /// A failure to look at worker `rank`'s process, named as such.
    fn fdpass(&self, rank: u32, source: nodeipc_fdpass::Error) -> Error {
        Error::FdPass {
            context: format!(
                "channel {}: checking whether worker {rank} lives",
                self.config.name
            ),
            source,
        }
    }

    fn wait_worker(&self, direction: Direction, role: Role, rank: u32) -> Result<()> {
        self.wait_worker_as(Waiter::Caller, direction, role, rank)
    }

    /// [`wait_worker`](Shared::wait_worker) for `waiter`: the response thread
    /// also gives up (within a wait slice) once it is asked to stop.
    fn wait_worker_as(
        &self,
        waiter: Waiter,
        direction: Direction,
        role: Role,
        rank: u32,
    ) -> Result<()> {
        let what = || match direction {
            Direction::Request => format!("waiting for worker {rank} to free a request frame"),
            Direction::Response => format!("waiting for worker {rank}'s response"),
        };
        wait::wait(
            self.sem(direction, role, rank),
            self.config.timeout,
            &self.config.name,
            what,
            || {
                if waiter == Waiter::ResponseThread && self.stop.load(Ordering::SeqCst) {
                    return Err(Error::ResponseThread {
                        channel: self.config.name.clone(),
                        reason: "the response thread was asked to stop",
                    });
                }
                self.check_worker(rank)
            },
        )
    }

    /// Waits for a free request frame of worker `rank` while consuming (and
    /// dropping) the answers it gave to requests already gathered by
    /// `recv_first`: the worker may be blocked on its full slot until then.
    fn wait_frame_draining(&self, rank: u32) -> Result<()> {
        let produce = self.sem(Direction::Request, Role::Produce, rank);
        let mut poll = Poll::new(
            Duration::from_micros(5),
            Duration::from_millis(1),
            self.config.timeout,
        );
        loop {
            if produce.try_wait().map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })? {
                return Ok(());
            }
            {
                let mut gatherer = self.lock_gatherer();
                let (next, r) = (gatherer.next, rank as usize);
                while gatherer.consumed[r] < next {
                    match self.try_consume(rank, Slot::Response)? {
                        Some(_) => gatherer.consumed[r] += 1,
                        None => break,
                    }
                }
                let behind = gatherer.consumed.iter().any(|&c| c < next);
                self.stale.store(behind, Ordering::Release);
                if !behind {
                    drop(gatherer);
                    return self.wait_worker(Direction::Request, Role::Produce, rank);
                }
            }
            self.check_worker(rank)?;
            poll.pause(&self.config.name, || {
                format!("waiting for worker {rank} to free a request frame")
            })?;
        }
    }

    /// Takes worker `rank`'s next response from `slot`, waiting for it. The
    /// outer result is the wait (a dead worker, a timeout); the inner one
    /// the response's own validity.
    fn consume(&self, waiter: Waiter, rank: u32, slot: Slot) -> Result<Result<ExecuteResponse>> {
        self.wait_worker_as(waiter, Direction::Response, Role::Consume, rank)?;
        Ok(self.read_and_release(rank, slot))
    }

    /// [`consume`](Shared::consume) without waiting: `None` if no response is there yet.
    fn try_consume(&self, rank: u32, slot: Slot) -> Result<Option<Result<ExecuteResponse>>> {
        let taken = self
            .sem(Direction::Response, Role::Consume, rank)
            .try_wait()
            .map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })?;
        Ok(taken.then(|| self.read_and_release(rank, slot)))
    }

    /// Decodes worker `rank`'s slot in place, then gives the slot back.
    fn read_and_release(&self, rank: u32, slot: Slot) -> Result<ExecuteResponse> {
        let (at, size) = match slot {
            Slot::Response => (
                self.layout.response_slot(rank),
                self.layout.response_slot_size,
            ),
            Slot::Init => (self.layout.init_slot(rank), self.layout.init_slot_size),
        };
        let decoded = self.copy_out(rank, slot, at, size);
        let released = self.sem(Direction::Response, Role::Produce, rank).post();
        let response = decoded?;
        released.map_err(|source| Error::Sem {
            channel: self.config.name.clone(),
            source,
        })?;
        validate(&self.config.name, rank, response)
    }

    /// Copies worker `rank`'s answer out of its slot into the coordinator's
    /// own buffer and decodes it there.
    ///
    /// The slot is the worker's to write and ours to read only while we hold
    /// its response-consume count, but a broken or hostile worker may write
    /// it at any moment: so no reference to the slot's bytes is ever made.
    /// The length prefix is copied and checked against the slot first, then
    /// just the frame; both copies land in a buffer sized once for the
    /// largest slot, so nothing is allocated here.
    fn copy_out(&self, rank: u32, slot: Slot, at: usize, size: usize) -> Result<ExecuteResponse> {
        let shm = |source| Error::Shm {
            channel: self.config.name.clone(),
            source,
        };
        let mut buffer = self.slot_copy.lock().unwrap_or_else(|e| e.into_inner());
        let prefix = nodeipc_proto::LEN_PREFIX;
        self.response
            .read_at(at, &mut buffer[..prefix])
            .map_err(shm)?;
        let len = match nodeipc_proto::frame_len(&buffer[..prefix], size) {
            // Only the prefix is in the buffer yet: "truncated" is the
            // frame it announces, which fits the slot; copy that much.
            Ok(len) | Err(nodeipc_proto::Error::Truncated { need: len, .. }) => len,
            Err(e) => return Err(slot_error(&self.config.name, rank, slot, size, e)),
        };
        self.response.read_at(at, &mut buffer[..len]).map_err(shm)?;
        nodeipc_proto::decode_frame::<ExecuteResponse>(&buffer[..len], size)
            .map_err(|e| slot_error(&self.config.name, rank, slot, size, e))
    }

    /// Every worker's response to the next request. Interrupted (by a stop
    /// of the response thread, a dead worker, a timeout), it keeps what it
    /// gathered: the next gather goes on from there.
    fn gather(&self, waiter: Waiter, slot: Slot) -> Result<Vec<Result<ExecuteResponse>>> {
        let mut gatherer = self.lock_gatherer();
        let n = gatherer.next;
        self.check_outstanding(n)?;
        for rank in 0..self.config.workers {
            let r = rank as usize;
            if gatherer.partial[r].is_some() {
                continue;
            }
            while gatherer.consumed[r] < n {
                // A response recv_first did not need: consume and drop it.
                let _ = self.consume(waiter, rank, Slot::Response)?;
                gatherer.consumed[r] += 1;
            }
            let response = self.consume(waiter, rank, slot)?;
            gatherer.consumed[r] += 1;
            gatherer.partial[r] = Some(response);
        }
        gatherer.next += 1;
        // Every worker's slot is consumed up to this request now.
        self.stale.store(false, Ordering::Release);
        Ok(gatherer
            .partial
            .iter_mut()
            .map(|p| p.take().expect("every rank gathered"))
            .collect())
    }

    fn response_loop(self: Arc<Self>, mut handler: ResponseHandler) -> ResponseHandler {
        while !self.stop.load(Ordering::SeqCst) {
            let next = self.lock_gatherer().next;
            if next >= self.sent.load(Ordering::SeqCst) {
                self.wait_idle(next);
                continue;
            }
            match self.gather(Waiter::ResponseThread, Slot::Response) {
                Ok(responses) => {
                    let all: Result<Vec<_>> = responses.into_iter().collect();
                    handler(all.and_then(aggregate));
                }
                // Asked to stop mid-gather: what was gathered stays for the
                // next gather, and the handler hears nothing.
                Err(_) if self.stop.load(Ordering::SeqCst) => break,
                Err(e) => {
                    handler(Err(e));
                    break;
                }
            }
        }
        handler
    }

    /// Sleeps until a request is sent after gather `next`, or a stop.
    fn wait_idle(&self, next: u64) {
        let guard = self.idle.0.lock().unwrap_or_else(|e| e.into_inner());
        self.thread_idle.store(true, Ordering::SeqCst);
        if self.sent.load(Ordering::SeqCst) <= next && !self.stop.load(Ordering::SeqCst) {
            let _ = self.idle.1.wait_timeout(guard, wait::SLICE);
        }
        self.thread_idle.store(false, Ordering::SeqCst);
    }
}

/// A slot's frame that could not be decoded, as the channel's error.
fn slot_error(
    channel: &str,
    rank: u32,
    slot: Slot,
    size: usize,
    error: nodeipc_proto::Error,
) -> Error {
    match error {
        nodeipc_proto::Error::TooLarge { size: len, .. }
        | nodeipc_proto::Error::Truncated { need: len, .. } => Error::Corrupt {
            channel: channel.to_owned(),
            rank,
            slot: slot.name(),
            len: len as u64,
            slot_size: size,
        },
        nodeipc_proto::Error::Decode(source) => Error::Decode {
            channel: channel.to_owned(),
            rank,
            slot: slot.name(),
            source,
        },
        source => Error::Proto {
            context: format!("channel {channel}"),
            source,
        },
    }
}
