//! Rank groups for C (`nodeipc_barrier::Group`): join, barriers,
//! all-gather into the caller's buffer, descriptor exchange and broadcast.

use std::ffi::{c_char, c_int};
use std::os::fd::IntoRawFd;

use nodeipc_barrier::{Group, GroupOptions};

use super::args::{
    self, Handle, bytes, bytes_mut, handle, handle_mut, handle_type, millis, out, text,
};
use super::fdpass::borrow;
use super::status::{Failure, NODEIPC_ERR_INVALID_ARGUMENT, Outcome, guard, nodeipc_status};

/// One rank's membership of a group. One thread at a time: a group's calls
/// must not overlap (as every rank's calls follow the same order anyway).
pub struct nodeipc_group {
    magic: u64,
    /// The fork generation it was made in: a forked child may only free it.
    born: nodeipc_fdpass::ForkGeneration,
    group: Group,
}

handle_type!(nodeipc_group, 0x4e49_4752_4f55_5021);

/// Joins group `name` (`/name`) as `rank` of `world_size`: rank 0 creates
/// it, the others wait for it; returns once every rank has joined, or fails
/// after `timeout_ms` (negative: forever). `slot_size` (0: 64) bounds one
/// round of `nodeipc_group_all_gather` and must be the same on every rank.
/// `timeout_ms` is also the group's timeout for each later call.
///
/// # Safety
/// `name` is a NUL-terminated string; `out_group` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_join(
    name: *const c_char,
    rank: u32,
    world_size: u32,
    slot_size: usize,
    timeout_ms: i64,
    out_group: *mut *mut nodeipc_group,
) -> nodeipc_status {
    guard("nodeipc_group_join", || {
        // SAFETY: the caller's contract above.
        let (name, slot) = unsafe { (text(name, "name")?, out(out_group, "out_group")?) };
        let mut options = GroupOptions::new(name, rank, world_size).timeout(millis(timeout_ms));
        if slot_size != 0 {
            options = options.slot_size(slot_size);
        }
        let group = Group::join(options)?;
        args::publish(
            nodeipc_group {
                magic: nodeipc_group::MAGIC,
                born: nodeipc_fdpass::ForkGeneration::current(),
                group,
            },
            slot,
        );
        Ok(())
    })
}

/// This rank, the world size and the slot size of the group.
///
/// # Safety
/// `group` is a live group handle; the three pointers are writable (any may
/// be NULL to skip it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_info(
    group: *const nodeipc_group,
    rank: *mut u32,
    world_size: *mut u32,
    slot_size: *mut usize,
) -> nodeipc_status {
    guard("nodeipc_group_info", || {
        // SAFETY: the caller's contract above.
        let g = &unsafe { handle(group)? }.group;
        // SAFETY: each is NULL or writable, per the contract above.
        unsafe {
            if let Some(r) = rank.as_mut() {
                *r = g.rank();
            }
            if let Some(w) = world_size.as_mut() {
                *w = g.world_size();
            }
            if let Some(s) = slot_size.as_mut() {
                *s = g.slot_size();
            }
        }
        Ok(())
    })
}

/// Waits until every rank has called a barrier, up to the group's timeout.
/// A timeout, a dead or departed rank poisons the group: every rank's
/// pending and later calls fail.
///
/// # Safety
/// `group` is a live group handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_barrier(group: *const nodeipc_group) -> nodeipc_status {
    guard("nodeipc_group_barrier", || {
        // SAFETY: the caller's contract above.
        Ok(unsafe { handle(group)? }.group.barrier()?)
    })
}

/// `nodeipc_group_barrier` with its own timeout (negative: forever).
///
/// # Safety
/// `group` is a live group handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_barrier_timeout(
    group: *const nodeipc_group,
    timeout_ms: i64,
) -> nodeipc_status {
    guard("nodeipc_group_barrier_timeout", || {
        // SAFETY: the caller's contract above.
        Ok(unsafe { handle(group)? }
            .group
            .barrier_timeout(millis(timeout_ms))?)
    })
}

/// A barrier among ranks `0..k` only; ranks `k..` must not call it.
///
/// # Safety
/// `group` is a live group handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_barrier_first(
    group: *const nodeipc_group,
    k: u32,
) -> nodeipc_status {
    guard("nodeipc_group_barrier_first", || {
        // SAFETY: the caller's contract above.
        Ok(unsafe { handle(group)? }.group.barrier_subset(k)?)
    })
}

/// A barrier that releases once any `k` ranks have arrived (ThunderKittens'
/// `sync(k)`); the others must not call it meanwhile. Shares its counter
/// with `nodeipc_group_barrier_first`: never run the two at once.
///
/// # Safety
/// `group` is a live group handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_barrier_arrivals(
    group: *const nodeipc_group,
    k: u32,
) -> nodeipc_status {
    guard("nodeipc_group_barrier_arrivals", || {
        // SAFETY: the caller's contract above.
        let g = &unsafe { handle(group)? }.group;
        Ok(g.barrier_arrivals_timeout(k, g.timeout())?)
    })
}

/// Every rank's `len` bytes of `data`, packed in rank order into `out`
/// (`out_len` at least world size × `len`). Every rank must pass the same
/// `len`; beyond the slot size the data goes in slot-sized rounds, one
/// barrier each.
///
/// # Safety
/// `group` is a live group handle; `data` points at `len` readable bytes and
/// `out` at `out_len` writable ones, not overlapping.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_all_gather(
    group: *mut nodeipc_group,
    data: *const u8,
    len: usize,
    out: *mut u8,
    out_len: usize,
) -> nodeipc_status {
    guard("nodeipc_group_all_gather", || {
        // SAFETY: the caller's contract above.
        let g = &mut unsafe { handle_mut(group)? }.group;
        if overlap(data, len, out, out_len) {
            return Err(Failure::invalid("data and out overlap"));
        }
        // SAFETY: the caller's contract above; the ranges do not overlap.
        let (data, out) = unsafe { (bytes(data, len, "data")?, bytes_mut(out, out_len, "out")?) };
        all_gather(g, data, out)
    })
}

/// Whether two non-empty byte ranges share an address: a shared and an
/// exclusive slice over the same bytes may not both exist.
fn overlap(a: *const u8, a_len: usize, b: *mut u8, b_len: usize) -> bool {
    let (a, b) = (a as usize, b as usize);
    a_len > 0 && b_len > 0 && a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

fn all_gather(g: &mut Group, data: &[u8], out: &mut [u8]) -> Outcome {
    let world = g.world_size() as usize;
    let len = data.len();
    let needed = world
        .checked_mul(len)
        .ok_or_else(|| Failure::invalid(format!("{world} ranks × {len} bytes overflows")))?;
    if out.len() < needed {
        return Err(Failure::new(
            super::status::NODEIPC_ERR_TOO_LARGE,
            format!(
                "out holds {} bytes; {world} ranks × {len} bytes need {needed}",
                out.len()
            ),
        ));
    }
    let slot = g.slot_size();
    let mut at = 0;
    loop {
        let chunk = &data[at..len.min(at + slot)];
        let gathered = g.all_gather(chunk)?;
        for (rank, theirs) in gathered.iter().enumerate() {
            if theirs.len() != chunk.len() {
                return Err(Failure::new(
                    NODEIPC_ERR_INVALID_ARGUMENT,
                    format!(
                        "rank {rank} gave {} bytes at offset {at} where this rank gave {}: every rank must pass the same length",
                        theirs.len(),
                        chunk.len()
                    ),
                ));
            }
            out[rank * len + at..][..chunk.len()].copy_from_slice(theirs);
        }
        at += chunk.len();
        if at >= len {
            return Ok(());
        }
    }
}

/// Rank `root`'s `len` bytes to every rank (at most the slot size), into
/// `out` (`out_len` at least the root's `len`); `*got` is how many arrived.
/// Non-root ranks may pass NULL and 0 as `data`.
///
/// # Safety
/// `group` is a live group handle; `data` points at `len` readable bytes,
/// `out` at `out_len` writable ones, `got` at a writable size_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_broadcast(
    group: *mut nodeipc_group,
    root: u32,
    data: *const u8,
    len: usize,
    out: *mut u8,
    out_len: usize,
    got: *mut usize,
) -> nodeipc_status {
    guard("nodeipc_group_broadcast", || {
        // SAFETY: the caller's contract above.
        let g = &mut unsafe { handle_mut(group)? }.group;
        if overlap(data, len, out, out_len) {
            return Err(Failure::invalid("data and out overlap"));
        }
        // SAFETY: the caller's contract above; the ranges do not overlap.
        let (data, out, got) = unsafe {
            (
                bytes(data, len, "data")?,
                bytes_mut(out, out_len, "out")?,
                args::out(got, "got")?,
            )
        };
        let theirs = g.broadcast(root, data)?;
        if theirs.len() > out.len() {
            return Err(Failure::new(
                super::status::NODEIPC_ERR_TOO_LARGE,
                format!(
                    "rank {root} sent {} bytes; out holds {}",
                    theirs.len(),
                    out.len()
                ),
            ));
        }
        out[..theirs.len()].copy_from_slice(&theirs);
        *got = theirs.len();
        Ok(())
    })
}

/// Every rank's descriptor to every other: `fds[r]` (of `n` ≥ world size
/// entries) receives a descriptor of ours for the file of rank `r`'s `fd`,
/// close-on-exec, the caller's to close; our own entry is -1. `fd` stays
/// the caller's. On failure no entry is set.
///
/// # Safety
/// `group` is a live group handle; `fds` points at `n` writable ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_exchange_fds(
    group: *mut nodeipc_group,
    fd: c_int,
    fds: *mut c_int,
    n: usize,
) -> nodeipc_status {
    guard("nodeipc_group_exchange_fds", || {
        // SAFETY: the caller's contract above.
        let g = &mut unsafe { handle_mut(group)? }.group;
        let world = g.world_size() as usize;
        if fds.is_null() || n < world {
            return Err(Failure::invalid(format!(
                "fds must hold the world size ({world}) entries; got {} with {n}",
                if fds.is_null() { "NULL" } else { "a pointer" }
            )));
        }
        let got = g.exchange_fds(borrow(fd, "fd")?)?;
        for (rank, received) in got.into_iter().enumerate() {
            let raw = received.map_or(-1, IntoRawFd::into_raw_fd);
            // SAFETY: rank < world <= n entries of the caller's array.
            unsafe { fds.add(rank).write(raw) };
        }
        Ok(())
    })
}

/// Rank `root`'s descriptor to every rank: the root passes its `fd` (it
/// stays the root's), the others' `fd` is ignored (-1 will do); every rank,
/// the root included, gets a descriptor of its own in `*out`.
///
/// # Safety
/// `group` is a live group handle; `out` points at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_broadcast_fd(
    group: *mut nodeipc_group,
    root: u32,
    fd: c_int,
    out: *mut c_int,
) -> nodeipc_status {
    guard("nodeipc_group_broadcast_fd", || {
        // SAFETY: the caller's contract above.
        let (g, out) = unsafe { (&mut handle_mut(group)?.group, args::out(out, "out")?) };
        let mine = if g.rank() == root {
            Some(borrow(fd, "fd")?)
        } else {
            None
        };
        *out = g.broadcast_fd(root, mine)?.into_raw_fd();
        Ok(())
    })
}

/// Leaves the group and frees the handle. Leaving while other ranks still
/// wait for this one makes their calls fail (`NODEIPC_ERR_PEER_LEFT`): end
/// with a barrier. NULL is a no-op.
///
/// # Safety
/// `group` is NULL or a live group handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_group_leave(group: *mut nodeipc_group) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    guard("nodeipc_group_leave", || unsafe { args::free(group) })
}
