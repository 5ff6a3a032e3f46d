//! [`Worker`]: one worker process's end of an execute channel.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Pidfd, open_verified, process_start_time};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};
use nodeipc_shm::{OpenOptions, Region};
use prost::Message;
use prost::bytes::BytesMut;

use crate::config::ChannelConfig;
use crate::layout::{self, Layout, worker_flags};
use crate::sem_kind::{Direction, Role};
use crate::sems::SemSet;
use crate::{Error, Result, wait};

/// A worker's end of an execute channel: receives every request the
/// coordinator broadcasts, answers each in its own response slot.
///
/// Every wait is bounded by the configured timeout; a coordinator whose
/// process died is reported as [`Error::CoordinatorDied`], one that closed
/// the channel as [`Error::Closed`].
pub struct Worker {
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
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], [`Error::RankOutOfRange`], [`Error::Timeout`]
    /// (no coordinator in time), [`Error::Mismatch`], [`Error::RankTaken`],
    /// [`Error::CoordinatorDied`]; [`Error::Shm`] for regions of another
    /// owner or mode.
    pub fn join(config: ChannelConfig, rank: u32) -> Result<Worker> {
        config.check()?;
        let open = |name: &str, size: usize| {
            Region::open(name, OpenOptions::wait(size, config.timeout)).map_err(|source| {
                match source {
                    nodeipc_shm::Error::Timeout { waited, .. } => Error::Timeout {
                        channel: config.name.clone(),
                        op: format!("waiting for the coordinator to create {name}"),
                        waited,
                    },
                    source => Error::Shm {
                        channel: config.name.clone(),
                        source,
                    },
                }
            })
        };
        // Wait for the headers only: a region of another shape must be
        // reported as a mismatch naming both values, not waited on.
        let request = open(&config.request_region_name(), layout::REQUEST_HEADER)?;
        let response = open(&config.response_region_name(), layout::RESPONSE_HEADER)?;
        wait_initialised(&config, &request)?;
        Worker::attach(config, rank, request, response)
    }

    /// Joins as worker `rank` over regions received as descriptors (from the
    /// handshake, say). The shape is read from the regions' headers and
    /// range-checked; `name` only labels errors, `timeout` bounds waits.
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
        let shm = |source| Error::Shm {
            channel: name.to_owned(),
            source,
        };
        let request = Region::from_fd(request).map_err(shm)?;
        let response = Region::from_fd(response).map_err(shm)?;
        let config = ChannelConfig::published(name, &request, &response, timeout)?;
        Worker::attach(config, rank, request, response)
    }

    fn attach(
        config: ChannelConfig,
        rank: u32,
        request: Region,
        response: Region,
    ) -> Result<Worker> {
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
        })
    }

    /// This worker's rank.
    pub fn rank(&self) -> u32 {
        self.rank
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
    pub fn recv(&mut self) -> Result<ExecuteRequest> {
        let mut request = ExecuteRequest::default();
        self.recv_into(&mut request)?;
        Ok(request)
    }

    /// [`recv`](Worker::recv) into an existing message, reusing its
    /// allocations (the payload's buffer, say).
    ///
    /// # Errors
    /// As [`recv`](Worker::recv).
    pub fn recv_into(&mut self, request: &mut ExecuteRequest) -> Result<()> {
        self.wait_coordinator(Direction::Request, Role::Consume, "waiting for a request")?;
        let header = layout::request_header(&self.request);
        // A count taken is a request, unless the coordinator closed: then it
        // may be the wake-up of the close (`sent` is read only then).
        if header.closed.load(Ordering::Acquire) != 0
            && self.received >= header.sent.load(Ordering::Acquire)
        {
            // Not a request: the wake-up of a coordinator that closed.
            let _ = self.sem(Direction::Request, Role::Consume).post();
            return Err(Error::Closed {
                channel: self.config.name.clone(),
            });
        }
        let frame = self.layout.frame(self.received);
        let decoded = self.copy_out(frame, request);
        // Where a rejoining worker resumes was read from its entry, which
        // any process mapping the region may have written: never overflow.
        self.received = self.received.wrapping_add(1);
        self.layout
            .worker(&self.response, self.rank)
            .received
            .store(self.received, Ordering::Release);
        let released = self.sem(Direction::Request, Role::Produce).post();
        decoded?;
        released.map_err(|source| Error::Sem {
            channel: self.config.name.clone(),
            source,
        })
    }

    /// Copies the request in `frame` out of the ring and decodes it into `request`.
    ///
    /// The frame is the coordinator's to write, and by the protocol it does
    /// not while we hold our request-consume count, but any process mapping
    /// the ring can: so no reference to the ring's bytes is ever made. The
    /// length prefix is copied and checked against the frame first, then
    /// just the message. Small requests land in a buffer sized once for the
    /// frame and are decoded from there; large ones in `copy`, whose
    /// allocation comes back once the caller drops the previous request,
    /// and are decoded without copying their payloads a second time.
    fn copy_out(&mut self, frame: usize, request: &mut ExecuteRequest) -> Result<()> {
        let capacity = self.layout.request_capacity;
        let (channel, rank) = (&self.config.name, self.rank);
        let shm = |source| Error::Shm {
            channel: channel.clone(),
            source,
        };
        let mut prefix = [0u8; nodeipc_proto::LEN_PREFIX];
        self.request.read_at(frame, &mut prefix).map_err(shm)?;
        let len = match nodeipc_proto::frame_len(&prefix, capacity) {
            // Only the prefix was copied: "truncated" is the frame it
            // announces, which fits the ring's frame.
            Ok(len) | Err(nodeipc_proto::Error::Truncated { need: len, .. }) => len,
            Err(e) => return Err(frame_error(channel, rank, capacity, e)),
        };
        let body = frame + prefix.len();
        let body_len = len - prefix.len();
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

    /// Answers the oldest request not yet answered, in this worker's response slot.
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is written; [`Error::CoordinatorDied`];
    /// [`Error::Timeout`] if the coordinator has not consumed the previous answer.
    pub fn respond(&mut self, response: &ExecuteResponse) -> Result<()> {
        let at = self.layout.response_slot(self.rank);
        self.write_slot(
            response,
            at,
            self.layout.response_slot_size,
            "response slot",
        )
    }

    /// Answers an init request in this worker's fixed-size init slot
    /// (gathered by [`Coordinator::recv_init`](crate::Coordinator::recv_init)).
    ///
    /// # Errors
    /// As [`respond`](Worker::respond).
    pub fn respond_init(&mut self, response: &ExecuteResponse) -> Result<()> {
        let at = self.layout.init_slot(self.rank);
        self.write_slot(response, at, self.layout.init_slot_size, "init slot")
    }

    fn write_slot(
        &mut self,
        response: &ExecuteResponse,
        at: usize,
        size: usize,
        slot: &'static str,
    ) -> Result<()> {
        let frame = response.encoded_len() + nodeipc_proto::LEN_PREFIX;
        if frame > size {
            return Err(Error::TooLarge {
                channel: self.config.name.clone(),
                slot,
                size: frame,
                max: size,
            });
        }
        self.wait_coordinator(
            Direction::Response,
            Role::Produce,
            "waiting for the coordinator to take the previous response",
        )?;
        // SAFETY: we hold our response-produce count: by the protocol the
        // coordinator does not read our slots until we post the consume below.
        let out = unsafe { self.response.bytes_mut(at, size) }.map_err(|source| Error::Shm {
            channel: self.config.name.clone(),
            source,
        })?;
        nodeipc_proto::encode_frame(response, out).map_err(|source| Error::Proto {
            context: format!("channel {}", self.config.name),
            source,
        })?;
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

    fn wait_coordinator(&self, direction: Direction, role: Role, what: &'static str) -> Result<()> {
        wait::wait(
            self.sem(direction, role),
            self.config.timeout,
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

impl Drop for Worker {
    fn drop(&mut self) {
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
