//! The pool rows beside rts-alloc 5.1.0: `pool-local`, an alloc and a free
//! of 256 bytes (rts-alloc's smallest class) in one process; `pool-remote`,
//! 256-byte blocks allocated in one process, their references sent over a
//! nodeipc queue (the same transport for both), freed one by one in the
//! other, and taken back by the owner's clean-up: ns per block, clean-up
//! included.

use std::fs::File;
use std::hint::black_box;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeipc_pool::{BlockRef, Handle, Pool, PoolConfig};
use nodeipc_queue::{Consumer, Queue};
use nodeipc_shm::Region;

use crate::peer::Peer;

const SCHEMA: u64 = 0x706f_6f6c;
const SIZE: usize = 256;
const BATCH: usize = 64;
const WAIT: Duration = Duration::from_secs(5);
const RTS_FILE: usize = 32 << 20;
const RTS_SLAB: u32 = 64 << 10;

fn err(e: impl std::fmt::Debug) -> io::Error {
    io::Error::other(format!("{e:?}"))
}

fn config() -> PoolConfig {
    PoolConfig::new(256, 4)
}

fn rts_file() -> io::Result<File> {
    let fd = rustix::fs::memfd_create("versus-rts", rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(File::from(fd))
}

/// ns per alloc + free, ours.
pub(crate) fn local_nodeipc(n: u64) -> io::Result<f64> {
    let pool = Pool::anonymous(&config()).map_err(err)?;
    let mut h = pool.handle().map_err(err)?;
    for _ in 0..1000 {
        let b = h.alloc(SIZE).map_err(err)?;
        h.free(b).map_err(err)?;
    }
    let start = Instant::now();
    for _ in 0..n {
        let b = black_box(h.alloc(SIZE).map_err(err)?);
        h.free(b).map_err(err)?;
    }
    Ok(start.elapsed().as_nanos() as f64 / n as f64)
}

/// ns per alloc + free, rts-alloc.
pub(crate) fn local_rts(n: u64) -> io::Result<f64> {
    let file = rts_file()?;
    // SAFETY: a fresh memfd of ours, created once here.
    let alloc =
        unsafe { rts_alloc::Allocator::create(&file, RTS_FILE, 4, RTS_SLAB) }.map_err(err)?;
    let one = |alloc: &rts_alloc::Allocator| -> io::Result<()> {
        let p = black_box(
            alloc
                .allocate(SIZE as u32)
                .ok_or_else(|| err("rts-alloc full"))?,
        );
        // SAFETY: `p` was just allocated by this allocator and is freed once.
        unsafe { alloc.free(p) };
        Ok(())
    };
    for _ in 0..1000 {
        one(&alloc)?;
    }
    let start = Instant::now();
    for _ in 0..n {
        one(&alloc)?;
    }
    Ok(start.elapsed().as_nanos() as f64 / n as f64)
}

/// ns per block allocated here, freed in the peer, cleaned up here; ours.
pub(crate) fn remote_nodeipc(n: u64, pin: bool) -> io::Result<f64> {
    let pool = Pool::anonymous(&config()).map_err(err)?;
    let queue = Queue::<u64>::anonymous(1024, SCHEMA).map_err(err)?;
    let peer = Peer::spawn(
        &format!(
            "pool-remote-nodeipc {} {} {n}",
            crate::rows::fd_num(pool.region().as_ref()),
            crate::rows::fd_num(&queue)
        ),
        &[pool.region().as_fd(), queue.as_fd()],
        pin,
    )?;
    let mut h = pool.handle().map_err(err)?;
    let mut tx = queue.producer().map_err(err)?;
    let mut refs = Vec::with_capacity(BATCH);
    let (mut sent, mut back) = (0u64, 0u64);
    let start = Instant::now();
    while back < n {
        if sent < n {
            refs.clear();
            while refs.len() < BATCH && sent + (refs.len() as u64) < n {
                match h.alloc(SIZE) {
                    Ok(b) => refs.push(b.to_bits()),
                    Err(nodeipc_pool::Error::Full { .. }) => break,
                    Err(e) => return Err(err(e)),
                }
            }
            let mut pushed = 0;
            while pushed < refs.len() {
                pushed += tx.try_push_slice(&refs[pushed..]).map_err(err)?;
            }
            sent += refs.len() as u64;
        }
        back += h.clean_remote_frees().map_err(err)? as u64;
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    peer.finish()?;
    Ok(ns)
}

pub(crate) fn free_nodeipc(pool: OwnedFd, queue: OwnedFd, n: u64) -> io::Result<()> {
    let region = Arc::new(Region::from_fd(pool).map_err(err)?);
    let mut h = Handle::free_only(region).map_err(err)?;
    let mut rx = Consumer::<u64>::from_fd(queue, SCHEMA).map_err(err)?;
    let mut buf = [0u64; BATCH];
    let mut freed = 0;
    while freed < n {
        let got = rx.pop_into_timeout(&mut buf, WAIT).map_err(err)?;
        for &bits in &buf[..got] {
            h.free(BlockRef::from_bits(bits)).map_err(err)?;
        }
        freed += got as u64;
    }
    Ok(())
}

/// The same with rts-alloc.
pub(crate) fn remote_rts(n: u64, pin: bool) -> io::Result<f64> {
    let file = rts_file()?;
    // SAFETY: a fresh memfd of ours, created once here; the peer joins it
    // free-only.
    let alloc =
        unsafe { rts_alloc::Allocator::create(&file, RTS_FILE, 4, RTS_SLAB) }.map_err(err)?;
    let queue = Queue::<u64>::anonymous(1024, SCHEMA).map_err(err)?;
    let peer = Peer::spawn(
        &format!(
            "pool-remote-rts {} {} {n}",
            crate::rows::fd_num(&file),
            crate::rows::fd_num(&queue)
        ),
        &[file.as_fd(), queue.as_fd()],
        pin,
    )?;
    let mut tx = queue.producer().map_err(err)?;
    let mut refs = Vec::with_capacity(BATCH);
    let mut sent = 0u64;
    let start = Instant::now();
    loop {
        if sent < n {
            refs.clear();
            while refs.len() < BATCH && sent + (refs.len() as u64) < n {
                match alloc.allocate(SIZE as u32) {
                    // SAFETY: `p` is a live allocation of this allocator.
                    Some(p) => refs.push(unsafe { alloc.offset(p) } as u64),
                    None => break,
                }
            }
            let mut pushed = 0;
            while pushed < refs.len() {
                pushed += tx.try_push_slice(&refs[pushed..]).map_err(err)?;
            }
            sent += refs.len() as u64;
        }
        alloc.clean_remote_frees();
        if sent == n && alloc.outstanding_allocation_bytes() == 0 {
            break;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    peer.finish()?;
    Ok(ns)
}

pub(crate) fn free_rts(file: OwnedFd, queue: OwnedFd, n: u64) -> io::Result<()> {
    let file = File::from(file);
    let alloc = rts_alloc::FreeOnlyAllocator::join(&file).map_err(err)?;
    let mut rx = Consumer::<u64>::from_fd(queue, SCHEMA).map_err(err)?;
    let mut buf = [0u64; BATCH];
    let mut freed = 0;
    while freed < n {
        let got = rx.pop_into_timeout(&mut buf, WAIT).map_err(err)?;
        for &offset in &buf[..got] {
            // SAFETY: the offset is of a live allocation the parent handed us
            // to free, once.
            unsafe { alloc.free_offset(offset as usize) };
        }
        freed += got as u64;
    }
    Ok(())
}

/// A transaction's size, Agave's packet limit.
const TX: usize = 1232;

/// A word-at-a-time hash (FNV-1a over 64-bit words): each word feeds the
/// next step, as a parser or a hash over a transaction would.
#[inline]
fn hash_words(words: impl Iterator<Item = u64>) -> u64 {
    words.fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ w).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A pool with one 1232-byte transaction written by its owner, read by a
/// free-only handle (another process's view of it).
fn one_transaction() -> io::Result<(Pool, Handle, BlockRef)> {
    let pool = Pool::anonymous(&config()).map_err(err)?;
    let mut owner = pool.handle().map_err(err)?;
    let block = owner.alloc(TX).map_err(err)?;
    let bytes: Vec<u8> = (0..TX).map(|i| (i * 131 + 17) as u8).collect();
    owner.write_at(block, 0, &bytes).map_err(err)?;
    // The owner's handle stays joined (dropped with the pool at the end).
    std::mem::forget(owner);
    let reader = pool.free_only().map_err(err)?;
    Ok((pool, reader, block))
}

/// ns per read-and-hash of a 1232-byte transaction in place, through a
/// `BlockView` (the reference checked, then the words loaded into the hash).
pub(crate) fn view_hash_nodeipc(n: u64) -> io::Result<f64> {
    let (_pool, reader, block) = one_transaction()?;
    let once = || -> io::Result<u64> {
        let view = reader.view(black_box(block)).map_err(err)?;
        Ok(hash_words(view.words().take(TX / 8)))
    };
    let want = once()?;
    let start = Instant::now();
    for _ in 0..n {
        if black_box(once()?) != want {
            return Err(err("hash changed"));
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / n as f64)
}

/// The same, copying the transaction out first (`read_at`, a checked
/// `memcpy`) into a stack buffer, then hashing the copy.
pub(crate) fn copy_hash(n: u64) -> io::Result<f64> {
    let (_pool, reader, block) = one_transaction()?;
    let once = || -> io::Result<u64> {
        let mut buf = [0u8; TX];
        reader.read_at(black_box(block), 0, &mut buf).map_err(err)?;
        let buf = black_box(&buf);
        Ok(hash_words(
            buf.as_chunks::<8>()
                .0
                .iter()
                .map(|c| u64::from_ne_bytes(*c)),
        ))
    };
    let want = once()?;
    let start = Instant::now();
    for _ in 0..n {
        if black_box(once()?) != want {
            return Err(err("hash changed"));
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / n as f64)
}
