//! One joined end of a queue: the region, checked; the role, taken; the
//! header and slots, located. Shared by [`Producer`](crate::Producer) and
//! [`Consumer`](crate::Consumer).

use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use crate::Message;
use nodeipc_fdpass::{Identity, PeerRecord};
use nodeipc_shm::{OpenOptions, Region};
use rustix::fs::SealFlags;
use rustix::io::Errno;

use crate::error::Role;
use crate::layout::{self, Geometry, Header, SLOTS_OFFSET};
use crate::ring::{BadIndex, Ring};
use crate::role::{self, PeerState, PeerWatch};
use crate::sync::{AtomicU64, Ordering};
use crate::{Error, Result};

#[derive(Debug)]
pub(crate) struct End {
    region: Arc<Region>,
    header: NonNull<Header>,
    slots: NonNull<AtomicU64>,
    /// `capacity × stride`, the length `view_slice` checked.
    words: usize,
    pub(crate) geo: Geometry,
    pub(crate) label: String,
    role: Role,
    me: Identity,
    pub(crate) watch: PeerWatch,
}

// SAFETY: the pointers point into the mapping `region` keeps alive, and all
// access through them is atomic: the end may move to and be shared with
// other threads like the `Region` itself.
unsafe impl Send for End {}
// SAFETY: as above.
unsafe impl Sync for End {}

/// Refuses a memfd whose size is not sealed against growing and shrinking.
/// A named object cannot carry those seals: one we opened by name passed the
/// owner and mode check of `Region::open`; one received as a descriptor is
/// trusted as its sender is (see SECURITY.md).
pub(crate) fn check_seals(region: &Region, label: &str) -> Result<()> {
    // A descriptor `/proc` cannot place may be a memfd: seals demanded.
    if region.name().is_some() || !region.is_memfd().unwrap_or(true) {
        return Ok(());
    }
    match rustix::fs::fcntl_get_seals(region.as_fd()) {
        Ok(seals) if seals.contains(SealFlags::SHRINK | SealFlags::GROW) => Ok(()),
        Ok(_) | Err(Errno::INVAL) => Err(Error::NotSealed {
            queue: label.to_owned(),
        }),
        Err(e) => Err(nodeipc_shm::Error::Io {
            op: "fcntl(F_GET_SEALS)",
            object: label.to_owned(),
            source: e.into(),
        }
        .into()),
    }
}

/// Opens a named queue region (SPSC or MPMC: both begin with the same
/// [`layout::Config`]) once it holds `min_len` bytes, and waits (bounded)
/// for its creator to publish it: the creator writes the magic last.
pub(crate) fn open_published(name: &str, min_len: usize, timeout: Duration) -> Result<Arc<Region>> {
    let region = Arc::new(Region::open(name, OpenOptions::wait(min_len, timeout))?);
    let config: &layout::Config = region.view(0)?;
    config.wait_published(timeout);
    Ok(region)
}

impl End {
    pub(crate) fn join<T: Message>(region: Arc<Region>, schema: u64, role: Role) -> Result<End> {
        let label = region.label().to_owned();
        check_seals(&region, &label)?;
        let header: &Header = region.view(0)?;
        let geo = layout::check(
            &label,
            header,
            region.len(),
            size_of::<T>(),
            align_of::<T>(),
            schema,
        )?;
        let words = geo.words().ok_or_else(|| Error::BadHeader {
            queue: label.clone(),
            reason: "slot area overflows".to_owned(),
        })?;
        let slots = region.view_slice::<AtomicU64>(SLOTS_OFFSET, words)?;
        let me = role::me()?;
        let word = match role {
            Role::Producer => &header.roles.producer,
            Role::Consumer => &header.roles.consumer,
        };
        let took_over = role::claim(&label, word, role, me)?;
        if took_over {
            // The dead holder may have died parked: its announcement would
            // cost its peer a futile wake-up on every operation.
            match role {
                Role::Producer => header.head_parked.store(0, Ordering::SeqCst),
                Role::Consumer => header.tail_parked.store(0, Ordering::SeqCst),
            }
        }
        let header = NonNull::from(header);
        let slots = NonNull::from(slots).cast::<AtomicU64>();
        Ok(End {
            region,
            header,
            slots,
            words,
            geo,
            label,
            role,
            me,
            watch: PeerWatch::default(),
        })
    }

    pub(crate) fn open_named<T: Message>(
        name: &str,
        schema: u64,
        timeout: Duration,
        role: Role,
    ) -> Result<End> {
        End::join::<T>(open_published(name, SLOTS_OFFSET, timeout)?, schema, role)
    }

    pub(crate) fn from_fd<T: Message>(fd: OwnedFd, schema: u64, role: Role) -> Result<End> {
        End::join::<T>(Arc::new(Region::from_fd(fd)?), schema, role)
    }

    #[inline]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: `header` was checked (bounds, alignment) by `Region::view`
        // and points into the mapping `self.region` keeps alive; `Header` is
        // made of atomics, so other processes writing it is no data race.
        unsafe { self.header.as_ref() }
    }

    #[inline]
    pub(crate) fn ring(&self) -> Ring<'_> {
        // SAFETY: `Region::view_slice` checked these `words` words (which
        // are `capacity × stride`, what `Ring` relies on) when we joined; the
        // mapping lives as long as `self.region`, and every access to them
        // is atomic.
        let slots = unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.words) };
        Ring {
            header: self.header(),
            slots,
            geo: self.geo,
        }
    }

    /// The header and the peer watch, borrowed apart (a wait checks the
    /// peer between slices while it parks on a header word).
    pub(crate) fn split(&mut self) -> (&Header, &mut PeerWatch) {
        // SAFETY: as in `header`; the header is not part of `watch`.
        (unsafe { self.header.as_ref() }, &mut self.watch)
    }

    pub(crate) fn region(&self) -> &Arc<Region> {
        &self.region
    }

    fn peer_word(&self) -> &PeerRecord {
        match self.role {
            Role::Producer => &self.header().roles.consumer,
            Role::Consumer => &self.header().roles.producer,
        }
    }

    /// What became of the peer.
    pub(crate) fn peer(&mut self) -> PeerState {
        let role = self.role;
        let (header, watch) = self.split();
        watch.state(match role {
            Role::Producer => &header.roles.consumer,
            Role::Consumer => &header.roles.producer,
        })
    }

    pub(crate) fn corrupt(&self, bad: BadIndex) -> Error {
        Error::Corrupt {
            queue: self.label.clone(),
            what: bad.0,
        }
    }

    #[cold]
    pub(crate) fn invalid(&self, index: u32, invalid: crate::Invalid) -> Error {
        Error::Invalid {
            queue: self.label.clone(),
            index,
            slot: index & (self.geo.capacity - 1),
            invalid,
        }
    }

    /// The error for a peer seen gone while we waited: died (`Some(pid)`)
    /// or left cleanly.
    pub(crate) fn peer_gone(&self, died: Option<u32>) -> Error {
        let role = self.role.other();
        match died {
            Some(pid) => Error::PeerDied {
                queue: self.label.clone(),
                role,
                pid,
            },
            None => Error::PeerLeft {
                queue: self.label.clone(),
                role,
            },
        }
    }

    /// Which pid holds the peer role (0: nobody).
    pub(crate) fn peer_pid(&self) -> u32 {
        self.peer_word().pid.load(Ordering::Acquire)
    }
}

impl Drop for End {
    fn drop(&mut self) {
        let header = self.header();
        let (word, peer_wakes) = match self.role {
            Role::Producer => (&header.roles.producer, &header.tail),
            Role::Consumer => (&header.roles.consumer, &header.head),
        };
        word.leave(self.me);
        // A parked peer checks our role at its next slice; wake it now.
        let _ = nodeipc_shm::wait::unpark(peer_wakes, u32::MAX);
    }
}
