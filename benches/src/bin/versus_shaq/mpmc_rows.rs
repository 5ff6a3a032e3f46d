//! The MPMC rows beside shaq 4.0.0's `mpmc`, 64-byte messages, every word
//! written by its sender and checked by its receiver:
//!
//! - `mpmc-rt-1x1`: a round trip through two rings (one producer and one
//!   consumer each), both sides polling (ns);
//! - `mpmc-rt-2x2`: two clients (this process and a child) push requests
//!   into a ring that two servers pop, each answering into a second ring
//!   that the clients pop (any answer will do): ns per round trip of this
//!   process, through the timed pops (four processes on two cores);
//! - `mpmc-tp-1x1`: one producer to one consumer, batches of 64 (msg/s);
//! - `mpmc-tp-2x2`: two producers to two consumers (this process and a
//!   child), batches of 64: messages per second popped by both.

use std::fs::File;
use std::hint::spin_loop;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_queue::{MpmcConsumer, MpmcProducer, MpmcQueue};
use nodeipc_shm::Region;

use crate::peer::Peer;
use crate::rows::{Params, fd_num};

type Msg = [u64; 8];
const SCHEMA: u64 = 0x0076_6d70_6d63; // "vmpmc"
const CAPACITY: u32 = 1024;
const BATCH: usize = 64;
const WAIT: Duration = Duration::from_secs(5);
/// How long a `rt-2x2` client waits for an answer in all. Pops of an MPMC
/// ring are not fair (ours and shaq's alike): a client parked in its timed
/// pop is woken for each answer and can lose every race for it to the
/// other client, which polls, for as long as a loaded machine schedules it
/// rarely (seen: woken 15 times in 2 s, each time too late, at load 10).
/// Its own answer is then taken by the other, which leaves one of its own
/// for later: nothing is lost, the starved client only waits. So a timed
/// pop that ends empty is retried, up to this bound.
const PATIENCE: Duration = Duration::from_secs(120);

/// What tells a `rt-2x2` server to stop: each takes one and pops no more,
/// so `pairs` of them stop `pairs` servers (a server never stops on a quiet
/// spell, which a loaded machine gives any process).
const STOP: Msg = [u64::MAX; 8];

fn msg(source: u64, i: u64) -> Msg {
    std::array::from_fn(|k| (source << 56 | i).wrapping_add(k as u64))
}

fn reply(m: &Msg) -> Msg {
    std::array::from_fn(|k| !m[k])
}

fn check(got: &Msg, want: &Msg) -> io::Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(io::Error::other(format!("got {got:?}, expected {want:?}")))
    }
}

/// A message is whole: its words follow from its first.
fn whole(m: &Msg) -> io::Result<()> {
    check(m, &std::array::from_fn(|k| m[0].wrapping_add(k as u64)))
}

/// A `rt-2x2` client's wait for an answer: timed pops (`Ok(None)`: timed
/// out) retried until [`PATIENCE`] has passed.
fn patiently(mut pop: impl FnMut() -> io::Result<Option<Msg>>) -> io::Result<Msg> {
    let start = Instant::now();
    loop {
        if let Some(m) = pop()? {
            return Ok(m);
        }
        if start.elapsed() >= PATIENCE {
            return Err(err(format!("no answer in {PATIENCE:?}")));
        }
    }
}

/// `PAIRS-SOURCE` of a sender's part.
fn send_spec(spec: &str) -> io::Result<(u32, u64)> {
    let (pairs, source) = spec.split_once('-').ok_or_else(|| err(spec))?;
    Ok((pairs.parse().map_err(err)?, source.parse().map_err(err)?))
}

/// Waiting for the other side: a spin where each process has a core, a
/// yield where four share two (both rings alike).
fn idle(pairs: u32) {
    if pairs == 1 {
        spin_loop();
    } else {
        std::thread::yield_now();
    }
}

fn err(e: impl std::fmt::Debug) -> io::Error {
    io::Error::other(format!("{e:?}"))
}

fn shaq_file() -> io::Result<File> {
    let size = shaq::mpmc::minimum_file_size::<Msg>(CAPACITY as usize).next_multiple_of(4096);
    let fd = rustix::fs::memfd_create("versus-shaq-mpmc", rustix::fs::MemfdFlags::CLOEXEC)?;
    rustix::fs::ftruncate(&fd, size as u64)?;
    Ok(File::from(fd))
}

fn shaq_size(file: &File) -> io::Result<usize> {
    Ok(file.metadata()?.len() as usize)
}

/// With two pairs, four processes: this one (pinned to core 0 for the
/// one-pair rows) and the peers it spawns, which inherit its affinity, run
/// on both cores for the row, as its name says; on one core the timed
/// pops once waited out their 5 s while the process holding the answer
/// was not scheduled.
/// (`pinned`: whether this process is pinned, which it is only where there
/// are two cores.)
fn spread(pairs: u32, pinned: bool) -> io::Result<Option<nodeipc_cli::bench::machine::Pinned>> {
    if pairs < 2 || !pinned {
        return Ok(None);
    }
    nodeipc_cli::bench::machine::Pinned::to_cores(&[0, 1]).map(Some)
}

/// A counter another process adds to (the 2x2 throughput's second consumer).
fn counter() -> io::Result<Region> {
    Region::anonymous(4096).map_err(err)
}

/// ns per round trip, ours (`rt-1x1`, polling) or (`rt-2x2`, timed pops).
pub(crate) fn rt_nodeipc(pairs: u32, p: Params, pin: bool) -> io::Result<f64> {
    let _spread = spread(pairs, pin)?;
    let ping = MpmcQueue::<Msg>::anonymous(CAPACITY, pairs, pairs, SCHEMA).map_err(err)?;
    let pong = MpmcQueue::<Msg>::anonymous(CAPACITY, pairs, pairs, SCHEMA).map_err(err)?;
    let total = p.rt_warm + p.rt_n;
    let fds = [ping.as_fd(), pong.as_fd()];
    let spec = |kind: &str| format!("{kind} {} {} {total}", fd_num(&ping), fd_num(&pong));
    let mut peers = Vec::new();
    for _ in 0..pairs {
        peers.push(Peer::spawn(
            &spec(&format!("mpmc-echo-nodeipc-{pairs}")),
            &fds,
            pin && pairs == 1,
        )?);
    }
    if pairs == 2 {
        peers.push(Peer::spawn(&spec("mpmc-client-nodeipc"), &fds, false)?);
    }
    let mut tx = ping.producer().map_err(err)?;
    let mut rx = pong.consumer().map_err(err)?;
    let mut start = Instant::now();
    for i in 0..total {
        if i == p.rt_warm {
            start = Instant::now();
        }
        let m = msg(0, i);
        while !tx.try_push(&m).map_err(err)? {
            spin_loop();
        }
        let r = if pairs == 1 {
            loop {
                if let Some(r) = rx.try_pop().map_err(err)? {
                    break r;
                }
                spin_loop();
            }
        } else {
            patiently(|| match rx.pop_timeout(WAIT) {
                Err(nodeipc_queue::Error::TimedOut { .. }) => Ok(None),
                other => other.map(Some).map_err(err),
            })?
        };
        if pairs == 1 {
            check(&r, &reply(&m))?;
        } else {
            whole(&reply(&r))?;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / p.rt_n as f64;
    if pairs == 2 {
        // The second client first: its requests answered, the servers stop.
        peers.pop().ok_or_else(|| err("no client"))?.finish()?;
        for _ in 0..pairs {
            tx.push_timeout(&STOP, WAIT).map_err(err)?;
        }
    }
    for peer in peers {
        peer.finish()?;
    }
    Ok(ns)
}

/// An echo server (`rt-1x1`: polling, `total` answers; `rt-2x2`: timed
/// pops, answering until the clients are gone) or the second client.
pub(crate) fn peer_nodeipc(kind: &str, ping: OwnedFd, pong: OwnedFd, total: u64) -> io::Result<()> {
    let ping = Region::from_fd(ping).map_err(err)?;
    let pong = Region::from_fd(pong).map_err(err)?;
    let (ping, pong) = (std::sync::Arc::new(ping), std::sync::Arc::new(pong));
    match kind {
        "mpmc-echo-nodeipc-1" => {
            let mut rx = MpmcConsumer::<Msg>::join(ping, SCHEMA).map_err(err)?;
            let mut tx = MpmcProducer::<Msg>::join(pong, SCHEMA).map_err(err)?;
            for _ in 0..total {
                let m = loop {
                    match rx.try_pop().map_err(err)? {
                        Some(m) => break m,
                        None => spin_loop(),
                    }
                };
                whole(&m)?;
                while !tx.try_push(&reply(&m)).map_err(err)? {
                    spin_loop();
                }
            }
            Ok(())
        }
        // With two clients and two servers, a server answers whatever it
        // gets, until it takes a STOP.
        "mpmc-echo-nodeipc-2" => {
            let mut rx = MpmcConsumer::<Msg>::join(ping, SCHEMA).map_err(err)?;
            let mut tx = MpmcProducer::<Msg>::join(pong, SCHEMA).map_err(err)?;
            let _ = total;
            loop {
                // A server may go without a request for long: the clients
                // answer to WAIT, the server to STOP.
                let m = match rx.pop_timeout(WAIT) {
                    Err(nodeipc_queue::Error::TimedOut { .. }) => continue,
                    other => other.map_err(err)?,
                };
                if m == STOP {
                    return Ok(());
                }
                whole(&m)?;
                tx.push_timeout(&reply(&m), WAIT).map_err(err)?;
            }
        }
        "mpmc-client-nodeipc" => {
            let mut tx = MpmcProducer::<Msg>::join(ping, SCHEMA).map_err(err)?;
            let mut rx = MpmcConsumer::<Msg>::join(pong, SCHEMA).map_err(err)?;
            for i in 0..total {
                tx.push_timeout(&msg(1, i), WAIT).map_err(err)?;
                let r = patiently(|| match rx.pop_timeout(WAIT) {
                    Err(nodeipc_queue::Error::TimedOut { .. }) => Ok(None),
                    other => other.map(Some).map_err(err),
                })?;
                whole(&reply(&r))?;
            }
            Ok(())
        }
        other => Err(io::Error::other(format!("unknown part {other}"))),
    }
}

/// ns per round trip, shaq's `mpmc`.
pub(crate) fn rt_shaq(pairs: u32, p: Params, pin: bool) -> io::Result<f64> {
    let _spread = spread(pairs, pin)?;
    let (ping, pong) = (shaq_file()?, shaq_file()?);
    // SAFETY: fresh memfds of ours, each initialised once here; every peer
    // joins with the same `Msg` (plain words).
    let tx =
        unsafe { shaq::mpmc::Producer::<Msg>::create(&ping, shaq_size(&ping)?) }.map_err(err)?;
    // SAFETY: as above.
    let rx =
        unsafe { shaq::mpmc::Consumer::<Msg>::create(&pong, shaq_size(&pong)?) }.map_err(err)?;
    let total = p.rt_warm + p.rt_n;
    let fds = [ping.as_fd(), pong.as_fd()];
    let spec = |kind: &str| format!("{kind} {} {} {total}", fd_num(&ping), fd_num(&pong));
    let mut peers = Vec::new();
    for _ in 0..pairs {
        peers.push(Peer::spawn(
            &spec(&format!("mpmc-echo-shaq-{pairs}")),
            &fds,
            pin && pairs == 1,
        )?);
    }
    if pairs == 2 {
        peers.push(Peer::spawn(&spec("mpmc-client-shaq"), &fds, false)?);
    }
    let mut start = Instant::now();
    for i in 0..total {
        if i == p.rt_warm {
            start = Instant::now();
        }
        let m = msg(0, i);
        while tx.try_write(m).is_err() {
            spin_loop();
        }
        let r = if pairs == 1 {
            loop {
                if let Some(r) = rx.try_read() {
                    break r;
                }
                spin_loop();
            }
        } else {
            patiently(|| Ok(rx.read_timeout(WAIT).ok()))?
        };
        if pairs == 1 {
            check(&r, &reply(&m))?;
        } else {
            whole(&reply(&r))?;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / p.rt_n as f64;
    if pairs == 2 {
        peers.pop().ok_or_else(|| err("no client"))?.finish()?;
        for _ in 0..pairs {
            while tx.try_write(STOP).is_err() {
                spin_loop();
            }
        }
    }
    for peer in peers {
        peer.finish()?;
    }
    Ok(ns)
}

pub(crate) fn peer_shaq(kind: &str, ping: OwnedFd, pong: OwnedFd, total: u64) -> io::Result<()> {
    let (ping, pong) = (File::from(ping), File::from(pong));
    match kind {
        "mpmc-echo-shaq-1" => {
            // SAFETY: the parent created both rings with `Msg`.
            let rx = unsafe { shaq::mpmc::Consumer::<Msg>::join(&ping) }.map_err(err)?;
            // SAFETY: as above.
            let tx = unsafe { shaq::mpmc::Producer::<Msg>::join(&pong) }.map_err(err)?;
            for _ in 0..total {
                let m = loop {
                    if let Some(m) = rx.try_read() {
                        break m;
                    }
                    spin_loop();
                };
                whole(&m)?;
                while tx.try_write(reply(&m)).is_err() {
                    spin_loop();
                }
            }
            Ok(())
        }
        "mpmc-echo-shaq-2" => {
            // SAFETY: as above.
            let rx = unsafe { shaq::mpmc::Consumer::<Msg>::join(&ping) }.map_err(err)?;
            // SAFETY: as above.
            let tx = unsafe { shaq::mpmc::Producer::<Msg>::join(&pong) }.map_err(err)?;
            loop {
                let Ok(m) = rx.read_timeout(WAIT) else {
                    continue;
                };
                if m == STOP {
                    return Ok(());
                }
                whole(&m)?;
                while tx.try_write(reply(&m)).is_err() {
                    spin_loop();
                }
            }
        }
        "mpmc-client-shaq" => {
            // SAFETY: as above.
            let tx = unsafe { shaq::mpmc::Producer::<Msg>::join(&ping) }.map_err(err)?;
            // SAFETY: as above.
            let rx = unsafe { shaq::mpmc::Consumer::<Msg>::join(&pong) }.map_err(err)?;
            for i in 0..total {
                while tx.try_write(msg(1, i)).is_err() {
                    spin_loop();
                }
                whole(&reply(&patiently(|| Ok(rx.read_timeout(WAIT).ok()))?))?;
            }
            Ok(())
        }
        other => Err(io::Error::other(format!("unknown part {other}"))),
    }
}

/// Messages per second, ours: `pairs` producers (children) to `pairs`
/// consumers (this process and, for 2, a child adding to a counter).
pub(crate) fn tp_nodeipc(pairs: u32, p: Params, pin: bool) -> io::Result<f64> {
    let _spread = spread(pairs, pin)?;
    let queue = MpmcQueue::<Msg>::anonymous(CAPACITY, pairs, pairs, SCHEMA).map_err(err)?;
    let count = counter()?;
    let per = (p.tp_warm + p.tp_n) / u64::from(pairs);
    let total = per * u64::from(pairs);
    let fds = [queue.as_fd(), count.as_fd()];
    let mut peers = Vec::new();
    for source in 0..pairs {
        peers.push(Peer::spawn(
            &format!(
                "mpmc-send-nodeipc-{pairs}-{source} {} {} {per}",
                fd_num(&queue),
                fd_num(&count)
            ),
            &fds,
            pin && pairs == 1,
        )?);
    }
    if pairs == 2 {
        peers.push(Peer::spawn(
            &format!(
                "mpmc-recv-nodeipc {} {} {total}",
                fd_num(&queue),
                fd_num(&count)
            ),
            &fds,
            false,
        )?);
    }
    let mut rx = queue.consumer().map_err(err)?;
    let popped: &AtomicU64 = count.view(0).map_err(err)?;
    let mut buf = [[0u64; 8]; BATCH];
    let (mut started, mut from, mut start) = (false, 0, Instant::now());
    while popped.load(Ordering::Relaxed) < total {
        let n = rx.try_pop_into(&mut buf).map_err(err)?;
        for m in &buf[..n] {
            whole(m)?;
        }
        if n == 0 {
            idle(pairs);
        } else {
            popped.fetch_add(n as u64, Ordering::Relaxed);
        }
        let got = popped.load(Ordering::Relaxed);
        if !started && got >= p.tp_warm {
            (started, from, start) = (true, got, Instant::now());
        }
    }
    let rate = (total - from) as f64 / start.elapsed().as_secs_f64();
    for peer in peers {
        peer.finish()?;
    }
    Ok(rate)
}

pub(crate) fn tp_peer_nodeipc(
    kind: &str,
    queue: OwnedFd,
    count: OwnedFd,
    total: u64,
) -> io::Result<()> {
    let queue = std::sync::Arc::new(Region::from_fd(queue).map_err(err)?);
    let count = Region::from_fd(count).map_err(err)?;
    let popped: &AtomicU64 = count.view(0).map_err(err)?;
    if let Some(spec) = kind.strip_prefix("mpmc-send-nodeipc-") {
        let (pairs, source) = send_spec(spec)?;
        let mut tx = MpmcProducer::<Msg>::join(queue, SCHEMA).map_err(err)?;
        let mut batch = [[0u64; 8]; BATCH];
        let mut sent = 0u64;
        while sent < total {
            let n = BATCH.min((total - sent) as usize);
            for (k, m) in batch[..n].iter_mut().enumerate() {
                *m = msg(source, sent + k as u64);
            }
            let pushed = tx.try_push_slice(&batch[..n]).map_err(err)?;
            sent += pushed as u64;
            if pushed == 0 {
                idle(pairs);
            }
        }
        return Ok(());
    }
    let mut rx = MpmcConsumer::<Msg>::join(queue, SCHEMA).map_err(err)?;
    let mut buf = [[0u64; 8]; BATCH];
    while popped.load(Ordering::Relaxed) < total {
        let n = rx.try_pop_into(&mut buf).map_err(err)?;
        for m in &buf[..n] {
            whole(m)?;
        }
        if n == 0 {
            std::thread::yield_now();
        } else {
            popped.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Messages per second, shaq's `mpmc`, the same shape.
pub(crate) fn tp_shaq(pairs: u32, p: Params, pin: bool) -> io::Result<f64> {
    let _spread = spread(pairs, pin)?;
    let file = shaq_file()?;
    // SAFETY: a fresh memfd of ours, initialised once here; every peer joins
    // with the same `Msg`.
    let rx =
        unsafe { shaq::mpmc::Consumer::<Msg>::create(&file, shaq_size(&file)?) }.map_err(err)?;
    let count = counter()?;
    let per = (p.tp_warm + p.tp_n) / u64::from(pairs);
    let total = per * u64::from(pairs);
    let fds = [file.as_fd(), count.as_fd()];
    let mut peers = Vec::new();
    for source in 0..pairs {
        peers.push(Peer::spawn(
            &format!(
                "mpmc-send-shaq-{pairs}-{source} {} {} {per}",
                fd_num(&file),
                fd_num(&count)
            ),
            &fds,
            pin && pairs == 1,
        )?);
    }
    if pairs == 2 {
        peers.push(Peer::spawn(
            &format!(
                "mpmc-recv-shaq {} {} {total}",
                fd_num(&file),
                fd_num(&count)
            ),
            &fds,
            false,
        )?);
    }
    let popped: &AtomicU64 = count.view(0).map_err(err)?;
    let max = NonZeroUsize::new(BATCH).expect("BATCH > 0");
    let (mut started, mut from, mut start) = (false, 0, Instant::now());
    while popped.load(Ordering::Relaxed) < total {
        match rx.try_reserve_read_batch(max) {
            Some(batch) => {
                for m in batch.iter() {
                    whole(m)?;
                }
                popped.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            None => idle(pairs),
        }
        let got = popped.load(Ordering::Relaxed);
        if !started && got >= p.tp_warm {
            (started, from, start) = (true, got, Instant::now());
        }
    }
    let rate = (total - from) as f64 / start.elapsed().as_secs_f64();
    for peer in peers {
        peer.finish()?;
    }
    Ok(rate)
}

pub(crate) fn tp_peer_shaq(
    kind: &str,
    queue: OwnedFd,
    count: OwnedFd,
    total: u64,
) -> io::Result<()> {
    let file = File::from(queue);
    let count = Region::from_fd(count).map_err(err)?;
    let popped: &AtomicU64 = count.view(0).map_err(err)?;
    if let Some(spec) = kind.strip_prefix("mpmc-send-shaq-") {
        let (pairs, source) = send_spec(spec)?;
        // SAFETY: the parent created the ring with `Msg`.
        let tx = unsafe { shaq::mpmc::Producer::<Msg>::join(&file) }.map_err(err)?;
        let mut batch = [[0u64; 8]; BATCH];
        let mut sent = 0u64;
        while sent < total {
            let n = BATCH.min((total - sent) as usize);
            for (k, m) in batch[..n].iter_mut().enumerate() {
                *m = msg(source, sent + k as u64);
            }
            if tx.try_write_slice(&batch[..n]) {
                sent += n as u64;
            } else {
                idle(pairs);
            }
        }
        return Ok(());
    }
    // SAFETY: as above.
    let rx = unsafe { shaq::mpmc::Consumer::<Msg>::join(&file) }.map_err(err)?;
    let max = NonZeroUsize::new(BATCH).expect("BATCH > 0");
    while popped.load(Ordering::Relaxed) < total {
        match rx.try_reserve_read_batch(max) {
            Some(batch) => {
                for m in batch.iter() {
                    whole(m)?;
                }
                popped.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            // The second consumer exists only where four share two cores.
            None => std::thread::yield_now(),
        }
    }
    Ok(())
}
