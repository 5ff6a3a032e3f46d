//! Hostile-input drivers: each takes arbitrary bytes, plays the process that
//! wrote them (into a frame, a shared region, a socket), runs the decoder
//! that reads them, and panics only when a contract is broken — a decoder
//! panicked, read outside its buffer (Rust's bounds checks turn that into a
//! panic too), or returned an error that does not say what was wrong.
//!
//! The same code runs twice: as property tests on stable Rust
//! (`integration-tests/tests/fuzz_props.rs`, run by CI) and as cargo-fuzz
//! targets (`fuzz/fuzz_targets/*.rs`, which include this file).
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::Duration;

use nodeipc_barrier::{Group, GroupOptions, TransportChoice};
use nodeipc_channel::{
    ChannelConfig, ChannelOffer, Coordinator, Direction, Role, SemKind, Worker, connect,
    worker_logon,
};
use nodeipc_fdpass::{Credentials, FdHandle};
use nodeipc_proto::execute::{self, ExecuteRequest, ExecuteResponse};
use nodeipc_proto::{
    Error as ProtoError, KnownMessage, LEN_PREFIX, decode_frame, handshake, monitor, read_frame,
};
use nodeipc_sem::{Semaphore, ShmSemaphore};
use nodeipc_shm::Region;
use prost::Message;

/// Reads the fuzz input as a stream of small decisions; past its end every
/// read gives zeros, so any input is a complete script.
pub struct Script<'a> {
    data: &'a [u8],
}

impl<'a> Script<'a> {
    pub fn new(data: &'a [u8]) -> Script<'a> {
        Script { data }
    }

    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// Up to `max` bytes, as many as the next byte says.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let want = (self.byte() as usize).min(max).min(self.data.len());
        let (taken, rest) = self.data.split_at(want);
        self.data = rest;
        taken
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// A name no one else uses, under the prefix the tests' leak check knows.
fn fresh_name(tag: &str) -> String {
    nodeipc_testkit::unique_name(tag)
}

fn us() -> Credentials {
    Credentials {
        pid: std::process::id(),
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    }
}

fn our_start_time() -> u64 {
    nodeipc_fdpass::process_start_time(std::process::id()).expect("our own start time")
}

// ---------------------------------------------------------------------------
// Frames and protobuf messages: everything the peers exchange.
// ---------------------------------------------------------------------------

/// Decodes `buf` as a frame of `M` with limit `max`, and checks that the
/// answer is the one the bytes call for.
fn frame_of<M: KnownMessage + PartialEq + std::fmt::Debug>(buf: &[u8], max: usize) {
    let name = std::any::type_name::<M>();
    match decode_frame::<M>(buf, max) {
        Ok(msg) => {
            let size = nodeipc_proto::frame_len(buf, max).expect("a decoded frame has a length");
            assert!(
                size <= max && size <= buf.len(),
                "{name}: frame past its limits"
            );
            // What decoded encodes again, to something that decodes the same.
            let again = nodeipc_proto::encode_frame_to_vec(&msg).expect("re-encode");
            let back: M = decode_frame(&again, again.len()).expect("decode the re-encoding");
            assert_eq!(back, msg, "{name}: unstable decoding");
        }
        Err(ProtoError::TooLarge { size, max: limit }) => {
            assert!(
                size > limit && limit == max,
                "{name}: TooLarge {size} vs {limit}"
            );
        }
        Err(ProtoError::Truncated { need, have }) => {
            assert!(
                need > have && have == buf.len(),
                "{name}: Truncated {need} vs {have}"
            );
        }
        Err(ProtoError::Decode(e)) => {
            let size = nodeipc_proto::frame_len(buf, max).expect("a decode error has a frame");
            check_decode_error::<M>(&e, &buf[LEN_PREFIX..size]);
        }
        Err(other) => panic!("{name}: unexpected error {other}"),
    }
    // The same bytes as a stream: frames until the first error, never more
    // frames than the bytes could hold; a frame that does not decode says
    // why as the buffer's does (its bytes are in `scratch`).
    let mut stream = buf;
    let mut scratch = Vec::new();
    for _ in 0..=buf.len() / LEN_PREFIX {
        match read_frame::<M>(&mut stream, max, &mut scratch) {
            Ok(_) => {}
            Err(ProtoError::Decode(e)) => {
                check_decode_error::<M>(&e, &scratch);
                return;
            }
            Err(_) => return,
        }
    }
    assert!(stream.is_empty(), "{name}: more frames than bytes");
}

/// How prost says what was wrong with a message's bytes: the start of each
/// description prost 0.14 gives (`DecodeErrorKind`).
const DECODE_FAULTS: &[&str] = &[
    "length delimiter exceeds maximum usize value",
    "invalid varint",
    "recursion limit reached",
    "invalid wire type value: ",
    "invalid key value: ",
    "invalid tag value: 0",
    "invalid wire type: ",
    "buffer underflow",
    "delimited length exceeded",
    "unexpected end group tag",
    "invalid string value: data is not UTF-8 encoded",
];

/// The `(message, field)` path and the description in a prost decode error's
/// text: `failed to decode Protobuf message: Inner.f: Outer.g: what was
/// wrong`, innermost first. `None` when the text is not shaped so.
fn split_decode_error(text: &str) -> Option<(Vec<(&str, &str)>, &str)> {
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut rest = text.strip_prefix("failed to decode Protobuf message: ")?;
    let mut path = Vec::new();
    while let Some((head, tail)) = rest.split_once(": ") {
        match head.split_once('.') {
            Some((message, field)) if ident(message) && ident(field) => {
                path.push((message, field));
                rest = tail;
            }
            _ => break,
        }
    }
    Some((path, rest))
}

/// A decode error of `M` from `body` says what was wrong: prost's text, a
/// fault prost knows, a path of `Message.field` steps ending (outermost) at
/// a field of `M` — and a path there must be whenever the fault lies inside
/// a field, that is whenever `body` is well-formed protobuf at the top level
/// (it skips cleanly as fields nobody knows). Returns the error's text.
pub fn check_decode_error<M: Message + Default>(error: &prost::DecodeError, body: &[u8]) -> String {
    let text = error.to_string();
    let type_name = std::any::type_name::<M>();
    let short = type_name.rsplit("::").next().unwrap_or(type_name);
    let Some((path, fault)) = split_decode_error(&text) else {
        panic!("{short}: a decode error not in prost's words: {text:?}");
    };
    assert!(
        DECODE_FAULTS.iter().any(|f| fault.starts_with(f)),
        "{short}: a decode error naming no known fault: {text:?}"
    );
    for &(message, field) in &path {
        assert!(
            message.starts_with(|c: char| c.is_ascii_uppercase())
                && field.starts_with(|c: char| c.is_ascii_lowercase()),
            "{short}: a decode error whose path is not Message.field steps: {text:?}"
        );
    }
    match path.last() {
        Some(&(outer, _)) => assert_eq!(
            outer, short,
            "{short}: a decode error whose path starts at another message: {text:?}"
        ),
        None => assert!(
            <() as Message>::decode(body).is_err(),
            "{short}: the bytes are well-formed protobuf, so the fault is inside a field, \
             but the error names none: {text:?} (bytes {body:02x?})"
        ),
    }
    text
}

/// Every message type of the three `.proto` files, the first byte choosing
/// which and the second the reader's limit.
pub fn frame(data: &[u8]) {
    let mut script = Script::new(data);
    let which = script.byte();
    let max = match script.byte() {
        0..=63 => script.u16() as usize,
        64..=127 => usize::MAX,
        128..=191 => nodeipc_monitor::MAX_FRAME,
        _ => 4096,
    };
    let buf = script.rest();
    macro_rules! dispatch {
        ($($ty:ty),* $(,)?) => {{
            let all: &[fn(&[u8], usize)] = &[$(frame_of::<$ty>),*];
            all[which as usize % all.len()](buf, max)
        }};
    }
    nodeipc_proto::every_message!(dispatch)
}

// ---------------------------------------------------------------------------
// Descriptor handles.
// ---------------------------------------------------------------------------

/// What `FdHandle::from_bytes` may name in a refusal: every field it checks.
const HANDLE_FIELDS: &[&str] = &[
    "bytes, expected",
    "magic",
    "layout version",
    "reserved",
    "pid",
    "descriptor",
];

/// `FdHandle::from_bytes`: a handle that writes back to the very same bytes,
/// or a refusal naming the field.
pub fn fd_handle(data: &[u8]) {
    match FdHandle::from_bytes(data) {
        Ok(handle) => assert_eq!(
            &handle.to_bytes()[..],
            data,
            "a handle that does not round-trip"
        ),
        Err(nodeipc_fdpass::Error::BadHandle { reason }) => assert!(
            HANDLE_FIELDS.iter().any(|f| reason.contains(f)),
            "a refusal that names no field: {reason}"
        ),
        Err(other) => panic!("unexpected error {other}"),
    }
}

// ---------------------------------------------------------------------------
// The barrier's vault.
// ---------------------------------------------------------------------------

/// Where the vault keeps what the driver fixes up (`barrier/src/vault.rs`;
/// `fuzz_props::the_vault_offsets_the_drivers_use_are_the_real_ones` keeps
/// these honest).
pub mod vault_layout {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const WORLD: usize = 12;
    pub const SLOT: usize = 16;
    pub const INIT: usize = 20;
    pub const JOINED: usize = 24;
    pub const POISON: usize = 28;
    /// The rank table: 32 bytes a rank, start time (`u64`), pid, flags.
    pub const RANKS: usize = 768;
    pub const RANK_ENTRY: usize = 32;
    pub const MAGIC_VALUE: &[u8; 8] = b"NIPCVLT1";
    /// Bytes of a vault for `world` ranks with `slot`-byte slots.
    pub fn size(world: usize, slot: usize) -> usize {
        let data_at = (RANKS + world * RANK_ENTRY).next_multiple_of(64);
        let stride = 8 + slot.next_multiple_of(8);
        (data_at + 2 * world * stride).next_multiple_of(64) + 2 * world * 32
    }
}

/// What a joiner may name when it refuses a vault.
const VAULT_FIELDS: &[&str] = &["layout version", "world size", "slot size", "vault size"];

/// A joiner meets a vault some other process (us) wrote: the bytes fill the
/// region, then flag bits put back the fields a real rank 0 would have
/// written (so the fuzzer reaches past each check), and a live rank table
/// (our own pid) lets the join go through to the collectives, whose slot
/// lengths and descriptor handles are the fuzzer's too.
pub fn vault(data: &[u8]) {
    use vault_layout as v;
    let mut script = Script::new(data);
    let fix = script.u16();
    let world = 2 + (script.byte() % 3) as usize;
    let slot = 1 + script.byte() as usize;
    let rank = 1 + (script.byte() as usize % (world - 1));
    let right_size = v::size(world, slot);
    let size = match script.byte() {
        0..=191 => right_size,
        n => (right_size + 64).saturating_sub(n as usize).max(1),
    };
    let name = fresh_name("fuzz-vault");
    let region = Region::create(&name, size).expect("create the vault");
    let content = script.rest();
    if !content.is_empty() {
        let mut filled = vec![0u8; size];
        for (i, b) in filled.iter_mut().enumerate() {
            *b = content[i % content.len()];
        }
        region.write_at(0, &filled).expect("fill");
    }
    let put = |at: usize, bytes: &[u8]| {
        if at + bytes.len() <= size {
            region.write_at(at, bytes).expect("fix up");
        }
    };
    let bit = |n: u32| fix & (1 << n) != 0;
    if bit(0) {
        put(v::MAGIC, v::MAGIC_VALUE);
    }
    if bit(1) {
        put(v::VERSION, &1u32.to_le_bytes());
    }
    if bit(2) {
        put(v::WORLD, &(world as u32).to_le_bytes());
    }
    if bit(3) {
        put(v::SLOT, &(slot as u32).to_le_bytes());
    }
    if !bit(4) {
        put(v::INIT, &1u32.to_le_bytes());
    }
    if bit(5) {
        // Every other rank registered, as this live process.
        for r in (0..world).filter(|&r| r != rank) {
            let at = v::RANKS + r * v::RANK_ENTRY;
            put(at, &our_start_time().to_le_bytes());
            put(at + 8, &std::process::id().to_le_bytes());
            put(at + 12, &1u32.to_le_bytes());
        }
    }
    if bit(6) {
        put(v::JOINED, &(world as u32 - 1).to_le_bytes());
    }
    if bit(7) {
        put(v::POISON, &0u32.to_le_bytes());
    }
    if bit(8) {
        // Our own entry free, so the join does not see a rank joined twice.
        put(v::RANKS + rank * v::RANK_ENTRY + 12, &0u32.to_le_bytes());
    }
    let options = GroupOptions::new(&name, rank as u32, world as u32)
        .slot_size(slot)
        .timeout(Duration::from_millis(3))
        .transport(TransportChoice::Pidfd);
    match Group::join(options) {
        Ok(mut group) => {
            let t = Duration::from_millis(3);
            check_group_error(&name, group.all_gather_timeout(b"mine", t).err());
            check_group_error(&name, group.broadcast_timeout(0, b"", t).err());
            let memfd = Region::anonymous(64).expect("memfd");
            check_group_error(&name, group.exchange_fds_timeout(memfd.as_fd(), t).err());
            check_group_error(&name, group.barrier_timeout(t).err());
        }
        Err(e) => check_group_error(&name, Some(e)),
    }
    drop(region);
}

fn check_group_error(name: &str, error: Option<nodeipc_barrier::Error>) {
    use nodeipc_barrier::Error as E;
    let Some(error) = error else { return };
    let text = error.to_string();
    assert!(
        text.contains(name),
        "an error that does not name the group: {text}"
    );
    match &error {
        E::Mismatch {
            what, ours, theirs, ..
        } => {
            assert!(
                VAULT_FIELDS.contains(what),
                "a mismatch naming no field: {text}"
            );
            assert_ne!(ours, theirs, "{text}");
        }
        E::NotAVault { magic, .. } => assert_ne!(magic.to_le_bytes(), *vault_layout::MAGIC_VALUE),
        E::Corrupt { len, slot_size, .. } => assert!(*len > *slot_size as u64, "{text}"),
        E::TooLarge { len, slot_size, .. } => assert!(len > slot_size, "{text}"),
        E::Timeout { .. }
        | E::PeerDied { .. }
        | E::PeerLeft { .. }
        | E::Poisoned { .. }
        | E::InvalidOptions { .. }
        | E::Transport { .. }
        | E::Protocol { .. }
        | E::FdPass { .. }
        | E::Shm { .. }
        | E::RankOutOfRange { .. } => {}
        other => panic!("unexpected error: {other}"),
    }
}

// ---------------------------------------------------------------------------
// The execute channel's regions.
// ---------------------------------------------------------------------------

/// Fields of the two headers (`channel/README.md`, "The layout"): where each
/// sits and how wide it is, request region first, then the response region.
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

fn small_config(script: &mut Script<'_>, name: &str) -> ChannelConfig {
    let shape = script.byte();
    ChannelConfig::new(name, 1 + u32::from(shape % 3))
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
    let config = small_config(&mut script, &name);
    let workers = config.workers;
    let coordinator = Coordinator::create_anonymous(config).expect("coordinator");
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
    let joined = Worker::from_fds(
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

fn check_channel_error(name: &str, error: Option<nodeipc_channel::Error>) {
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

/// A real coordinator and a real worker in one thread, and a hostile
/// process writing between their steps: request frames, response and init
/// slots (lengths past the slot, garbage bodies), the worker's table entry
/// (another pid, flags, resume point) and the request header's counters.
pub fn channel_slots(data: &[u8]) {
    let mut script = Script::new(data);
    let name = fresh_name("fuzz-chs");
    let depth = 1 + u32::from(script.byte() % 3);
    let config = ChannelConfig::new(&name, 1)
        .depth(depth)
        .request_capacity(96)
        .response_slot_size(96)
        .init_slot_size(32)
        .timeout(Duration::from_millis(3));
    let layout = config.layout();
    let mut coordinator = Coordinator::create_anonymous(config).expect("coordinator");
    let (request_map, response_map) = (
        remap(coordinator.request_fd()),
        remap(coordinator.response_fd()),
    );
    let mut worker = Worker::from_fds(
        &name,
        0,
        dup(coordinator.request_fd()),
        dup(coordinator.response_fd()),
        Duration::from_millis(3),
    )
    .expect("an honest worker joins");
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
                check(coordinator.send(&request(sent)).map(drop));
                sent += 1;
                check(worker.recv().map(drop));
                check(worker.respond(&ExecuteResponse::default()));
                check(coordinator.recv_all().map(drop));
            }
            // A request frame rewritten after the coordinator wrote it.
            1 => {
                check(coordinator.send(&request(sent)).map(drop));
                let at = layout.frame(sent);
                sent += 1;
                let prefix = script.u32();
                let body = script.bytes(96);
                request_map
                    .write_at(at, &prefix.to_le_bytes())
                    .expect("prefix");
                request_map.write_at(at + 4, body).expect("body");
                check(worker.recv().map(drop));
            }
            // A response or init slot the worker filled with anything.
            2 | 3 => {
                let init = script.byte() & 1 == 1;
                let at = if init {
                    layout.init_slot(0)
                } else {
                    layout.response_slot(0)
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
                    coordinator.recv_init().map(drop)
                } else {
                    coordinator.recv_all().map(drop)
                };
                check(gathered);
            }
            // The worker's table entry: another pid, other flags, a resume point.
            4 => {
                let entry = script.bytes(32);
                response_map
                    .write_at(layout.worker_entry(0), entry)
                    .expect("entry");
                check(coordinator.send(&request(sent)).map(drop));
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
                check(worker.recv().map(drop));
            }
            // The worker leaves and comes back where its entry says it stopped.
            6 => {
                drop(worker);
                worker = match Worker::from_fds(
                    &name,
                    0,
                    dup(coordinator.request_fd()),
                    dup(coordinator.response_fd()),
                    Duration::from_millis(3),
                ) {
                    Ok(worker) => worker,
                    Err(e) => {
                        check_channel_error(&name, Some(e));
                        return;
                    }
                };
                check(worker.recv().map(drop));
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
                check(coordinator.send(&request(sent)).map(drop));
                sent += 1;
                check(worker.recv().map(drop));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The handshake: the logon a server reads, the reply a client reads.
// ---------------------------------------------------------------------------

fn offer() -> &'static ChannelOffer {
    static OFFER: OnceLock<ChannelOffer> = OnceLock::new();
    OFFER.get_or_init(|| {
        // Anonymous regions: nothing named, nothing to leak.
        let coordinator =
            Coordinator::create_anonymous(ChannelConfig::new("/nodeipc-fuzz-logon", 4))
                .expect("coordinator");
        coordinator.offer().expect("offer")
    })
}

/// The logon a handshake server reads from a client: a frame of at most
/// 4 KiB, then the coordinator's decision on it.
pub fn logon(data: &[u8]) {
    let mut stream = data;
    let mut scratch = Vec::new();
    let logon = match read_frame::<handshake::Logon>(&mut stream, 4096, &mut scratch) {
        Ok(logon) => logon,
        Err(ProtoError::TooLarge { .. } | ProtoError::Truncated { .. } | ProtoError::Closed) => {
            // Not even a frame: the bare message, as a server would see a
            // well-framed one.
            match handshake::Logon::decode(data) {
                Ok(logon) => logon,
                Err(e) => {
                    check_decode_error::<handshake::Logon>(&e, data);
                    return;
                }
            }
        }
        Err(ProtoError::Decode(e)) => {
            // The frame's bytes were read into `scratch`.
            check_decode_error::<handshake::Logon>(&e, &scratch);
            return;
        }
        Err(other) => panic!("unexpected error {other}"),
    };
    match offer().decide(&logon, &us()) {
        Ok(offer) => {
            assert_eq!(offer.accept.fds.len(), offer.descriptors.len());
            assert!(offer.accept.geometry.is_some());
            assert!(logon.worker_rank < 4);
        }
        Err(reject) => {
            assert!(!reject.reason.is_empty(), "a rejection without a reason");
            assert!(
                handshake::RejectCode::try_from(reject.code).is_ok(),
                "a rejection with an unknown code {}",
                reject.code
            );
        }
    }
}

/// A fake handshake server: for each connection it reads the logon and
/// answers with the next script it was given (bytes, and regions filled with
/// bytes attached to the first byte).
pub struct FakeServer {
    path: PathBuf,
    dir: PathBuf,
    scripts: Mutex<mpsc::Sender<(Vec<u8>, Vec<Region>)>>,
}

impl FakeServer {
    pub fn start() -> FakeServer {
        let dir = PathBuf::from(format!("/tmp{}", fresh_name("fuzz-hs")));
        std::fs::create_dir(&dir).expect("directory");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
        let path = dir.join("logon.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let (tx, rx) = mpsc::channel::<(Vec<u8>, Vec<Region>)>();
        std::thread::spawn(move || {
            for (reply, regions) in rx {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut scratch = Vec::new();
                let _ = read_frame::<handshake::Logon>(&mut stream, 4096, &mut scratch);
                let fds: Vec<_> = regions.iter().map(Region::as_fd).collect();
                if let Some((first, rest)) = reply.split_first()
                    && nodeipc_fdpass::send_fds(&stream, &[*first], &fds).is_ok()
                {
                    let _ = stream.write_all(rest);
                }
            }
        });
        FakeServer {
            path,
            dir,
            scripts: Mutex::new(tx),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers the next connection with `reply` (its first byte carrying
    /// `regions`' descriptors).
    pub fn answer(&self, reply: Vec<u8>, regions: Vec<Region>) {
        self.scripts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((reply, regions))
            .expect("fake server alive");
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client logs on to a server (same uid, but not honest) that answers with
/// arbitrary bytes and regions full of arbitrary bytes: `connect` and
/// `Session::into_worker` return a session, a worker or an error.
pub fn logon_reply(server: &FakeServer, data: &[u8]) {
    let mut script = Script::new(data);
    let regions: Vec<Region> = (0..script.byte() % 4)
        .map(|_| {
            let size = 64 + usize::from(script.u16() % 4096);
            let region = Region::anonymous(size).expect("memfd");
            let fill = script.bytes(size);
            region.write_at(0, fill).expect("fill");
            region
        })
        .collect();
    let reply = script.rest().to_vec();
    if reply.is_empty() {
        return;
    }
    server.answer(reply, regions);
    match connect(server.path(), &worker_logon(0), Duration::from_millis(500)) {
        Ok(session) => {
            assert_eq!(session.fds.len(), session.accept.fds.len());
            let name = session.channel_name().unwrap_or("").to_owned();
            match session.into_worker(0, Duration::from_millis(3)) {
                Ok(_) => {}
                Err(nodeipc_channel::Error::Handshake { reason, .. }) => {
                    assert!(reason.contains("no "), "{reason}")
                }
                Err(e) if !name.is_empty() => check_channel_error(&name, Some(e)),
                Err(_) => {}
            }
        }
        Err(e) => {
            use nodeipc_channel::Error as E;
            match e {
                E::Rejected { .. }
                | E::Handshake { .. }
                | E::Timeout { .. }
                | E::Proto { .. }
                | E::FdPass { .. }
                | E::Io { .. } => {}
                other => panic!("unexpected error: {other}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The rank monitor's socket.
// ---------------------------------------------------------------------------

/// A monitor server on a thread of this process, its periodic check an hour
/// away: whatever the bytes register, no timeout can fire a signal at us.
pub struct MonitorFixture {
    socket: PathBuf,
    dir: PathBuf,
    stop: nodeipc_monitor::StopHandle,
    serving: Option<std::thread::JoinHandle<()>>,
    pub exchanges: AtomicU32,
}

impl MonitorFixture {
    pub fn start() -> MonitorFixture {
        let dir = PathBuf::from(format!("/tmp{}", fresh_name("fuzz-mon")));
        std::fs::create_dir(&dir).expect("directory");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
        let socket = dir.join("rank.sock");
        let config = nodeipc_monitor::MonitorConfig {
            check_interval: nodeipc_monitor::MAX_CHECK_INTERVAL,
            connection_wait: Duration::from_secs(2),
            ..nodeipc_monitor::MonitorConfig::default()
        };
        let mut server = nodeipc_monitor::MonitorServer::bind(&socket, config).expect("bind");
        server.on_log(|_, _| {});
        let stop = server.stop_handle();
        let serving = std::thread::spawn(move || {
            server.run().expect("the monitor keeps serving");
        });
        MonitorFixture {
            socket,
            dir,
            stop,
            serving: Some(serving),
            exchanges: AtomicU32::new(0),
        }
    }
}

impl Drop for MonitorFixture {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(serving) = self.serving.take() {
            let _ = serving.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Arbitrary bytes on the rank socket: every frame the bytes hold gets the
/// answer the protocol calls for, in order — an Error quoting the decode
/// error for a frame that is not a `ClientMessage`, an Error and the end for
/// an oversize prefix, and for a message what the connection's state calls
/// for (see [`RankConnection`]): Errors name what was wrong. The server
/// closes the connection once we stop sending, forgets its rank, and
/// answers the next client.
pub fn monitor_stream(fixture: &MonitorFixture, data: &[u8]) {
    let mut stream = UnixStream::connect(&fixture.socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // The server may close early (an oversize prefix): a failed write is fine.
    let _ = stream.write_all(data);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut replies = Vec::new();
    if let Err(e) = stream.read_to_end(&mut replies) {
        assert!(
            e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
            "the monitor neither answered nor closed within 5 s"
        );
    }
    let mut answers = Vec::new();
    let mut rest = replies.as_slice();
    let mut scratch = Vec::new();
    while !rest.is_empty() {
        answers.push(
            read_frame::<monitor::ServerMessage>(
                &mut rest,
                nodeipc_monitor::MAX_FRAME,
                &mut scratch,
            )
            .expect("every answer is a well-formed ServerMessage frame"),
        );
    }
    let mut answers = answers.into_iter();
    let mut connection = RankConnection::default();
    let mut sent = data;
    let mut frames = 0;
    loop {
        let size = match nodeipc_proto::frame_len(sent, nodeipc_monitor::MAX_FRAME) {
            Ok(size) => size,
            Err(ProtoError::TooLarge { size, .. }) => {
                let answer = answers
                    .next()
                    .unwrap_or_else(|| panic!("an oversize prefix (frame {frames}) got no answer"));
                let cause = error_cause(&answer, "an oversize prefix");
                assert!(
                    cause.contains("exceeds the limit") && cause.contains(&size.to_string()),
                    "the refusal of an oversize prefix of {size} bytes does not say so: {cause:?}"
                );
                break;
            }
            // A partial frame when the stream ends is never answered.
            Err(_) => break,
        };
        let body = &sent[LEN_PREFIX..size];
        sent = &sent[size..];
        let answer = answers
            .next()
            .unwrap_or_else(|| panic!("frame {frames} ({body:02x?}) got no answer"));
        match monitor::ClientMessage::decode(body) {
            Ok(msg) => connection.answered(&msg, &answer),
            Err(e) => {
                let text = check_decode_error::<monitor::ClientMessage>(&e, body);
                let cause = error_cause(&answer, "a frame that is not a ClientMessage");
                assert!(
                    cause.contains("holds no valid message") && cause.ends_with(&text),
                    "the refusal of a malformed frame does not say what was wrong \
                     (expected prost's {text:?}): {cause:?}"
                );
            }
        }
        frames += 1;
    }
    let extra: Vec<_> = answers.collect();
    assert!(
        extra.is_empty(),
        "{} answers more than the {frames} frames sent: {extra:?}",
        extra.len()
    );
    let n = fixture.exchanges.fetch_add(1, Ordering::Relaxed);
    if n.is_multiple_of(16) {
        let status =
            nodeipc_monitor::ControlClient::connect(&fixture.socket, Duration::from_secs(5))
                .and_then(|mut c| c.status())
                .expect("the monitor still answers");
        // The connection is gone, and with it its rank: no heartbeat of it
        // counts any more (and never more than it sent).
        assert!(
            status.rank.is_none() && status.heartbeats == 0,
            "a closed connection's rank is still registered ({:?}, {} heartbeats; {} sent)",
            status.rank,
            status.heartbeats,
            connection.heartbeats_sent
        );
    }
}

/// The cause of an Error answer; any other answer to `what` is a failure.
fn error_cause<'m>(answer: &'m monitor::ServerMessage, what: &str) -> &'m str {
    match &answer.msg {
        Some(monitor::server_message::Msg::Error(e)) => {
            assert!(!e.cause.is_empty(), "an Error without a cause for {what}");
            &e.cause
        }
        other => panic!("{what} was answered with {other:?}, not an Error"),
    }
}

/// What the monitor knows of one rank connection, as its answers must show
/// it: the pid registered by an accepted Init (none before), the heartbeats
/// accepted since, the sections open (`monitor.proto` and the server's rules).
#[derive(Default)]
pub struct RankConnection {
    registered: Option<u32>,
    heartbeats: u64,
    heartbeats_sent: u64,
    sections: Vec<String>,
}

impl RankConnection {
    /// Checks `answer` against what `msg` calls for, and moves on.
    fn answered(&mut self, msg: &monitor::ClientMessage, answer: &monitor::ServerMessage) {
        use monitor::client_message::Msg as C;
        use monitor::server_message::Msg as S;
        let us = std::process::id();
        let outcome = match &answer.msg {
            Some(S::Error(e)) => Err(e.cause.as_str()),
            Some(S::Ok(ok)) => Ok(ok),
            Some(S::Status(status)) => {
                assert!(
                    matches!(msg.msg, Some(C::StatusQuery(_))),
                    "{msg:?} was answered with a Status"
                );
                assert_eq!(
                    status.rank.as_ref().map(|r| r.pid),
                    self.registered,
                    "the Status names another rank than the Init accepted"
                );
                // Every heartbeat the monitor counted is one it accepted
                // on this connection since Init (the shared-memory region,
                // if one went with the Init's answer, was dropped unused).
                assert_eq!(
                    status.heartbeats, self.heartbeats,
                    "the Status counts {} heartbeats; {} were accepted ({} sent)",
                    status.heartbeats, self.heartbeats, self.heartbeats_sent
                );
                let open: Vec<&str> = status
                    .open_sections
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect();
                assert_eq!(open, self.sections, "the Status's open sections");
                return;
            }
            None => panic!("an answer with nothing set, to {msg:?}"),
        };
        // Whether a refusal (`Err`) names what was wrong: it contains one of
        // `terms`.
        let refused = |outcome: &Result<&monitor::Ok, &str>, terms: &[&str]| match outcome {
            Err(cause) => {
                assert!(
                    terms.iter().any(|t| cause.contains(t)),
                    "refusing {msg:?}, the cause names none of {terms:?}: {cause:?}"
                );
            }
            Ok(_) => panic!("{msg:?} was accepted; expected an Error naming one of {terms:?}"),
        };
        match &msg.msg {
            None => refused(&outcome, &["empty ClientMessage"]),
            Some(C::StatusQuery(_)) => panic!("a StatusQuery was answered with {answer:?}"),
            Some(C::Init(init)) => {
                let Some(info) = &init.rank else {
                    let term = if self.registered.is_some() {
                        "already registered"
                    } else {
                        "without rank info"
                    };
                    return refused(&outcome, &[term]);
                };
                if self.registered.is_some() {
                    return refused(&outcome, &["already registered"]);
                }
                let pid = if info.pid == 0 { us } else { info.pid };
                match outcome {
                    Ok(ok) => {
                        assert!(
                            pid == us || is_descendant_of(pid, us),
                            "an Init naming pid {pid}, neither us ({us}) nor our descendant, was accepted"
                        );
                        assert!(
                            ok.config.is_some(),
                            "an Ok to Init without the configuration"
                        );
                        self.registered = Some(pid);
                        self.heartbeats = 0;
                        self.sections.clear();
                    }
                    Err(cause) => {
                        assert_ne!(pid, us, "our own Init was refused: {cause}");
                        assert!(
                            cause.contains(&pid.to_string()),
                            "the refusal of an Init naming pid {pid} does not name it: {cause:?}"
                        );
                        refused(
                            &outcome,
                            &[
                                "cannot watch pid",
                                "is neither the connecting process",
                                "exited during registration",
                            ],
                        );
                    }
                }
            }
            Some(C::Heartbeat(beat)) => {
                self.heartbeats_sent += 1;
                if beat
                    .state
                    .as_ref()
                    .is_some_and(|s| s.len() > nodeipc_monitor::MAX_STATE)
                {
                    refused(&outcome, &["heartbeat state of"]);
                } else if self.registered.is_none() {
                    refused(&outcome, &["Heartbeat before Init"]);
                } else {
                    assert!(outcome.is_ok(), "a heartbeat was refused: {outcome:?}");
                    self.heartbeats += 1;
                }
            }
            Some(C::Section(section)) => {
                use monitor::SectionAction as A;
                if self.registered.is_none() {
                    return refused(&outcome, &["Section before Init"]);
                }
                let name = section.name.as_str();
                let bad_name = section_name_fault(name);
                let open = self.sections.iter().position(|n| n == name);
                match A::try_from(section.action).unwrap_or(A::Unspecified) {
                    A::Unspecified => {
                        refused(&outcome, &["is not OPEN (1), CLOSE (2) or CLOSE_ALL (3)"])
                    }
                    A::Open | A::Close if bad_name.is_some() => {
                        refused(&outcome, &[bad_name.unwrap_or_default()])
                    }
                    A::Open if open.is_some() => refused(&outcome, &["is already open"]),
                    A::Open if self.sections.len() >= nodeipc_monitor::MAX_SECTIONS => {
                        refused(&outcome, &["sections are open already"])
                    }
                    A::Open => {
                        assert!(
                            outcome.is_ok(),
                            "opening section {name:?} was refused: {outcome:?}"
                        );
                        self.sections.push(name.to_owned());
                    }
                    A::Close => match open {
                        None => refused(&outcome, &["is not open"]),
                        Some(i) => {
                            assert!(
                                outcome.is_ok(),
                                "closing section {name:?} was refused: {outcome:?}"
                            );
                            self.sections.remove(i);
                        }
                    },
                    A::CloseAll => {
                        assert!(
                            outcome.is_ok(),
                            "closing all sections was refused: {outcome:?}"
                        );
                        self.sections.clear();
                    }
                }
            }
            Some(C::UpdateConfig(update)) => {
                let faults: Vec<&str> = update
                    .timeouts
                    .iter()
                    .flat_map(|t| t.section_timeouts_ms.keys())
                    .filter_map(|name| section_name_fault(name))
                    .collect();
                if !faults.is_empty() {
                    return refused(&outcome, &faults);
                }
                // The monitor keeps the section timeouts of earlier
                // connections: this update may take it past the limit.
                match outcome {
                    Ok(ok) => {
                        let config = ok
                            .config
                            .as_ref()
                            .expect("an Ok to UpdateConfig carries the configuration");
                        let sections = config
                            .timeouts
                            .as_ref()
                            .map_or(0, |t| t.section_timeouts_ms.len());
                        assert!(
                            sections <= nodeipc_monitor::MAX_SECTIONS,
                            "{sections} section timeouts accepted"
                        );
                    }
                    Err(_) => refused(&outcome, &["section timeouts; at most"]),
                }
            }
        }
    }
}

/// What the monitor says of a section name it refuses (empty, or longer than
/// its limit); `None` for a name it takes.
fn section_name_fault(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("non-empty name")
    } else if name.len() > nodeipc_monitor::MAX_SECTION_NAME {
        Some("section name of")
    } else {
        None
    }
}

/// Whether `pid`'s chain of parents (`/proc/PID/stat`) reaches `ancestor`.
fn is_descendant_of(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    for _ in 0..64 {
        if current == ancestor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{current}/stat")) else {
            return false;
        };
        // The parent is the second field after the command name, which ends
        // at the last ')'.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        match parent {
            Some(parent) if parent != 0 && parent != current => current = parent,
            _ => return false,
        }
    }
    false
}
