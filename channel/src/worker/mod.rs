//! [`Worker`]: one worker process's end of an execute channel.

mod in_place;

use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Pidfd, open_verified, process_start_time};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};
use nodeipc_shm::{OpenOptions, Region};
use prost::bytes::BytesMut;

pub use in_place::InPlace;

use crate::config::ChannelConfig;
use crate::layout::{self, Layout, worker_flags};
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
/// `Req` and `Resp` are the channel's messages (our `execute.proto` by
/// default; any protobuf messages with [`join_typed`](Worker::join_typed));
/// [`recv_in_place`](Worker::recv_in_place) and
/// [`respond_bytes`](Worker::respond_bytes) carry frames of any encoding.
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
    /// Where a large request is copied out of the ring; its allocation comes
    /// back for the next one once the caller drops the previous request.
    copy: BytesMut,
    /// Where a small request is copied out of the ring, sized once.
    small: Vec<u8>,
    _messages: PhantomData<fn(Resp) -> Req>,
}

/// How long a receive may wait.
#[derive(Clone, Copy)]
enum Patience {
    Within(Budget),
    /// Not at all: `None` when no request is there.
    Try,
}

/// Requests at least this large are copied out of the ring into a buffer
/// their payloads can borrow from, so decoding copies (and allocates) them
/// no second time; smaller ones are copied into a fixed buffer and their
/// payloads copied from there.
const COPY_OUT_AT: usize = 64 << 10;

impl Worker {
    /// Joins the channel `config.name` as worker `rank`, opening its named
    /// regions (and semaphores) with a bounded wait for the coordinator to
    /// create them, and checking that they have this configuration's shape.
    /// The request region is opened read-only.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], [`Error::RankOutOfRange`], [`Error::Timeout`]
    /// (no coordinator in time), [`Error::Mismatch`], [`Error::RankTaken`],
    /// [`Error::CoordinatorDied`]; [`Error::Shm`] for regions of another
    /// owner or mode.
    pub fn join(config: ChannelConfig, rank: u32) -> Result<Worker> {
        Worker::join_typed(config, rank)
    }

    /// Joins as worker `rank` over regions received as descriptors (from the
    /// handshake, say). The shape is read from the regions' headers and
    /// range-checked; `name` only labels errors, `timeout` bounds waits. The
    /// request region is mapped read-only, whatever the descriptor allows.
    ///
    /// # Errors
    /// As [`join`](Worker::join).
    pub fn from_fds(
        name: &str,
        rank: u32,
        request: OwnedFd,
        response: OwnedFd,
        timeout: Duration,
    ) -> Result<Worker> {
        Worker::from_fds_typed(name, rank, request, response, timeout)
    }
}

impl<Req: prost::Message + Default, Resp: prost::Message + Default> Worker<Req, Resp> {
    /// [`join`](Worker::join) for a channel of other messages.
    ///
    /// # Errors
    /// As [`join`](Worker::join).
    pub fn join_typed(config: ChannelConfig, rank: u32) -> Result<Worker<Req, Resp>> {
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

    /// [`from_fds`](Worker::from_fds) for a channel of other messages.
    ///
    /// # Errors
    /// As [`join`](Worker::join).
    pub fn from_fds_typed(
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
        let coordinator = open_verified(pid, header.coordinator_start.load(Ordering::Relaxed))
            .map_err(|e| match e {
                nodeipc_fdpass::Error::ProcessGone { .. } => Error::CoordinatorDied {
                    channel: config.name.clone(),
                    pid,
                },
                source => Error::FdPass {
                    context: format!(
                        "channel {}: checking whether the coordinator (pid {pid}) lives",
                        config.name
                    ),
                    source,
                },
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
        // A new rank starts at the first request; a rejoining one where it left.
        let received = entry.received.load(Ordering::Acquire);
        let small = vec![0; COPY_OUT_AT.min(layout.request_capacity)];
        Ok(Worker {
            config,
            layout,
            rank,
            request,
            response,
            sems,
            coordinator,
            received,
            copy: BytesMut::new(),
            small,
            _messages: PhantomData,
        })
    }

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

    /// Waits for the next request and decodes it.
    ///
    /// # Errors
    /// [`Error::Closed`] once the coordinator closed the channel and every
    /// request sent before is received; [`Error::CoordinatorDied`];
    /// [`Error::Timeout`]; [`Error::Corrupt`] or [`Error::Decode`] for a
    /// frame that is not a request.
    pub fn recv(&mut self) -> Result<Req> {
        let mut request = Req::default();
        self.recv_into(&mut request)?;
        Ok(request)
    }

    /// [`recv`](Worker::recv) within `timeout` instead of the configured one.
    /// A timeout takes nothing: the next receive gets the request.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Req> {
        let mut request = Req::default();
        self.recv_with(&mut request, Patience::Within(Budget::new(timeout)))?;
        Ok(request)
    }

    /// The next request if one is there, without waiting.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv), but never [`Error::Timeout`].
    pub fn try_recv(&mut self) -> Result<Option<Req>> {
        let mut request = Req::default();
        Ok(self
            .recv_with(&mut request, Patience::Try)?
            .then_some(request))
    }

    /// [`recv`](Worker::recv) into an existing message, reusing its
    /// allocations (the payload's buffer, say): no allocation in steady state.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv).
    pub fn recv_into(&mut self, request: &mut Req) -> Result<()> {
        let budget = Budget::new(self.config.timeout);
        self.recv_with(request, Patience::Within(budget)).map(drop)
    }

    /// The next request's frame (any encoding) copied into `into`, whose
    /// allocation is reused.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv), without [`Error::Decode`].
    pub fn recv_bytes(&mut self, into: &mut Vec<u8>) -> Result<()> {
        let guard = self.recv_in_place()?;
        into.clear();
        into.extend_from_slice(guard.bytes());
        guard.release()
    }

    /// The next request, read where it lies in the ring: the guard gives the
    /// frame's bytes ([`InPlace::bytes`]) and decodes them on demand, and
    /// holds the frame until it drops or answers ([`InPlace::respond`]). No
    /// copy and no allocation. The coordinator cannot reuse the frame while
    /// the guard lives: hold it for long and its sends wait, then time out
    /// naming this worker.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv), without [`Error::Decode`] (nothing is decoded yet).
    pub fn recv_in_place(&mut self) -> Result<InPlace<'_, Req, Resp>> {
        let budget = Budget::new(self.config.timeout);
        self.in_place_with(Patience::Within(budget))
            .map(|taken| taken.expect("a waiting receive takes a request or fails"))
    }

    /// [`recv_in_place`](Worker::recv_in_place) within `timeout`.
    ///
    /// # Errors
    /// As [`recv_in_place`](Worker::recv_in_place).
    pub fn recv_in_place_timeout(&mut self, timeout: Duration) -> Result<InPlace<'_, Req, Resp>> {
        self.in_place_with(Patience::Within(Budget::new(timeout)))
            .map(|taken| taken.expect("a waiting receive takes a request or fails"))
    }

    /// [`recv_in_place`](Worker::recv_in_place) without waiting.
    ///
    /// # Errors
    /// As [`recv_in_place`](Worker::recv_in_place), never [`Error::Timeout`].
    pub fn try_recv_in_place(&mut self) -> Result<Option<InPlace<'_, Req, Resp>>> {
        self.in_place_with(Patience::Try)
    }

    fn in_place_with(&mut self, patience: Patience) -> Result<Option<InPlace<'_, Req, Resp>>> {
        if !self.acquire(patience)? {
            return Ok(None);
        }
        let located = self.locate();
        self.advance();
        match located {
            Ok((at, len)) => Ok(Some(InPlace::new(self, at, len))),
            Err(e) => {
                let _ = self.release_frame();
                Err(e)
            }
        }
    }

    /// Receives into `request`; whether there was one (always, unless `Try`).
    fn recv_with(&mut self, request: &mut Req, patience: Patience) -> Result<bool> {
        if !self.acquire(patience)? {
            return Ok(false);
        }
        let decoded = self
            .locate()
            .and_then(|(at, len)| self.copy_out(at, len, request));
        self.advance();
        let released = self.release_frame();
        decoded?;
        released.map(|()| true)
    }

    /// Takes this worker's request-consume count: a request, unless the
    /// coordinator closed (then the wake-up of the close, given back).
    fn acquire(&mut self, patience: Patience) -> Result<bool> {
        match patience {
            Patience::Within(mut budget) => {
                self.wait_coordinator(
                    Direction::Request,
                    Role::Consume,
                    "waiting for a request",
                    &mut budget,
                )?;
            }
            Patience::Try => {
                let taken = self
                    .sem(Direction::Request, Role::Consume)
                    .try_wait()
                    .map_err(|source| Error::Sem {
                        channel: self.config.name.clone(),
                        source,
                    })?;
                if !taken {
                    // Nothing there: a dead or closed coordinator is still news.
                    self.check_coordinator(Direction::Request)?;
                    return Ok(false);
                }
            }
        }
        let header = layout::request_header(&self.request);
        // A count taken is a request, unless the coordinator closed: then it
        // may be the wake-up of the close (`sent` is read only then).
        if header.closed.load(Ordering::Acquire) != 0
            && self.received >= header.sent.load(Ordering::Acquire)
        {
            let _ = self.sem(Direction::Request, Role::Consume).post();
            return Err(Error::Closed {
                channel: self.config.name.clone(),
            });
        }
        Ok(true)
    }

    /// Where the body of the request in this worker's next frame lies, and
    /// its length, the prefix checked against the frame.
    fn locate(&self) -> Result<(usize, usize)> {
        let capacity = self.layout.request_capacity;
        let frame = self.layout.frame(self.received);
        let mut prefix = [0u8; nodeipc_proto::LEN_PREFIX];
        self.request
            .read_at(frame, &mut prefix)
            .map_err(|source| Error::Shm {
                channel: self.config.name.clone(),
                source,
            })?;
        let len = match nodeipc_proto::frame_len(&prefix, capacity) {
            // Only the prefix was copied: "truncated" is the frame it
            // announces, which fits the ring's frame.
            Ok(len) | Err(nodeipc_proto::Error::Truncated { need: len, .. }) => len,
            Err(e) => return Err(frame_error(&self.config.name, self.rank, capacity, e)),
        };
        Ok((frame + prefix.len(), len - prefix.len()))
    }

    /// Counts the request taken, where a rejoining worker would resume.
    fn advance(&mut self) {
        // Where a rejoining worker resumes was read from its entry, which
        // any process mapping the region may have written: never overflow.
        self.received = self.received.wrapping_add(1);
        self.layout
            .worker(&self.response, self.rank)
            .received
            .store(self.received, Ordering::Release);
    }

    /// Gives the frame of the request taken last back to the coordinator.
    fn release_frame(&self) -> Result<()> {
        self.sem(Direction::Request, Role::Produce)
            .post()
            .map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })
    }

    /// Copies the request body at `body` (`body_len` bytes) out of the ring
    /// and decodes it into `request`.
    ///
    /// No reference to the ring's bytes is made here: small requests land
    /// in a buffer sized once for the frame and are decoded from there;
    /// large ones in `copy`, whose allocation comes back once the caller
    /// drops the previous request, and are decoded without copying their
    /// payloads a second time.
    fn copy_out(&mut self, body: usize, body_len: usize, request: &mut Req) -> Result<()> {
        let (channel, rank) = (&self.config.name, self.rank);
        let shm = |source| Error::Shm {
            channel: channel.clone(),
            source,
        };
        // Dropping the previous request's payloads first lets `reserve` take
        // back the copy buffer's allocation instead of making a new one.
        request.clear();
        let decoded = if body_len >= COPY_OUT_AT {
            self.copy.clear();
            self.copy.reserve(body_len);
            let spare = &mut self.copy.spare_capacity_mut()[..body_len];
            self.request.read_uninit(body, spare).map_err(shm)?;
            // SAFETY: `read_uninit` initialised these `body_len` bytes of
            // spare capacity, which `reserve` made room for.
            unsafe { self.copy.set_len(body_len) };
            request.merge(self.copy.split().freeze())
        } else {
            let small = &mut self.small[..body_len];
            self.request.read_at(body, small).map_err(shm)?;
            request.merge(&*small)
        };
        decoded.map_err(|source| Error::Decode {
            channel: channel.clone(),
            rank,
            slot: "request frame",
            source,
        })
    }

    /// Answers the oldest request not yet answered, encoding straight into
    /// this worker's response slot (no intermediate buffer, no allocation).
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is written; [`Error::CoordinatorDied`];
    /// [`Error::Timeout`] if the coordinator has not consumed the previous answer.
    pub fn respond(&mut self, response: &Resp) -> Result<()> {
        self.respond_message(response, SlotKind::Response, None)
    }

    /// Answers with `frame` as it is: bytes of any encoding, which the
    /// coordinator gathers with [`recv_all_bytes`](crate::Coordinator::recv_all_bytes).
    ///
    /// # Errors
    /// As [`respond`](Worker::respond).
    pub fn respond_bytes(&mut self, frame: &[u8]) -> Result<()> {
        self.respond_bytes_releasing(frame, None)
    }

    /// [`respond_bytes`](Worker::respond_bytes); with `held`, the frame of a
    /// request held in place is released once the answer is written, before
    /// it is announced (see [`write_slot`](Worker::write_slot)).
    pub(crate) fn respond_bytes_releasing(
        &mut self,
        frame: &[u8],
        held: Option<&mut bool>,
    ) -> Result<()> {
        self.write_slot(frame.len(), SlotKind::Response, held, |out| {
            layout::write_bytes_frame(frame, out);
            Ok(())
        })
    }

    /// Answers an init request in this worker's fixed-size init slot
    /// (gathered by [`Coordinator::recv_init`](crate::Coordinator::recv_init)).
    ///
    /// # Errors
    /// As [`respond`](Worker::respond).
    pub fn respond_init(&mut self, response: &Resp) -> Result<()> {
        self.respond_message(response, SlotKind::Init, None)
    }

    pub(crate) fn respond_message(
        &mut self,
        response: &Resp,
        slot: SlotKind,
        held: Option<&mut bool>,
    ) -> Result<()> {
        let channel = &self.config.name;
        let context = || format!("channel {channel}");
        self.write_slot(response.encoded_len(), slot, held, |out| {
            nodeipc_proto::encode_frame(response, out)
                .map(drop)
                .map_err(|source| Error::Proto {
                    context: context(),
                    source,
                })
        })
    }

    /// Writes a frame of `body` bytes into this worker's slot of `kind`
    /// through `fill` (given exactly the frame's bytes, prefix included),
    /// once the coordinator has taken the previous one.
    ///
    /// With `held` (a request held in place, `false` until released), its
    /// frame is released after the answer is written and before the answer
    /// is announced: the coordinator, which waits for the answer, then finds
    /// the frame free for its next send at once instead of waiting for a
    /// second post on the same semaphore line.
    fn write_slot(
        &self,
        body: usize,
        kind: SlotKind,
        held: Option<&mut bool>,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let (at, size, slot) = match kind {
            SlotKind::Response => (
                self.layout.response_slot(self.rank),
                self.layout.response_slot_size,
                "response slot",
            ),
            SlotKind::Init => (
                self.layout.init_slot(self.rank),
                self.layout.init_slot_size,
                "init slot",
            ),
        };
        let frame = body.saturating_add(nodeipc_proto::LEN_PREFIX);
        if frame > size {
            return Err(Error::TooLarge {
                channel: self.config.name.clone(),
                slot,
                size: frame,
                max: size,
            });
        }
        let mut budget = Budget::new(self.config.timeout);
        self.wait_coordinator(
            Direction::Response,
            Role::Produce,
            "waiting for the coordinator to take the previous response",
            &mut budget,
        )?;
        // SAFETY: we hold our response-produce count: by the protocol the
        // coordinator does not read our slot until we post the consume
        // below, and no other worker writes it.
        let out = unsafe { self.response.bytes_mut(at, frame) }.map_err(|source| Error::Shm {
            channel: self.config.name.clone(),
            source,
        });
        let written = out.and_then(fill);
        if let Err(e) = written {
            // Nothing announced: the slot stays ours for the next answer.
            let _ = self.sem(Direction::Response, Role::Produce).post();
            return Err(e);
        }
        if let Some(released) = held
            && !std::mem::replace(released, true)
        {
            self.release_frame()?;
        }
        self.sem(Direction::Response, Role::Consume)
            .post()
            .map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })
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
            &self.config.name,
            || what.to_owned(),
            || self.check_coordinator(direction),
        )
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
        // The coordinator learns we left; the rank is free for a worker
        // (this process after a reconnect, say) to take it up where we stopped.
        self.layout
            .worker(&self.response, self.rank)
            .flags
            .fetch_or(worker_flags::LEFT, Ordering::AcqRel);
    }
}

/// Which of a worker's slots an answer goes to.
#[derive(Clone, Copy)]
pub(crate) enum SlotKind {
    Response,
    Init,
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

/// A request frame that could not be decoded, as the channel's error.
fn frame_error(channel: &str, rank: u32, capacity: usize, error: nodeipc_proto::Error) -> Error {
    match error {
        nodeipc_proto::Error::TooLarge { size, .. }
        | nodeipc_proto::Error::Truncated { need: size, .. } => Error::Corrupt {
            channel: channel.to_owned(),
            rank,
            slot: "request frame",
            len: size as u64,
            slot_size: capacity,
        },
        nodeipc_proto::Error::Decode(source) => Error::Decode {
            channel: channel.to_owned(),
            rank,
            slot: "request frame",
            source,
        },
        source => Error::Proto {
            context: format!("channel {channel}"),
            source,
        },
    }
}
