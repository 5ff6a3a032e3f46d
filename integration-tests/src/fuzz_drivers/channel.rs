//! The execute channel's regions, rewritten by another process.

use std::os::fd::OwnedFd;
use std::time::Duration;

use nodeipc_channel::{
    All, Channel, ChannelBuilder, Coordinator, Direction, First, Init, Rank0AfterAll, Raw, Role,
    SemKind, Worker,
};
use nodeipc_proto::execute::{self, ExecuteRequest, ExecuteResponse};
use nodeipc_sem::{Semaphore, ShmSemaphore};
use nodeipc_shm::Region;

use super::{Script, fresh_name};

/// Fields of the request region's header (`channel/README.md`, "The
/// layout"): where each sits and how wide it is.
pub const REQUEST_FIELDS: &[(usize, usize)] = &[
    (0, 8),  // magic
    (8, 4),  // version
    (12, 4), // workers
    (16, 4), // depth
    (20, 4), // semaphore kind
    (24, 8), // request capacity
    (32, 8), // response slot size
    (40, 8), // init slot size
    (48, 4), // coordinator pid
    (52, 4), // closed
    (56, 4), // init
    (64, 8), // coordinator start time
    (72, 8), // requests sent
];
/// Fields of the response region's header, as [`REQUEST_FIELDS`].
pub const RESPONSE_FIELDS: &[(usize, usize)] = &[
    (0, 8),  // magic
    (8, 4),  // version
    (12, 4), // workers
    (16, 8), // response slot size
    (24, 8), // init slot size
    (32, 4), // init
];

/// What a worker may name when it refuses the regions it was handed.
const CHANNEL_FIELDS: &[&str] = &[
    "request region magic",
    "response region magic",
    "layout version",
    "layout version (response region)",
    "worker count",
    "worker count (response region)",
    "depth",
    "semaphore kind",
    "request capacity",
    "response slot size",
    "init slot size",
    "request region size",
    "response region size",
    "region size (smaller than a header)",
    "header initialised flag",
];
/// What `published_config` may name when a header's value is out of range.
const CONFIG_FIELDS: &[&str] = &[
    "workers",
    "depth",
    "request capacity",
    "response slot size",
    "init slot size",
    "name",
];

fn small_config(script: &mut Script<'_>, name: &str) -> ChannelBuilder {
    let shape = script.byte();
    Channel::anonymous(name)
        .workers(1 + u32::from(shape % 3))
        .depth(1 + u32::from((shape >> 2) % 3))
        .request_capacity(64 + script.byte() as usize)
        .response_slot_size(64 + script.byte() as usize)
        .init_slot_size(16 + script.byte() as usize)
        .sems(if shape & 0x80 != 0 {
            SemKind::Named
        } else {
            SemKind::InRegion
        })
        .timeout(Duration::from_millis(3))
}

/// Another mapping of a region the coordinator owns, to write what a
/// hostile peer would.
fn remap(fd: std::os::fd::BorrowedFd<'_>) -> Region {
    Region::from_fd(fd.try_clone_to_owned().expect("dup")).expect("map")
}

fn dup(fd: std::os::fd::BorrowedFd<'_>) -> OwnedFd {
    fd.try_clone_to_owned().expect("dup")
}

/// Overwrites `fields` of the header at the start of `region` with the
/// script's bytes, except those the script keeps (one bit each).
fn scramble(region: &Region, fields: &[(usize, usize)], keep: u32, script: &mut Script<'_>) {
    for (i, &(at, width)) in fields.iter().enumerate() {
        let fresh: Vec<u8> = (0..width).map(|_| script.byte()).collect();
        if keep & (1 << i) == 0 {
            region.write_at(at, &fresh).expect("scramble");
        }
    }
}

/// A worker is handed the regions of a real coordinator whose headers (and
/// worker table) a hostile process rewrote: it joins, or refuses naming the
/// field. Then the coordinator meets the same rewritten worker table.
pub fn channel_headers(data: &[u8]) {
    let mut script = Script::new(data);
    let name = fresh_name("fuzz-chh");
    let channel = small_config(&mut script, &name);
    let workers = channel.config().workers;
    let coordinator = channel.create().expect("coordinator");
    let (request, response) = (
        remap(coordinator.request_fd()),
        remap(coordinator.response_fd()),
    );
    let keep_request = u32::from(script.u16());
    let keep_response = u32::from(script.byte());
    scramble(&request, REQUEST_FIELDS, keep_request, &mut script);
    scramble(&response, RESPONSE_FIELDS, keep_response, &mut script);
    if script.byte() & 1 == 1 {
        let entries = script.bytes(32 * workers as usize);
        response.write_at(64, entries).expect("worker table");
    }
    let rank = u32::from(script.byte()) % (workers + 1);
    let joined: nodeipc_channel::Result<Worker> = Worker::from_fds(
        &name,
        rank,
        dup(coordinator.request_fd()),
        dup(coordinator.response_fd()),
        Duration::from_millis(3),
    );
    match joined {
        Ok(mut worker) => {
            check_channel_error(&name, worker.recv().err());
            let answer = ExecuteResponse::default();
            check_channel_error(&name, worker.respond(&answer).err());
        }
        Err(e) => check_channel_error(&name, Some(e)),
    }
    check_channel_error(
        &name,
        coordinator.wait_for_workers(Duration::from_millis(1)).err(),
    );
}

pub(crate) fn check_channel_error(name: &str, error: Option<nodeipc_channel::Error>) {
    use nodeipc_channel::Error as E;
    let Some(error) = error else { return };
    let text = error.to_string();
    match &error {
        E::Mismatch {
            what, ours, theirs, ..
        } => {
            assert!(
                CHANNEL_FIELDS.contains(what),
                "a mismatch naming no field: {text}"
            );
            assert_ne!(ours, theirs, "{text}");
        }
        E::InvalidConfig { reason, .. } => assert!(
            CONFIG_FIELDS.iter().any(|f| reason.contains(f)),
            "a configuration refusal naming no field: {text}"
        ),
        E::Corrupt {
            len,
            slot_size,
            slot,
            ..
        } => {
            assert!(*len > *slot_size as u64, "{text}");
            assert!(!slot.is_empty());
        }
        E::Decode { slot, .. } => assert!(!slot.is_empty()),
        E::TooLarge { size, max, .. } => assert!(size > max, "{text}"),
        E::WorkerFailed { .. }
        | E::UnknownMessageType { .. }
        | E::Timeout { .. }
        | E::WorkerDied { .. }
        | E::WorkerLeft { .. }
        | E::CoordinatorDied { .. }
        | E::Closed { .. }
        | E::NothingOutstanding { .. }
        | E::RankTaken { .. }
        | E::RankOutOfRange { .. }
        | E::Sem { .. }
        | E::Shm { .. } => {}
        other => panic!("unexpected error: {other}"),
    }
    assert!(
        text.contains(name),
        "an error that does not name the channel: {text}"
    );
}

fn request(sequence: u64) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: execute::ExecuteType::Execute as i32,
        sequence,
        ..ExecuteRequest::default()
    }
}

/// The coordinator of a fuzzed channel: typed (`execute.proto`) or raw,
/// as the script chose.
enum Side {
    Typed(Coordinator),
    Raw(Coordinator<Raw, Raw>),
}

/// Its worker, of the same kind.
enum Peer {
    Typed(Worker),
    Raw(Worker<Raw, Raw>),
}

impl Side {
    fn coordinator_fds(&self) -> (OwnedFd, OwnedFd) {
        let (request, response) = match self {
            Side::Typed(c) => (c.request_fd(), c.response_fd()),
            Side::Raw(c) => (c.request_fd(), c.response_fd()),
        };
        (dup(request), dup(response))
    }

    fn send(&self, sequence: u64) -> nodeipc_channel::Result<()> {
        match self {
            Side::Typed(c) => c.send(&request(sequence)).map(drop),
            Side::Raw(c) => c.send(&sequence.to_le_bytes()).map(drop),
        }
    }

    /// A gather in one of its modes and forms: every answer (decoded, or
    /// as bytes), rank 0's after all, a try, or the first answer and the
    /// rest drained.
    fn gather(&self, how: u8) -> nodeipc_channel::Result<()> {
        match (self, how % 4) {
            (Side::Typed(c), 0) => c.recv(All).map(drop),
            (Side::Typed(c), 1) => c.recv(Rank0AfterAll).map(drop),
            (Side::Typed(c), 2) => c.try_recv(All).map(drop),
            (Side::Typed(c), _) => {
                c.recv(First).map(drop)?;
                c.drain().map(drop)
            }
            (Side::Raw(c), 0) => c.recv(All).map(|g| {
                std::hint::black_box(g.iter().map(|(_, b)| b.len()).sum::<usize>());
            }),
            (Side::Raw(c), 1) => c.recv(Rank0AfterAll).map(|p| {
                std::hint::black_box(p.bytes().len());
            }),
            (Side::Raw(c), 2) => c.try_recv(All).map(drop),
            (Side::Raw(c), _) => {
                c.recv(First).map(|f| {
                    std::hint::black_box(f.bytes().len());
                })?;
                c.drain().map(drop)
            }
        }
    }

    fn gather_init(&self) -> nodeipc_channel::Result<()> {
        match self {
            Side::Typed(c) => c.recv(Init).map(drop),
            Side::Raw(c) => c.recv(Init).map(drop),
        }
    }

    fn wait_for_workers(&self, timeout: Duration) -> nodeipc_channel::Result<()> {
        match self {
            Side::Typed(c) => c.wait_for_workers(timeout),
            Side::Raw(c) => c.wait_for_workers(timeout),
        }
    }
}

impl Peer {
    fn join(side: &Side, name: &str) -> nodeipc_channel::Result<Peer> {
        let (request, response) = side.coordinator_fds();
        let timeout = Duration::from_millis(3);
        Ok(match side {
            Side::Typed(_) => Peer::Typed(Worker::from_fds(name, 0, request, response, timeout)?),
            Side::Raw(_) => Peer::Raw(Worker::from_fds(name, 0, request, response, timeout)?),
        })
    }

    /// A worker's receive, one of its forms: decoded (or copied, raw), read
    /// in place (every byte looked at, then decoded), or into a buffer
    /// reused.
    fn receive(&mut self, how: u8) -> nodeipc_channel::Result<()> {
        match (self, how % 3) {
            (Peer::Typed(w), 0) => w.recv().map(drop),
            (Peer::Typed(w), 1) => {
                let request = w.recv_in_place()?;
                let sum = request.bytes().iter().map(|&b| u64::from(b)).sum::<u64>();
                std::hint::black_box(sum);
                request.decode().map(drop)
            }
            (Peer::Typed(w), _) => w.recv_into(&mut ExecuteRequest::default()),
            (Peer::Raw(w), 0) => w.recv().map(drop),
            (Peer::Raw(w), 1) => {
                let request = w.recv_in_place()?;
                let sum = request.bytes().iter().map(|&b| u64::from(b)).sum::<u64>();
                std::hint::black_box(sum);
                request.release()
            }
            (Peer::Raw(w), _) => w.recv_into(&mut Vec::new()),
        }
    }

    fn recv(&mut self) -> nodeipc_channel::Result<()> {
        self.receive(0)
    }

    fn respond(&mut self) -> nodeipc_channel::Result<()> {
        match self {
            Peer::Typed(w) => w.respond(&ExecuteResponse::default()),
            Peer::Raw(w) => w.respond(b"answer"),
        }
    }
}

/// A real coordinator and a real worker in one thread, and a hostile
/// process writing between their steps: request frames, response and init
/// slots (lengths past the slot, garbage bodies), the worker's table entry
/// (another pid, flags, resume point) and the request header's counters.
pub fn channel_slots(data: &[u8]) {
    let mut script = Script::new(data);
    let name = fresh_name("fuzz-chs");
    let shape = script.byte();
    let depth = 1 + u32::from(shape % 3);
    let channel = Channel::anonymous(&name)
        .workers(1)
        .depth(depth)
        .request_capacity(96)
        .response_slot_size(96)
        .init_slot_size(32)
        .timeout(Duration::from_millis(3));
    let layout = channel.config().layout();
    // Typed (execute.proto) or raw: the same regions, other calls.
    let coordinator = if shape & 0x80 == 0 {
        Side::Typed(channel.create().expect("coordinator"))
    } else {
        Side::Raw(channel.raw().create().expect("coordinator"))
    };
    let (request_map, response_map) = {
        let (request, response) = coordinator.coordinator_fds();
        (
            Region::from_fd(request).expect("map"),
            Region::from_fd(response).expect("map"),
        )
    };
    let mut worker = Peer::join(&coordinator, &name).expect("an honest worker joins");
    coordinator
        .wait_for_workers(Duration::from_secs(1))
        .expect("the worker is in");
    let mut sent = 0u64;
    for _ in 0..8 {
        if script.is_empty() {
            break;
        }
        let check = |r: nodeipc_channel::Result<()>| check_channel_error(&name, r.err());
        match script.byte() % 8 {
            // An honest round trip.
            0 => {
                check(coordinator.send(sent));
                sent += 1;
                let how = script.byte();
                check(worker.receive(how));
                check(worker.respond());
                check(coordinator.gather(how >> 2));
            }
            // A request frame rewritten after the coordinator wrote it.
            1 => {
                check(coordinator.send(sent));
                let at = layout.frame(sent);
                sent += 1;
                let prefix = script.u32();
                let body = script.bytes(96);
                request_map
                    .write_at(at, &prefix.to_le_bytes())
                    .expect("prefix");
                request_map.write_at(at + 4, body).expect("body");
                let how = script.byte();
                check(worker.receive(how));
            }
            // A response or init slot (any of the worker's ring) filled
            // with anything.
            2 | 3 => {
                let init = script.byte() & 1 == 1;
                let answer = u64::from(script.byte());
                let at = if init {
                    layout.init_slot(0, answer)
                } else {
                    layout.response_slot(0, answer)
                };
                let prefix = script.u32();
                let body = script.bytes(if init { 28 } else { 92 });
                response_map
                    .write_at(at, &prefix.to_le_bytes())
                    .expect("prefix");
                response_map.write_at(at + 4, body).expect("body");
                let consume: &ShmSemaphore = response_map
                    .view(layout.semaphore(Direction::Response, Role::Consume, 0))
                    .expect("semaphore");
                let _ = consume.post();
                let gathered = if init {
                    coordinator.gather_init()
                } else {
                    coordinator.gather(script.byte())
                };
                check(gathered);
            }
            // The worker's table entry: another pid, other flags, a resume point.
            4 => {
                let entry = script.bytes(32);
                response_map
                    .write_at(layout.worker_entry(0), entry)
                    .expect("entry");
                check(coordinator.send(sent));
                sent += 1;
            }
            // The request header's counters (requests sent, closed).
            5 => {
                let sent_word = u64::from(script.u32()) << (script.byte() % 40);
                request_map
                    .write_at(72, &sent_word.to_le_bytes())
                    .expect("sent");
                request_map
                    .write_at(52, &[script.byte() & 1, 0, 0, 0])
                    .expect("closed");
                check(worker.recv());
            }
            // The worker leaves and comes back where its entry says it stopped.
            6 => {
                drop(worker);
                worker = match Peer::join(&coordinator, &name) {
                    Ok(worker) => worker,
                    Err(e) => {
                        check_channel_error(&name, Some(e));
                        return;
                    }
                };
                check(worker.recv());
            }
            // A semaphore word of the worker's, set to anything.
            _ => {
                let which = [
                    (Direction::Request, Role::Produce),
                    (Direction::Request, Role::Consume),
                    (Direction::Response, Role::Produce),
                    (Direction::Response, Role::Consume),
                ][script.byte() as usize % 4];
                let at = layout.semaphore(which.0, which.1, 0);
                response_map
                    .write_at(at, &script.u32().to_le_bytes())
                    .expect("count");
                check(coordinator.send(sent));
                sent += 1;
                check(worker.recv());
            }
        }
    }
}
