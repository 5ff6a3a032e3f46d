//! `nodeipc shm create|write|read|unlink`.
//!
//! Reads and writes go through the region's descriptor (`pread`/`pwrite`)
//! in fixed chunks: whatever its size, a region is never copied into memory
//! whole, a hole in a sparse region is read without the kernel allocating
//! pages for it, and a region another process shrinks meanwhile is an error
//! naming it, not a SIGBUS.

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};

use clap::Subcommand;
use nodeipc_shm::Region;
use rustix::io::Errno;

use crate::limits::{u64_in, usize_in};
use crate::{CmdResult, Failure};

/// Bytes moved per `pread`/`pwrite`, and the most held in memory at once.
const CHUNK: usize = 1 << 20;

#[derive(Subcommand)]
pub(crate) enum ShmCommand {
    /// Create a region of SIZE bytes (mode 0600); it stays until `shm unlink`.
    Create {
        /// Region name, such as /nodeipc-scratch.
        name: String,
        /// Size in bytes, at least 1 and at most the address space, 2^63 - 1
        /// (0 reaches the region's own check, which explains it).
        #[arg(long, value_parser = usize_in(0, isize::MAX as usize))]
        size: usize,
    },
    /// Copy standard input into the region.
    Write {
        /// Region name.
        name: String,
        /// Where to start writing (at most the region's size).
        #[arg(long, default_value_t = 0, value_parser = u64_in(0, u64::MAX))]
        offset: u64,
    },
    /// Copy bytes of the region to standard output.
    Read {
        /// Region name.
        name: String,
        /// Where to start reading (at most the region's size).
        #[arg(long, default_value_t = 0, value_parser = u64_in(0, u64::MAX))]
        offset: u64,
        /// How many bytes (default: to the end; never past it).
        #[arg(long, value_parser = u64_in(0, u64::MAX))]
        len: Option<u64>,
    },
    /// Remove the region's name.
    Unlink {
        /// Region name.
        name: String,
    },
}

pub(crate) fn run(command: ShmCommand) -> CmdResult {
    match command {
        ShmCommand::Create { name, size } => {
            Region::create(&name, size)
                .map_err(|e| Failure::Error(format!("{e} (--size {size})")))?
                .persist();
        }
        ShmCommand::Write { name, offset } => {
            let (fd, size) = nodeipc_shm::open_unmapped(&name)?;
            check_offset(&name, offset, size)?;
            write_stdin(fd.as_fd(), &name, offset, size)?;
        }
        ShmCommand::Read { name, offset, len } => {
            // Not mapped: a region of any size streams, its holes unallocated.
            let (fd, size) = nodeipc_shm::open_unmapped(&name)?;
            check_offset(&name, offset, size)?;
            let room = size - offset;
            let len = match len {
                None => room,
                Some(len) if len <= room => len,
                Some(len) => {
                    return Err(Failure::Error(format!(
                        "--len {len} from --offset {offset} runs past the end of {name} \
                         ({size} bytes: at most {room} from there)"
                    )));
                }
            };
            read_to_stdout(fd.as_fd(), &name, offset, len)?;
        }
        ShmCommand::Unlink { name } => nodeipc_shm::unlink(&name)?,
    }
    Ok(())
}

fn check_offset(name: &str, offset: u64, size: u64) -> CmdResult {
    if offset > size {
        return Err(Failure::Error(format!(
            "--offset {offset} is past the end of {name} ({size} bytes)"
        )));
    }
    Ok(())
}

/// Copies `len` bytes from `offset` to standard output, a chunk at a time;
/// stops early, quietly, when standard output's reader leaves.
fn read_to_stdout(fd: BorrowedFd<'_>, name: &str, offset: u64, len: u64) -> CmdResult {
    let end = offset + len;
    let mut buf = vec![0u8; CHUNK.min(usize::try_from(len).unwrap_or(CHUNK))];
    let mut at = offset;
    while at < end {
        let want = buf.len().min(usize::try_from(end - at).unwrap_or(CHUNK));
        let got = match rustix::io::pread(fd, &mut buf[..want], at) {
            Ok(0) => {
                return Err(Failure::Error(format!(
                    "{name} ended at byte {at} while it was read (it had {end} bytes or more): \
                     another process shrank it"
                )));
            }
            Ok(got) => got,
            Err(Errno::INTR) => continue,
            Err(e) => {
                return Err(Failure::Error(format!(
                    "reading {name} at byte {at}: {}",
                    std::io::Error::from(e)
                )));
            }
        };
        if !crate::output::bytes(&buf[..got]) {
            // The reader left (or standard output failed: `finish` says so).
            break;
        }
        at += got as u64;
    }
    Ok(())
}

/// Copies standard input into the region from `offset`, a chunk at a time.
/// Each chunk is checked before it is written: input that would run past the
/// end is refused before any byte of that chunk lands (so input up to a
/// chunk long is written whole or not at all).
fn write_stdin(fd: BorrowedFd<'_>, name: &str, offset: u64, size: u64) -> CmdResult {
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; CHUNK];
    let mut at = offset;
    loop {
        let filled = fill(&mut stdin, &mut buf)?;
        if filled == 0 {
            return Ok(());
        }
        if filled as u64 > size - at {
            let written = at - offset;
            return Err(Failure::Error(format!(
                "standard input would write outside {name}: it holds more than the {} bytes \
                 from --offset {offset} to its end ({size} bytes){}",
                size - offset,
                if written > 0 {
                    format!("; the first {written} bytes were written")
                } else {
                    "; nothing was written".to_owned()
                }
            )));
        }
        let mut done = 0;
        while done < filled {
            match rustix::io::pwrite(fd, &buf[done..filled], at) {
                Ok(0) => {
                    return Err(Failure::Error(format!(
                        "writing {name} at byte {at}: the kernel took no bytes"
                    )));
                }
                Ok(n) => {
                    done += n;
                    at += n as u64;
                }
                Err(Errno::INTR) => {}
                Err(e) => {
                    return Err(Failure::Error(format!(
                        "writing {name} at byte {at}: {}",
                        std::io::Error::from(e)
                    )));
                }
            }
        }
    }
}

/// Reads until `buf` is full or input ends; the bytes read.
fn fill(input: &mut impl Read, buf: &mut [u8]) -> Result<usize, Failure> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure::Error(format!("reading standard input: {e}"))),
        }
    }
    Ok(filled)
}
