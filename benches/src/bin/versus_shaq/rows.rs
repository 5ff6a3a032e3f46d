//! One sample of one row: a fresh pair of processes, a warm-up, then the
//! measured part. Messages are 64 bytes; every side checks every word it
//! receives and writes every word it sends, for both queues alike.

use std::fs::File;
use std::hint::spin_loop;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_cli::bench::queue::{Msg, check, msg, reply};
use nodeipc_queue::{Consumer, Producer, Queue};
use nodeipc_shm::Region;

use crate::peer::{Peer, inherited};

const SCHEMA: u64 = 0x7673_7368_6171; // "vshaq"
const CAPACITY: u32 = 1024;
const BATCH: usize = 64;
const WAIT: Duration = Duration::from_secs(5);

fn queue_err(e: nodeipc_queue::Error) -> io::Error {
    io::Error::other(e)
}

fn shaq_err(e: impl std::fmt::Debug) -> io::Error {
    io::Error::other(format!("shaq: {e:?}"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Row {
    RtPoll,
    RtBlock,
    Floor,
    Throughput,
    PoolLocal,
    PoolRemote,
    PoolViewHash,
    MpmcRt1,
    MpmcRt2,
    MpmcTp1,
    MpmcTp2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Impl {
    Nodeipc,
    Shaq,
    RtsAlloc,
    /// Copy a block out, then work on the copy.
    CopyThenHash,
    /// Two words in one mapping: the floor any queue's round trip sits on.
    Floor,
}

impl Impl {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Impl::Nodeipc => "nodeipc",
            Impl::Shaq => "shaq",
            Impl::RtsAlloc => "rts-alloc",
            Impl::CopyThenHash => "copy-then-hash",
            Impl::Floor => "floor",
        }
    }
}

impl Row {
    pub(crate) const ALL: [Row; 11] = [
        Row::RtPoll,
        Row::RtBlock,
        Row::Floor,
        Row::Throughput,
        Row::PoolLocal,
        Row::PoolRemote,
        Row::PoolViewHash,
        Row::MpmcRt1,
        Row::MpmcRt2,
        Row::MpmcTp1,
        Row::MpmcTp2,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Row::RtPoll => "spsc-rt-poll",
            Row::RtBlock => "spsc-rt-block",
            Row::Floor => "floor-rt",
            Row::Throughput => "spsc-throughput",
            Row::PoolLocal => "pool-local",
            Row::PoolRemote => "pool-remote",
            Row::PoolViewHash => "pool-view-hash",
            Row::MpmcRt1 => "mpmc-rt-1x1",
            Row::MpmcRt2 => "mpmc-rt-2x2",
            Row::MpmcTp1 => "mpmc-tp-1x1",
            Row::MpmcTp2 => "mpmc-tp-2x2",
        }
    }

    pub(crate) fn unit(self) -> &'static str {
        match self {
            Row::Throughput | Row::MpmcTp1 | Row::MpmcTp2 => "msg/s",
            _ => "ns",
        }
    }

    pub(crate) fn impls(self) -> &'static [Impl] {
        match self {
            Row::Floor => &[Impl::Floor],
            Row::PoolLocal | Row::PoolRemote => &[Impl::Nodeipc, Impl::RtsAlloc],
            Row::PoolViewHash => &[Impl::Nodeipc, Impl::CopyThenHash],
            _ => &[Impl::Nodeipc, Impl::Shaq],
        }
    }
}

/// How many messages a sample sends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub(crate) rt_warm: u64,
    pub(crate) rt_n: u64,
    pub(crate) tp_warm: u64,
    pub(crate) tp_n: u64,
    pool_n: u64,
}

impl Params {
    pub(crate) const FULL: Params = Params {
        rt_warm: 20_000,
        rt_n: 200_000,
        tp_warm: 64_000,
        tp_n: 6_400_000,
        pool_n: 1_000_000,
    };
    pub(crate) const QUICK: Params = Params {
        rt_warm: 100,
        rt_n: 1_000,
        tp_warm: 640,
        tp_n: 6_400,
        pool_n: 10_000,
    };
}

/// Measures one sample: ns per round trip, or messages per second.
pub(crate) fn sample(row: Row, imp: Impl, p: Params, pin: bool) -> io::Result<f64> {
    match (row, imp) {
        (Row::RtPoll | Row::RtBlock, Impl::Nodeipc) => rt_nodeipc(row == Row::RtBlock, p, pin),
        (Row::RtPoll | Row::RtBlock, Impl::Shaq) => rt_shaq(row == Row::RtBlock, p, pin),
        (Row::Floor, _) => floor(p, pin),
        (Row::Throughput, Impl::Nodeipc) => tp_nodeipc(p, pin),
        (Row::Throughput, Impl::Shaq) => tp_shaq(p, pin),
        (Row::PoolLocal, Impl::Nodeipc) => crate::pool_rows::local_nodeipc(p.pool_n),
        (Row::PoolLocal, Impl::RtsAlloc) => crate::pool_rows::local_rts(p.pool_n),
        (Row::PoolRemote, Impl::Nodeipc) => crate::pool_rows::remote_nodeipc(p.pool_n, pin),
        (Row::PoolRemote, Impl::RtsAlloc) => crate::pool_rows::remote_rts(p.pool_n, pin),
        (Row::PoolViewHash, Impl::Nodeipc) => crate::pool_rows::view_hash_nodeipc(p.pool_n),
        (Row::PoolViewHash, Impl::CopyThenHash) => crate::pool_rows::copy_hash(p.pool_n),
        (Row::MpmcRt1, Impl::Nodeipc) => crate::mpmc_rows::rt_nodeipc(1, p, pin),
        (Row::MpmcRt1, Impl::Shaq) => crate::mpmc_rows::rt_shaq(1, p, pin),
        (Row::MpmcRt2, Impl::Nodeipc) => crate::mpmc_rows::rt_nodeipc(2, p, pin),
        (Row::MpmcRt2, Impl::Shaq) => crate::mpmc_rows::rt_shaq(2, p, pin),
        (Row::MpmcTp1, Impl::Nodeipc) => crate::mpmc_rows::tp_nodeipc(1, p, pin),
        (Row::MpmcTp1, Impl::Shaq) => crate::mpmc_rows::tp_shaq(1, p, pin),
        (Row::MpmcTp2, Impl::Nodeipc) => crate::mpmc_rows::tp_nodeipc(2, p, pin),
        (Row::MpmcTp2, Impl::Shaq) => crate::mpmc_rows::tp_shaq(2, p, pin),
        (row, imp) => Err(io::Error::other(format!("no {imp:?} for {row:?}"))),
    }
}

/// Runs the peer's part described by `spec`.
pub(crate) fn run_peer(spec: &str) -> io::Result<()> {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [kind, a, b, total] = parts[..] else {
        return Err(io::Error::other(format!("bad peer spec {spec:?}")));
    };
    let total: u64 = total.parse().map_err(|_| io::Error::other("bad count"))?;
    let (a, b) = (inherited(a)?, inherited(b)?);
    if kind.starts_with("mpmc-send-nodeipc") || kind == "mpmc-recv-nodeipc" {
        return crate::mpmc_rows::tp_peer_nodeipc(kind, a, b, total);
    }
    if kind.starts_with("mpmc-send-shaq") || kind == "mpmc-recv-shaq" {
        return crate::mpmc_rows::tp_peer_shaq(kind, a, b, total);
    }
    if kind.starts_with("mpmc-") && kind.contains("nodeipc") {
        return crate::mpmc_rows::peer_nodeipc(kind, a, b, total);
    }
    if kind.starts_with("mpmc-") && kind.contains("shaq") {
        return crate::mpmc_rows::peer_shaq(kind, a, b, total);
    }
    match kind {
        "rt-nodeipc-poll" => echo_nodeipc(a, b, total, false),
        "rt-nodeipc-block" => echo_nodeipc(a, b, total, true),
        "rt-shaq-poll" => echo_shaq(a, b, total, false),
        "rt-shaq-block" => echo_shaq(a, b, total, true),
        "floor" => echo_floor(a, total),
        "tp-nodeipc" => send_nodeipc(a, total),
        "tp-shaq" => send_shaq(a, total),
        "pool-remote-nodeipc" => crate::pool_rows::free_nodeipc(a, b, total),
        "pool-remote-rts" => crate::pool_rows::free_rts(a, b, total),
        other => Err(io::Error::other(format!("unknown peer part {other}"))),
    }
}

fn rt_nodeipc(block: bool, p: Params, pin: bool) -> io::Result<f64> {
    let ping = Queue::<Msg>::anonymous(CAPACITY, SCHEMA).map_err(queue_err)?;
    let pong = Queue::<Msg>::anonymous(CAPACITY, SCHEMA).map_err(queue_err)?;
    let total = p.rt_warm + p.rt_n;
    let kind = if block {
        "rt-nodeipc-block"
    } else {
        "rt-nodeipc-poll"
    };
    let peer = Peer::spawn(
        &format!("{kind} {} {} {total}", fd_num(&ping), fd_num(&pong)),
        &[ping.as_fd(), pong.as_fd()],
        pin,
    )?;
    let mut tx = ping.producer().map_err(queue_err)?;
    let mut rx = pong.consumer().map_err(queue_err)?;
    let mut start = Instant::now();
    for i in 0..total {
        if i == p.rt_warm {
            start = Instant::now();
        }
        let m = msg(i);
        while !tx.try_push(&m).map_err(queue_err)? {
            spin_loop();
        }
        let r = if block {
            rx.pop_timeout(WAIT).map_err(queue_err)?
        } else {
            loop {
                if let Some(r) = rx.try_pop().map_err(queue_err)? {
                    break r;
                }
                spin_loop();
            }
        };
        check(&r, &reply(&m))?;
    }
    let ns = start.elapsed().as_nanos() as f64 / p.rt_n as f64;
    peer.finish()?;
    Ok(ns)
}

fn echo_nodeipc(ping: OwnedFd, pong: OwnedFd, total: u64, block: bool) -> io::Result<()> {
    let mut rx = Consumer::<Msg>::from_fd(ping, SCHEMA).map_err(queue_err)?;
    let mut tx = Producer::<Msg>::from_fd(pong, SCHEMA).map_err(queue_err)?;
    for i in 0..total {
        let m = if block {
            rx.pop_timeout(WAIT).map_err(queue_err)?
        } else {
            loop {
                if let Some(m) = rx.try_pop().map_err(queue_err)? {
                    break m;
                }
                spin_loop();
            }
        };
        check(&m, &msg(i))?;
        let r = reply(&m);
        while !tx.try_push(&r).map_err(queue_err)? {
            spin_loop();
        }
    }
    Ok(())
}

/// A memfd of the size shaq asks for, as the `File` its API takes.
fn shaq_file(capacity: usize) -> io::Result<File> {
    let size = shaq::spsc::minimum_file_size::<Msg>(capacity).next_multiple_of(4096);
    let fd = rustix::fs::memfd_create("versus-shaq", rustix::fs::MemfdFlags::CLOEXEC)?;
    rustix::fs::ftruncate(&fd, size as u64)?;
    Ok(File::from(fd))
}

fn file_size(file: &File) -> io::Result<usize> {
    Ok(file.metadata()?.len() as usize)
}

fn rt_shaq(block: bool, p: Params, pin: bool) -> io::Result<f64> {
    let ping = shaq_file(CAPACITY as usize)?;
    let pong = shaq_file(CAPACITY as usize)?;
    // SAFETY: both files are fresh memfds of ours, initialised once here; the
    // peer joins each with the other role and the same `Msg` (plain words).
    let mut tx = unsafe { shaq::spsc::Producer::<Msg>::create(&ping, file_size(&ping)?) }
        .map_err(shaq_err)?;
    // SAFETY: as above.
    let mut rx = unsafe { shaq::spsc::Consumer::<Msg>::create(&pong, file_size(&pong)?) }
        .map_err(shaq_err)?;
    let total = p.rt_warm + p.rt_n;
    let kind = if block {
        "rt-shaq-block"
    } else {
        "rt-shaq-poll"
    };
    let peer = Peer::spawn(
        &format!("{kind} {} {} {total}", fd_num(&ping), fd_num(&pong)),
        &[ping.as_fd(), pong.as_fd()],
        pin,
    )?;
    let mut start = Instant::now();
    for i in 0..total {
        if i == p.rt_warm {
            start = Instant::now();
        }
        let m = msg(i);
        while tx.try_write(m).is_err() {
            spin_loop();
        }
        let r = if block {
            rx.read_timeout(WAIT).map_err(shaq_err)?
        } else {
            loop {
                if let Some(r) = rx.try_read() {
                    break r;
                }
                spin_loop();
            }
        };
        check(&r, &reply(&m))?;
    }
    let ns = start.elapsed().as_nanos() as f64 / p.rt_n as f64;
    peer.finish()?;
    Ok(ns)
}

fn echo_shaq(ping: OwnedFd, pong: OwnedFd, total: u64, block: bool) -> io::Result<()> {
    let (ping, pong) = (File::from(ping), File::from(pong));
    // SAFETY: the parent created both queues with `Msg` before spawning us;
    // we are the only consumer of `ping` and the only producer of `pong`.
    let mut rx = unsafe { shaq::spsc::Consumer::<Msg>::join(&ping) }.map_err(shaq_err)?;
    // SAFETY: as above.
    let mut tx = unsafe { shaq::spsc::Producer::<Msg>::join(&pong) }.map_err(shaq_err)?;
    for i in 0..total {
        let m = if block {
            rx.read_timeout(WAIT).map_err(shaq_err)?
        } else {
            loop {
                if let Some(m) = rx.try_read() {
                    break m;
                }
                spin_loop();
            }
        };
        check(&m, &msg(i))?;
        let r = reply(&m);
        while tx.try_write(r).is_err() {
            spin_loop();
        }
    }
    Ok(())
}

fn floor(p: Params, pin: bool) -> io::Result<f64> {
    let region = Region::anonymous(4096).map_err(io::Error::other)?;
    let total = p.rt_warm + p.rt_n;
    let peer = Peer::spawn(
        &format!("floor {} {} {total}", fd_num(&region), fd_num(&region)),
        &[region.as_fd()],
        pin,
    )?;
    let ping: &AtomicU64 = region.view(0).map_err(io::Error::other)?;
    let pong: &AtomicU64 = region.view(128).map_err(io::Error::other)?;
    let mut start = Instant::now();
    for i in 1..=total {
        if i == p.rt_warm + 1 {
            start = Instant::now();
        }
        ping.store(i, Ordering::Release);
        while pong.load(Ordering::Acquire) != i {
            spin_loop();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / p.rt_n as f64;
    peer.finish()?;
    Ok(ns)
}

fn echo_floor(fd: OwnedFd, total: u64) -> io::Result<()> {
    let region = Region::from_fd(fd).map_err(io::Error::other)?;
    let ping: &AtomicU64 = region.view(0).map_err(io::Error::other)?;
    let pong: &AtomicU64 = region.view(128).map_err(io::Error::other)?;
    for i in 1..=total {
        while ping.load(Ordering::Acquire) != i {
            spin_loop();
        }
        pong.store(i, Ordering::Release);
    }
    Ok(())
}

fn tp_nodeipc(p: Params, pin: bool) -> io::Result<f64> {
    let queue = Queue::<Msg>::anonymous(CAPACITY, SCHEMA).map_err(queue_err)?;
    let total = p.tp_warm + p.tp_n;
    let peer = Peer::spawn(
        &format!("tp-nodeipc {} {} {total}", fd_num(&queue), fd_num(&queue)),
        &[queue.as_fd()],
        pin,
    )?;
    let mut rx = queue.consumer().map_err(queue_err)?;
    let mut buf = [[0u64; 8]; BATCH];
    let (mut got, mut from, mut start) = (0u64, 0u64, Instant::now());
    let mut started = false;
    while got < total {
        let n = rx.try_pop_into(&mut buf).map_err(queue_err)?;
        for m in &buf[..n] {
            check(m, &msg(got))?;
            got += 1;
        }
        if !started && got >= p.tp_warm {
            (started, from, start) = (true, got, Instant::now());
        }
        if n == 0 {
            spin_loop();
        }
    }
    let rate = (total - from) as f64 / start.elapsed().as_secs_f64();
    peer.finish()?;
    Ok(rate)
}

fn send_nodeipc(fd: OwnedFd, total: u64) -> io::Result<()> {
    let mut tx = Producer::<Msg>::from_fd(fd, SCHEMA).map_err(queue_err)?;
    let mut sent = 0u64;
    while sent < total {
        let want = BATCH.min((total - sent) as usize);
        match tx.reserve(want).map_err(queue_err)? {
            Some(mut batch) => {
                while sent < total && batch.push(&msg(sent)) {
                    sent += 1;
                }
                batch.publish();
            }
            None => spin_loop(),
        }
    }
    Ok(())
}

fn tp_shaq(p: Params, pin: bool) -> io::Result<f64> {
    let file = shaq_file(CAPACITY as usize)?;
    // SAFETY: a fresh memfd of ours, initialised once here; the peer joins it
    // as the only producer, with the same `Msg`.
    let mut rx = unsafe { shaq::spsc::Consumer::<Msg>::create(&file, file_size(&file)?) }
        .map_err(shaq_err)?;
    let total = p.tp_warm + p.tp_n;
    let peer = Peer::spawn(
        &format!("tp-shaq {} {} {total}", fd_num(&file), fd_num(&file)),
        &[file.as_fd()],
        pin,
    )?;
    let (mut got, mut from, mut start) = (0u64, 0u64, Instant::now());
    let mut started = false;
    let max = NonZeroUsize::new(BATCH).expect("BATCH > 0");
    while got < total {
        match rx.try_reserve_read_batch(max) {
            Some(batch) => {
                for m in batch.iter() {
                    check(m, &msg(got))?;
                    got += 1;
                }
            }
            None => spin_loop(),
        }
        if !started && got >= p.tp_warm {
            (started, from, start) = (true, got, Instant::now());
        }
    }
    let rate = (total - from) as f64 / start.elapsed().as_secs_f64();
    peer.finish()?;
    Ok(rate)
}

fn send_shaq(fd: OwnedFd, total: u64) -> io::Result<()> {
    let file = File::from(fd);
    // SAFETY: the parent created the queue with `Msg` before spawning us; we
    // are its only producer.
    let mut tx = unsafe { shaq::spsc::Producer::<Msg>::join(&file) }.map_err(shaq_err)?;
    let mut sent = 0u64;
    while sent < total {
        let mut batch = tx.write_batch();
        let mut k = 0;
        while k < BATCH && sent < total && batch.try_write(msg(sent)).is_ok() {
            sent += 1;
            k += 1;
        }
        drop(batch); // publishes
        if k == 0 {
            spin_loop();
        }
    }
    Ok(())
}

pub(crate) fn fd_num(fd: &impl AsFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_fd().as_raw_fd()
}
