//! The instruction cost of one push and one pop, both ends in one thread,
//! so no cache line moves between cores: what each side's checks and copies
//! cost on their own, beside shaq 4.0.0's, for the SPSC and the MPMC ring
//! (64-byte messages). `versus-shaq` measures the same rings across cores;
//! this isolates the part of its figures that is ours to shrink.
//!
//! `cargo run --release -p nodeipc-benches --example one_thread_cost -- [N]`
//! (N push+pop pairs per ring, default 10 000 000; the median of 5 runs).
//! Under callgrind, one ring at a time: `-- N spsc-nodeipc` (or
//! `spsc-shaq`, `mpmc-nodeipc`, `mpmc-shaq`).

use std::fs::File;
use std::hint::black_box;
use std::io;
use std::time::Instant;

use nodeipc_queue::{MpmcQueue, Queue};

type Msg = [u64; 8];
const CAPACITY: u32 = 1024;

fn shaq_file(size: usize) -> io::Result<(File, usize)> {
    let size = size.next_multiple_of(4096);
    let fd = rustix::fs::memfd_create("one-thread-cost", rustix::fs::MemfdFlags::CLOEXEC)?;
    rustix::fs::ftruncate(&fd, size as u64)?;
    Ok((File::from(fd), size))
}

fn other(e: impl std::fmt::Debug) -> io::Error {
    io::Error::other(format!("{e:?}"))
}

/// ns per push+pop of `n` messages through one ring.
fn run(which: &str, n: u64) -> io::Result<f64> {
    let t = Instant::now();
    match which {
        "spsc-nodeipc" => {
            let q = Queue::<Msg>::anonymous(CAPACITY, 1).map_err(other)?;
            let (mut tx, mut rx) = (q.producer().map_err(other)?, q.consumer().map_err(other)?);
            for i in 0..n {
                if !tx.try_push(black_box(&[i; 8])).map_err(other)? {
                    return Err(other("full"));
                }
                black_box(rx.try_pop().map_err(other)?.ok_or_else(|| other("empty"))?);
            }
        }
        "spsc-shaq" => {
            let (file, size) = shaq_file(shaq::spsc::minimum_file_size::<Msg>(CAPACITY as usize))?;
            // SAFETY: a fresh memfd of ours, created once with `Msg`.
            let mut tx =
                unsafe { shaq::spsc::Producer::<Msg>::create(&file, size) }.map_err(other)?;
            // SAFETY: as above.
            let mut rx = unsafe { shaq::spsc::Consumer::<Msg>::join(&file) }.map_err(other)?;
            for i in 0..n {
                tx.try_write(black_box([i; 8])).map_err(|_| other("full"))?;
                black_box(rx.try_read().ok_or_else(|| other("empty"))?);
            }
        }
        "mpmc-nodeipc" => {
            let q = MpmcQueue::<Msg>::anonymous(CAPACITY, 1, 1, 1).map_err(other)?;
            let (mut tx, mut rx) = (q.producer().map_err(other)?, q.consumer().map_err(other)?);
            for i in 0..n {
                if !tx.try_push(black_box(&[i; 8])).map_err(other)? {
                    return Err(other("full"));
                }
                black_box(rx.try_pop().map_err(other)?.ok_or_else(|| other("empty"))?);
            }
        }
        "mpmc-shaq" => {
            let (file, size) = shaq_file(shaq::mpmc::minimum_file_size::<Msg>(CAPACITY as usize))?;
            // SAFETY: a fresh memfd of ours, created once with `Msg`.
            let tx = unsafe { shaq::mpmc::Producer::<Msg>::create(&file, size) }.map_err(other)?;
            // SAFETY: as above.
            let rx = unsafe { shaq::mpmc::Consumer::<Msg>::join(&file) }.map_err(other)?;
            for i in 0..n {
                tx.try_write(black_box([i; 8])).map_err(|_| other("full"))?;
                black_box(rx.try_read().ok_or_else(|| other("empty"))?);
            }
        }
        _ => return Err(other(format!("unknown ring {which}"))),
    }
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = match args.first() {
        Some(v) => v.parse().map_err(|_| other("N must be a number"))?,
        None => 10_000_000,
    };
    if let Some(which) = args.get(1) {
        println!("{which}: {:.2} ns per push+pop", run(which, n)?);
        return Ok(());
    }
    for which in ["spsc-nodeipc", "spsc-shaq", "mpmc-nodeipc", "mpmc-shaq"] {
        let mut runs: Vec<f64> = (0..5).map(|_| run(which, n)).collect::<io::Result<_>>()?;
        runs.sort_by(f64::total_cmp);
        println!(
            "{which:<13} {:6.2} ns per push+pop (median of 5; {:.2}..{:.2})",
            runs[2], runs[0], runs[4]
        );
    }
    Ok(())
}
