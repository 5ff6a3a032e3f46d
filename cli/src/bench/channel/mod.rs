//! The execute channel across processes: nodeipc beside the designs it
//! replaces, each moving the same protobuf messages — a request of `payload`
//! bytes broadcast to every worker, a small response gathered from each.
//!
//! - `GlibcLockstep`: the request encoded into a buffer and copied into
//!   shared memory, one glibc named semaphore per worker each way, blocking
//!   `sem_wait`s; responses the same way back.
//! - `UnixSocket`: length-prefixed frames over one Unix stream socket per worker.
//!
//! `NodeipcInPlace` moves raw bytes instead, as iceoryx2's request-response
//! does (see `versus-iceoryx2`): the request's bytes broadcast, each worker
//! reading them in place in the read-only ring and answering an 8-byte
//! [`digest`] the coordinator checks.

use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeipc_channel::{All, Answers, Channel, Coordinator, Mode, Payload, Raw, Reply, SemKind};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, execute_request,
};
use nodeipc_proto::{KnownMessage, decode_message};
use nodeipc_shm::Region;
use prost::Message;

use crate::bench::glibc_sem::GlibcSemaphore;
use crate::bench::machine::Pinned;
use crate::bench::peer::Peers;

mod cpp;
pub mod open_loop;
mod response_thread;
mod which;
mod worker;

use response_thread::Progress;
pub use which::ChannelImpl;
pub(crate) use worker::peer_main;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The request every round trip sends.
pub fn request(sequence: u64, payload: usize) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![sequence],
            input: (vec![0x5a; payload]).into(),
        })),
    }
}

/// A coordinator with `workers` worker processes ready to take requests of
/// `payload` bytes. With one worker on a machine of two cores or more, this
/// thread runs on core 0 and the worker on core 1.
pub struct ChannelSession {
    which: ChannelImpl,
    workers: u32,
    payload: usize,
    request: ExecuteRequest,
    sent: u64,
    gathered: u64,
    depth: u64,
    side: Side,
    peers: Peers,
    _pinned: Option<Pinned>,
}

enum Side {
    Nodeipc(Box<Coordinator>),
    /// The coordinator, the request's bytes and the digest every worker
    /// must answer.
    NodeipcBytes(Box<Coordinator<Raw, Raw>>, Vec<u8>, [u8; 8]),
    /// The coordinator with its response thread running, the request's
    /// bytes, and what the thread has heard.
    NodeipcThread(Box<Coordinator<Raw, Raw>>, Vec<u8>, Arc<Progress>),
    /// The C++ coordinator of `cpp/channel_thread_bench.cpp` with its
    /// response thread running, and the request's bytes.
    Cpp(cpp::Bench, Vec<u8>),
    /// The same coordinator in lock-step (no response thread).
    CppLockstep(cpp::Bench, Vec<u8>),
    Glibc {
        region: Region,
        /// Per worker: request semaphore, response semaphore.
        sems: Vec<(GlibcSemaphore, GlibcSemaphore)>,
        layout: GlibcLayout,
    },
    Socket(Vec<std::os::unix::net::UnixStream>),
}

/// The lock-step baseline's region: the request buffer, then a response
/// buffer per worker.
#[derive(Clone, Copy)]
struct GlibcLayout {
    request_bytes: usize,
    response_bytes: usize,
}

impl GlibcLayout {
    fn response_at(self, rank: u32) -> usize {
        self.request_bytes + rank as usize * self.response_bytes
    }

    fn size(self, workers: u32) -> usize {
        self.response_at(workers)
    }
}

impl ChannelSession {
    /// Spawns the workers and waits until they are ready.
    ///
    /// # Errors
    /// A worker that fails to start; any set-up failure.
    pub fn start(
        which: ChannelImpl,
        workers: u32,
        payload: usize,
        rounds: u64,
    ) -> io::Result<ChannelSession> {
        ChannelSession::start_with_depth(which, workers, payload, 1, rounds)
    }

    /// Like [`start`](ChannelSession::start), keeping up to `depth` requests
    /// in flight (nodeipc only; the baselines are lock-step by design).
    ///
    /// # Errors
    /// As [`start`](ChannelSession::start).
    pub fn start_with_depth(
        which: ChannelImpl,
        workers: u32,
        payload: usize,
        depth: u32,
        rounds: u64,
    ) -> io::Result<ChannelSession> {
        let request = request(0, payload);
        let frame = request.encoded_len() + 64;
        let pin = workers == 1 && crate::bench::machine::cores() >= 2;
        let cpu = pin.then_some(1);
        let tag = format!(
            "/nodeipc-bench-chan-{}-{:x}",
            std::process::id(),
            crate::bench::nonce()
        );
        // This process on core 0 before anything starts: a response
        // thread started below inherits it, so the coordinator's threads
        // share core 0 and the worker has core 1, as the process pins say.
        let pinned = if pin { Some(Pinned::to(0)?) } else { None };
        let mut peers = Peers::default();
        let side = match which {
            ChannelImpl::CppResponseThread | ChannelImpl::CppLockstep => {
                let bytes = vec![0x5a; payload];
                let expected = digest(&bytes).to_le_bytes();
                let (bench, request, response) =
                    cpp::Bench::create(&tag, workers, payload + 64, depth)?;
                for rank in 0..workers {
                    let role = format!(
                        "chan-worker {} {tag} {rank} {rounds} {} {}",
                        which.name(),
                        request.as_raw_fd(),
                        response.as_raw_fd()
                    );
                    peers.spawn(&role, &[request.as_fd(), response.as_fd()], cpu)?;
                }
                drop((request, response));
                if which == ChannelImpl::CppLockstep {
                    bench.start_lockstep(&expected)?;
                    Side::CppLockstep(bench, bytes)
                } else {
                    bench.start(&expected)?;
                    Side::Cpp(bench, bytes)
                }
            }
            ChannelImpl::Nodeipc
            | ChannelImpl::NodeipcNamed
            | ChannelImpl::NodeipcInPlace
            | ChannelImpl::NodeipcInPlacePoll
            | ChannelImpl::NodeipcResponseThread => {
                let sems = if which == ChannelImpl::NodeipcNamed {
                    SemKind::Named
                } else {
                    SemKind::InRegion
                };
                let frame = if which.in_place() {
                    payload + 64
                } else {
                    frame
                };
                let channel = Channel::anonymous(&tag)
                    .workers(workers)
                    .sems(sems)
                    .depth(depth)
                    .request_capacity(frame.max(256))
                    .response_slot_size(256)
                    .poll(which.poll())
                    .timeout(TIMEOUT);
                let spawn = |peers: &mut Peers, request: OwnedFd, response: BorrowedFd<'_>| {
                    for rank in 0..workers {
                        let role = format!(
                            "chan-worker {} {tag} {rank} {rounds} {} {}",
                            which.name(),
                            request.as_raw_fd(),
                            response.as_raw_fd()
                        );
                        peers.spawn(&role, &[request.as_fd(), response], cpu)?;
                    }
                    io::Result::Ok(())
                };
                if which == ChannelImpl::NodeipcResponseThread {
                    let mut coordinator = channel.raw().create()?;
                    start_workers(&coordinator, &mut peers, spawn)?;
                    let bytes = vec![0x5a; payload];
                    let expected = digest(&bytes).to_le_bytes();
                    let progress = Arc::new(Progress::default());
                    let heard = Arc::clone(&progress);
                    coordinator.set_response_mode(Mode::All);
                    coordinator.on_response(move |reply: Reply<'_>| {
                        let wrong = match reply.answers {
                            Ok(Answers::All(all)) => all
                                .iter()
                                .find(|(_, answer)| *answer != expected.as_slice())
                                .map(|(rank, _)| format!("worker {rank} answered a wrong digest")),
                            Ok(Answers::One(_)) => Some("one answer to a gather of all".into()),
                            Err(e) => Some(e.to_string()),
                        };
                        heard.hear(reply.id, wrong);
                        ControlFlow::Continue(())
                    })?;
                    coordinator.start_response_thread()?;
                    Side::NodeipcThread(Box::new(coordinator), bytes, progress)
                } else if which.in_place() {
                    let coordinator = channel.raw().create()?;
                    start_workers(&coordinator, &mut peers, spawn)?;
                    let bytes = vec![0x5a; payload];
                    let expected = digest(&bytes).to_le_bytes();
                    Side::NodeipcBytes(Box::new(coordinator), bytes, expected)
                } else {
                    let coordinator = channel.create()?;
                    start_workers(&coordinator, &mut peers, spawn)?;
                    Side::Nodeipc(Box::new(coordinator))
                }
            }
            ChannelImpl::GlibcLockstep => {
                let layout = GlibcLayout {
                    request_bytes: frame.next_multiple_of(64),
                    response_bytes: 256,
                };
                let region = Region::anonymous(layout.size(workers))?;
                let mut sems = Vec::new();
                for rank in 0..workers {
                    let request = GlibcSemaphore::create(&format!("{tag}-req-{rank}"), 0)?;
                    let response = GlibcSemaphore::create(&format!("{tag}-resp-{rank}"), 0)?;
                    sems.push((request, response));
                    let role = format!(
                        "chan-worker {} {tag} {rank} {rounds} {} {} {}",
                        which.name(),
                        region.as_fd().as_raw_fd(),
                        layout.request_bytes,
                        layout.response_bytes
                    );
                    peers.spawn(&role, &[region.as_fd()], cpu)?;
                }
                // Every worker opened its pair once it answers a ready post.
                for (request, response) in &sems {
                    request.post()?;
                    response.wait_timeout(TIMEOUT)?;
                }
                for (request, response) in &sems {
                    request.unlink_now()?;
                    response.unlink_now()?;
                }
                Side::Glibc {
                    region,
                    sems,
                    layout,
                }
            }
            ChannelImpl::UnixSocket => {
                let mut sockets = Vec::new();
                for rank in 0..workers {
                    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
                    let role = format!(
                        "chan-worker {} {tag} {rank} {rounds} {}",
                        which.name(),
                        theirs.as_raw_fd()
                    );
                    peers.spawn(&role, &[theirs.as_fd()], cpu)?;
                    sockets.push(ours);
                }
                Side::Socket(sockets)
            }
        };
        Ok(ChannelSession {
            which,
            workers,
            payload,
            request,
            sent: 0,
            gathered: 0,
            depth: u64::from(depth),
            side,
            peers,
            _pinned: pinned,
        })
    }

    /// `rounds` round trips: each request to every worker, every answer back
    /// and decoded. Returns the time they took.
    ///
    /// # Errors
    /// A worker that failed or answered wrongly.
    pub fn run(&mut self, rounds: u64) -> io::Result<Duration> {
        let start = Instant::now();
        match &mut self.side {
            // This thread sends; the response thread gathers.
            Side::NodeipcThread(coordinator, bytes, progress) => {
                let target = self.sent + rounds;
                for _ in 0..rounds {
                    coordinator.send(bytes)?;
                }
                progress.wait_for(target)?;
                self.sent = target;
                self.gathered = target;
                return Ok(start.elapsed());
            }
            Side::Cpp(bench, bytes) => {
                bench.run(bytes, rounds)?;
                self.sent += rounds;
                self.gathered += rounds;
                return Ok(start.elapsed());
            }
            Side::CppLockstep(bench, bytes) => {
                for _ in 0..rounds {
                    bench.lockstep_round(bytes)?;
                }
                self.sent += rounds;
                self.gathered += rounds;
                return Ok(start.elapsed());
            }
            _ => {}
        }
        if let Side::Nodeipc(_) = self.side
            && self.depth > 1
        {
            // Pipelined: up to `depth` requests in flight; every one gathered
            // before this returns.
            let end = self.sent + rounds;
            while self.gathered < end {
                if self.sent < end && self.sent - self.gathered < self.depth {
                    self.request.sequence = self.sent;
                    let Side::Nodeipc(coordinator) = &mut self.side else {
                        unreachable!()
                    };
                    coordinator.send(&self.request)?;
                    self.sent += 1;
                } else {
                    let Side::Nodeipc(coordinator) = &mut self.side else {
                        unreachable!()
                    };
                    for response in coordinator.recv(All)? {
                        if response.sequence != self.gathered {
                            return Err(io::Error::other("answers out of order"));
                        }
                    }
                    self.gathered += 1;
                }
            }
            return Ok(start.elapsed());
        }
        for _ in 0..rounds {
            self.request.sequence = self.sent;
            self.round_trip()?;
            self.sent += 1;
            self.gathered += 1;
        }
        Ok(start.elapsed())
    }

    fn round_trip(&mut self) -> io::Result<()> {
        let expected = self.request.sequence;
        let check = |response: &ExecuteResponse| {
            if response.sequence != expected {
                return Err(io::Error::other(format!(
                    "answer {} to request {expected}",
                    response.sequence
                )));
            }
            Ok(())
        };
        match &mut self.side {
            Side::Nodeipc(coordinator) => {
                coordinator.send(&self.request)?;
                for response in coordinator.recv(All)? {
                    check(&response)?;
                }
            }
            Side::NodeipcBytes(coordinator, bytes, expected) => {
                coordinator.send(bytes)?;
                for (rank, answer) in coordinator.recv(All)?.iter() {
                    if answer != expected.as_slice() {
                        return Err(io::Error::other(format!(
                            "worker {rank} answered a wrong digest"
                        )));
                    }
                }
            }
            Side::NodeipcThread(..) | Side::Cpp(..) | Side::CppLockstep(..) => {
                unreachable!("run() sends for these")
            }
            Side::Glibc {
                region,
                sems,
                layout,
            } => {
                let frame = self.request.encode_to_vec();
                region.write_at(0, &(frame.len() as u32).to_le_bytes())?;
                region.write_at(4, &frame)?;
                for (request, _) in sems.iter() {
                    request.post()?;
                }
                for (rank, (_, response)) in sems.iter().enumerate() {
                    response.wait()?;
                    check(&read_glibc_frame::<ExecuteResponse>(
                        region,
                        layout.response_at(rank as u32),
                        layout.response_bytes,
                    )?)?;
                }
            }
            Side::Socket(sockets) => {
                for socket in sockets.iter_mut() {
                    nodeipc_proto::write_frame(socket, &self.request).map_err(io::Error::from)?;
                }
                let mut scratch = Vec::new();
                for socket in sockets.iter_mut() {
                    let response: ExecuteResponse =
                        nodeipc_proto::read_frame(socket, 1 << 16, &mut scratch)
                            .map_err(io::Error::from)?;
                    check(&response)?;
                }
            }
        }
        Ok(())
    }

    /// Stops the workers (each runs exactly the rounds it was told) and reaps them.
    ///
    /// # Errors
    /// A worker that failed.
    pub fn finish(self) -> io::Result<()> {
        let ChannelSession { peers, side, .. } = self;
        let result = peers.finish(TIMEOUT);
        drop(side);
        result
    }

    /// What this session runs.
    pub fn describe(&self) -> String {
        format!(
            "{} workers={} payload={}",
            self.which.name(),
            self.workers,
            self.payload
        )
    }
}

/// Spawns the workers of `coordinator` (with the ring read-only, as the
/// handshake gives it) and waits until every one has joined.
fn start_workers<Req: Payload, Resp: Payload>(
    coordinator: &Coordinator<Req, Resp>,
    peers: &mut Peers,
    spawn: impl FnOnce(&mut Peers, OwnedFd, BorrowedFd<'_>) -> io::Result<()>,
) -> io::Result<()> {
    spawn(
        peers,
        coordinator.request_fd_read_only()?,
        coordinator.response_fd(),
    )?;
    coordinator.wait_for_workers(TIMEOUT)?;
    Ok(())
}

/// A `u32` length and a protobuf message at `at`, read out of the region.
fn read_glibc_frame<M: KnownMessage>(region: &Region, at: usize, max: usize) -> io::Result<M> {
    let mut len = [0u8; 4];
    region.read_at(at, &mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len + 4 > max {
        return Err(io::Error::other(format!(
            "frame of {len} bytes past its {max}-byte buffer"
        )));
    }
    let mut bytes = vec![0u8; len];
    region.read_at(at + 4, &mut bytes)?;
    // As the channel decodes (the schema's wire types checked first), so the
    // baseline pays for what the channel pays for.
    Ok(decode_message(&bytes)?)
}

/// XOR of the payload's 8-byte words (and its tail): cheap, but it reads
/// every byte, so a worker cannot answer without touching the request. The
/// iceoryx2 server of `versus-iceoryx2` answers the same.
pub fn digest(bytes: &[u8]) -> u64 {
    let words = bytes.chunks_exact(8);
    let tail = words
        .remainder()
        .iter()
        .fold(0u64, |d, &b| d.rotate_left(8) ^ u64::from(b));
    words.fold(tail, |d, w| {
        d ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))
    })
}

/// Single-core `memcpy` bandwidth in bytes per second, copying `bytes` at a
/// time for at least `duration`: the ceiling for moving a large payload.
pub fn memcpy_bandwidth(bytes: usize, duration: Duration) -> f64 {
    let source = vec![0x5au8; bytes];
    let mut destination = vec![0u8; bytes];
    destination.copy_from_slice(&source); // fault the pages in
    let start = Instant::now();
    let mut copies = 0u64;
    while start.elapsed() < duration {
        for _ in 0..8 {
            destination.copy_from_slice(std::hint::black_box(&source));
            std::hint::black_box(&mut destination);
        }
        copies += 8;
    }
    (copies as f64 * bytes as f64) / start.elapsed().as_secs_f64()
}
