//! [`Worker`]: one worker process's end of an execute channel.

mod in_place;
mod recv;
mod respond;

use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_fdpass::{ForkGeneration, Pidfd, open_if_alive, process_start_time};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};
use nodeipc_sem::Spin;
use nodeipc_shm::{OpenOptions, Region};
use prost::bytes::BytesMut;

pub use in_place::InPlace;
pub(crate) use respond::SlotKind;

use crate::config::ChannelConfig;
use crate::layout::{self, Layout, worker_flags};
use crate::payload::Payload;
use crate::sem_kind::{Direction, Role};
use crate::sems::SemSet;
use crate::wait::Budget;
use crate::{Error, Result, wait};

/// A worker's end of an execute channel: receives every request the
/// coordinator broadcasts, answers each in its own response slot.
///
/// The request ring is mapped read-only here: a worker cannot change a
/// request, so [`recv_in_place`](Worker::recv_in_place) can hand out the
/// frame's bytes without a copy for as long as its guard lives.
///
/// `Req` and `Resp` are the channel's messages: our `execute.proto` by
/// default, any protobuf messages, or [`Raw`](crate::Raw) frames of bytes
/// of any encoding. The calls have the same names either way
/// (`recv`, `try_recv`, `recv_timeout`, `recv_into`, `recv_in_place` and
/// its `try_` and `_timeout` forms, `respond`, `respond_init`); what they
/// take and return follows from the type.
///
/// Every wait is bounded by the configured timeout or the one a call is
/// given; a coordinator whose process died is reported as
/// [`Error::CoordinatorDied`], one that closed the channel as
/// [`Error::Closed`].
pub struct Worker<Req = ExecuteRequest, Resp = ExecuteResponse> {
    config: ChannelConfig,
    layout: Layout,
    rank: u32,
    request: Region,
    response: Region,
    sems: SemSet,
    coordinator: Pidfd,
    received: u64,
    /// Answers announced so far: the next goes to slot `answered % depth`.
    /// Atomic because an answer is written through `&self` (a request held
    /// in place borrows the worker); only this worker touches it.
    answered: AtomicU64,
    /// Where a large request is copied out of the ring; its allocation comes
    /// back for the next one once the caller drops the previous request.
    copy: BytesMut,
    /// Where a small request is copied out of the ring, sized once.
    small: Vec<u8>,
    /// The process that joined: in a child forked since, the rank is the
    /// parent's, and dropping the copy tells the coordinator nothing.
    born: ForkGeneration,
    _messages: PhantomData<fn(Resp) -> Req>,
}

impl<Req: Payload, Resp: Payload> Worker<Req, Resp> {
    /// Joins the channel `config.name` as worker `rank`, opening its named
    /// regions (and semaphores) with a bounded wait for the coordinator to
    /// create them, and checking that they have this configuration's shape.
    /// The request region is opened read-only. The messages are the
    /// worker's type (`let worker: Worker = …` for `execute.proto`,
    /// `Worker::<Raw, Raw>::join` for bytes); a
    /// [`ChannelBuilder::join`](crate::ChannelBuilder::join) infers them.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], [`Error::RankOutOfRange`], [`Error::Timeout`]
    /// (no coordinator in time), [`Error::Mismatch`], [`Error::RankTaken`],
    /// [`Error::CoordinatorDied`]; [`Error::Shm`] for regions of another
    /// owner or mode.
    pub fn join(config: ChannelConfig, rank: u32) -> Result<Worker<Req, Resp>> {
        config.check()?;
        let open = |name: &str, size: usize, read_only: bool| {
            let mut options = OpenOptions::wait(size, config.timeout);
            options.read_only = read_only;
            Region::open(name, options).map_err(|source| match source {
                nodeipc_shm::Error::Timeout { waited, .. } => Error::Timeout {
                    channel: config.name.clone(),
                    op: format!("waiting for the coordinator to create {name}"),
                    waited,
                },
                source => Error::Shm {
                    channel: config.name.clone(),
                    source,
                },
            })
        };
        // Wait for the headers only: a region of another shape must be
        // reported as a mismatch naming both values, not waited on.
        let request = open(&config.request_region_name(), layout::REQUEST_HEADER, true)?;
        let response = open(
            &config.response_region_name(),
            layout::RESPONSE_HEADER,
            false,
        )?;
        wait_initialised(&config, &request)?;
        Worker::attach(config, rank, request, response)
    }

    /// Joins as worker `rank` over regions received as descriptors (from the
    /// handshake, say). The shape is read from the regions' headers and
    /// range-checked; `name` only labels errors, `timeout` bounds waits. The
    /// request region is mapped read-only, whatever the descriptor allows.
    /// The messages are the worker's type, as for [`join`](Worker::join).
    ///
    /// # Errors
    /// As [`join`](Worker::join).
    pub fn from_fds(
        name: &str,
        rank: u32,
        request: OwnedFd,
        response: OwnedFd,
        timeout: Duration,
    ) -> Result<Worker<Req, Resp>> {
        let shm = |source| Error::Shm {
            channel: name.to_owned(),
            source,
        };
        let request = Region::from_fd_read_only(request).map_err(shm)?;
        let response = Region::from_fd(response).map_err(shm)?;
        let config = ChannelConfig::published(name, &request, &response, timeout)?;
        Worker::attach(config, rank, request, response)
    }

    fn attach(
        config: ChannelConfig,
        rank: u32,
        request: Region,
        response: Region,
    ) -> Result<Worker<Req, Resp>> {
        if rank >= config.workers {
            return Err(Error::RankOutOfRange {
                channel: config.name.clone(),
                rank,
                workers: config.workers,
            });
        }
        let layout = config.layout();
        layout.validate(&config.name, &request, &response, config.sems)?;
        let header = layout::request_header(&request);
        let pid = header.coordinator_pid.load(Ordering::Relaxed);
        // fdpass's one liveness policy: a coordinator that has exited (a
        // zombie too) or whose pid was reused is dead; failing to look is not.
        let coordinator = open_if_alive(pid, header.coordinator_start.load(Ordering::Relaxed))
            .map_err(|source| Error::FdPass {
                context: format!(
                    "channel {}: checking whether the coordinator (pid {pid}) lives",
                    config.name
                ),
                source,
            })?
            .ok_or_else(|| Error::CoordinatorDied {
                channel: config.name.clone(),
                pid,
            })?;
        let sems = SemSet::open(&config, rank)?;
        let entry = layout.worker(&response, rank);
        // The coordinator checks us by pid and start time: a start time we
        // failed to read would make it take us for dead. Read before the
        // rank is claimed, so a failure leaves it free.
        let me = std::process::id();
        let start_time = process_start_time(me).map_err(|source| Error::FdPass {
            context: format!("channel {}: reading our own start time", config.name),
            source,
        })?;
        // Claim the rank: free (never joined), or left cleanly by a worker
        // that may have been this very process before a reconnect.
        let flags = entry.flags.load(Ordering::Acquire);
        let free = flags & worker_flags::JOINED == 0 || flags & worker_flags::LEFT != 0;
        let claiming = worker_flags::JOINED | worker_flags::CLAIMING;
        if !free
            || entry
                .flags
                .compare_exchange(flags, claiming, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return Err(Error::RankTaken {
                channel: config.name.clone(),
                rank,
            });
        }
        entry.start_time.store(start_time, Ordering::Relaxed);
        entry.pid.store(me, Ordering::Relaxed);
        entry.flags.store(worker_flags::JOINED, Ordering::Release);
        // A new rank starts at the first request and answer; a rejoining
        // one where it left.
        let received = entry.received.load(Ordering::Acquire);
        let answered = entry.answered.load(Ordering::Acquire);
        let small = vec![0; recv::COPY_OUT_AT.min(layout.request_capacity)];
        Ok(Worker {
            config,
            layout,
            rank,
            request,
            response,
            sems,
            coordinator,
            received,
            answered: AtomicU64::new(answered),
            copy: BytesMut::new(),
            small,
            born: ForkGeneration::current(),
            _messages: PhantomData,
        })
    }
}

impl<Req, Resp> Worker<Req, Resp> {
    /// This worker's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// How long this worker busy-polls before it sleeps while waiting (see
    /// [`ChannelConfig::poll`]; at most 50 ms is used at a time).
    pub fn set_poll(&mut self, poll: Duration) {
        self.config.poll = poll;
    }

    /// The channel's configuration, as the coordinator published it.
    pub fn config(&self) -> &ChannelConfig {
        &self.config
    }

    fn sem(&self, direction: Direction, role: Role) -> &(dyn nodeipc_sem::Semaphore + Sync) {
        self.sems.get(
            &self.response,
            &self.layout,
            direction,
            role,
            self.rank,
            true,
        )
    }

    fn wait_coordinator(
        &self,
        direction: Direction,
        role: Role,
        what: &'static str,
        budget: &mut Budget,
    ) -> Result<()> {
        wait::wait(
            self.sem(direction, role),
            budget,
            self.config.poll,
            Spin::DEFAULT,
            &self.config.name,
            || what.to_owned(),
            || self.check_coordinator(direction),
        )
    }

    /// Gives the frame of the request taken last back to the coordinator.
    pub(super) fn release_frame(&self) -> Result<()> {
        self.sem(Direction::Request, Role::Produce)
            .post()
            .map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })
    }

    /// Whether waiting on the coordinator still makes sense: it lives, and it
    /// has not closed — or, for receiving, it closed with requests of ours
    /// still in the ring. An answer after a close has nobody to take it.
    fn check_coordinator(&self, direction: Direction) -> Result<()> {
        let exited = self
            .coordinator
            .has_exited()
            .map_err(|source| Error::FdPass {
                context: format!(
                    "channel {}: checking whether the coordinator lives",
                    self.config.name
                ),
                source,
            })?;
        if exited {
            return Err(Error::CoordinatorDied {
                channel: self.config.name.clone(),
                pid: self.coordinator.pid(),
            });
        }
        let header = layout::request_header(&self.request);
        let closed = header.closed.load(Ordering::Acquire) != 0;
        let pending = self.received < header.sent.load(Ordering::Acquire);
        if closed && (direction == Direction::Response || !pending) {
            return Err(Error::Closed {
                channel: self.config.name.clone(),
            });
        }
        Ok(())
    }
}

impl<Req, Resp> Drop for Worker<Req, Resp> {
    fn drop(&mut self) {
        if self.born.is_forked() {
            // A child's copy of its parent's worker: the rank stays the
            // parent's; unmap and close only.
            return;
        }
        // The coordinator learns we left; the rank is free for a worker
        // (this process after a reconnect, say) to take it up where we stopped.
        self.layout
            .worker(&self.response, self.rank)
            .flags
            .fetch_or(worker_flags::LEFT, Ordering::AcqRel);
    }
}

/// Waits (bounded) for the coordinator to finish publishing the header.
fn wait_initialised(config: &ChannelConfig, request: &Region) -> Result<()> {
    let header = layout::request_header(request);
    let start = Instant::now();
    while header.init.load(Ordering::Acquire) != 1 {
        if start.elapsed() >= config.timeout {
            return Err(Error::Timeout {
                channel: config.name.clone(),
                op: "waiting for the coordinator to publish the channel".to_owned(),
                waited: start.elapsed(),
            });
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}
