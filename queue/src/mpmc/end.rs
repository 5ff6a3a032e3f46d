//! One joined end of an MPMC ring: the region, checked; a place, taken;
//! the header, places and slots, located; watches on the other places.

use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use nodeipc_fdpass::{Identity, PeerWatch, Taken};
use nodeipc_shm::Region;

use crate::end::{check_seals, open_published};
use crate::error::Role;
use crate::mpmc::layout::{self, Geometry, Header, PLACE_LEN, PLACES_OFFSET, Place};
use crate::mpmc::ring::{Ring, Slots};
use crate::ring::BadIndex;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::{Error, Message, Result};

/// The slots of a mapped ring, by raw pointer: slot `i` is `stride` bytes
/// at `base + i × stride`, a 4-byte sequence word (and 4 reserved bytes),
/// then the message's words. Only ever accessed through those two views,
/// never as other sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawSlots {
    base: NonNull<u8>,
    stride: usize,
    words: usize,
}

impl Slots for RawSlots {
    #[inline]
    fn seq(&self, index: usize) -> &AtomicU32 {
        // SAFETY: `index < capacity` (the ring masks it) and the region
        // holds `capacity × stride` bytes from `base` (checked at join);
        // `base` is 128-byte and `stride` 8-byte aligned, so the word is
        // aligned; it is only ever accessed as this atomic, by any process.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(index * self.stride)
                .cast::<AtomicU32>()
        }
    }

    #[inline]
    fn words(&self, index: usize) -> &[AtomicU64] {
        // SAFETY: as in `seq`: bytes `8 .. stride` of slot `index` are
        // `words` whole, aligned 64-bit words inside the mapping, only ever
        // accessed as these atomics.
        unsafe {
            std::slice::from_raw_parts(
                self.base
                    .as_ptr()
                    .add(index * self.stride + 8)
                    .cast::<AtomicU64>(),
                self.words,
            )
        }
    }
}

#[derive(Debug)]
pub(crate) struct MpmcEnd {
    region: Arc<Region>,
    header: NonNull<Header>,
    /// Producer places, then consumer places.
    places: NonNull<Place>,
    slots: RawSlots,
    pub(crate) geo: Geometry,
    pub(crate) label: String,
    pub(crate) role: Role,
    /// Our place's index among our role's.
    pub(crate) place: usize,
    me: Identity,
    /// A watch per place (producers, then consumers), to tell their
    /// holders' liveness by one `poll` each.
    watches: Vec<PeerWatch>,
}

// SAFETY: the pointers point into the mapping `region` keeps alive and
// every access through them is atomic: an end may move between threads.
unsafe impl Send for MpmcEnd {}
// SAFETY: as above.
unsafe impl Sync for MpmcEnd {}

impl MpmcEnd {
    pub(crate) fn join<T: Message>(
        region: Arc<Region>,
        schema: u64,
        role: Role,
    ) -> Result<MpmcEnd> {
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
        let n = (geo.producers + geo.consumers) as usize;
        let places = region.view_slice::<Place>(PLACES_OFFSET, n)?;
        debug_assert_eq!(PLACE_LEN, size_of::<Place>());
        // The slot area, bounds-checked once (`check` compared the length).
        region.check_range(geo.slots_offset, geo.capacity as usize * geo.stride)?;
        // SAFETY: in bounds (checked just above) of the live mapping.
        let base = unsafe { region.as_ptr().add(geo.slots_offset) };
        let slots = RawSlots {
            base: NonNull::new(base).expect("a mapping is never at address 0"),
            stride: geo.stride,
            words: (geo.stride - 8) / 8,
        };
        let me = Identity::current()?;
        let (mine, count) = match role {
            Role::Producer => (&places[..geo.producers as usize], geo.producers),
            Role::Consumer => (&places[geo.producers as usize..], geo.consumers),
        };
        let mut holders = Vec::new();
        let mut taken = None;
        'find: for take_over in [false, true] {
            for (i, place) in mine.iter().enumerate() {
                match place.peer.take(me, take_over)? {
                    Taken::Vacant | Taken::FromDead(_) => {
                        taken = Some(i);
                        break 'find;
                    }
                    Taken::Refused(pid) if take_over => holders.push(pid),
                    Taken::Refused(_) => {}
                }
            }
        }
        let Some(place) = taken else {
            return Err(Error::NoPlace {
                queue: label,
                role,
                places: count,
                holders,
            });
        };
        // A dead holder's claim is its own no more: dropping it lets the
        // positions it held be skipped or released by whoever they hold up.
        mine[place].claim.store(0, Ordering::Release);
        let header = NonNull::from(header);
        let places = NonNull::from(places).cast::<Place>();
        Ok(MpmcEnd {
            region,
            header,
            places,
            slots,
            geo,
            label,
            role,
            place,
            me,
            watches: (0..n).map(|_| PeerWatch::new()).collect(),
        })
    }

    pub(crate) fn open_named<T: Message>(
        name: &str,
        schema: u64,
        timeout: Duration,
        role: Role,
    ) -> Result<MpmcEnd> {
        MpmcEnd::join::<T>(open_published(name, PLACES_OFFSET, timeout)?, schema, role)
    }

    pub(crate) fn from_fd<T: Message>(fd: OwnedFd, schema: u64, role: Role) -> Result<MpmcEnd> {
        MpmcEnd::join::<T>(Arc::new(Region::from_fd(fd)?), schema, role)
    }

    #[inline]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: `header` was checked (bounds, alignment) by `Region::view`
        // and points into the mapping `self.region` keeps alive; `Header` is
        // made of atomics, so other processes writing it is no data race.
        unsafe { self.header.as_ref() }
    }

    #[inline]
    fn places(&self) -> &[Place] {
        // SAFETY: `view_slice` checked these places at join; the mapping
        // lives as long as `self.region`; all access is atomic.
        unsafe {
            std::slice::from_raw_parts(
                self.places.as_ptr(),
                (self.geo.producers + self.geo.consumers) as usize,
            )
        }
    }

    #[inline]
    pub(crate) fn ring(&self) -> Ring<'_, RawSlots> {
        let places = self.places();
        let (producers, consumers) = places.split_at(self.geo.producers as usize);
        Ring {
            header: self.header(),
            producers,
            consumers,
            slots: &self.slots,
            capacity: self.geo.capacity,
        }
    }

    /// Our place.
    #[inline]
    pub(crate) fn me(&self) -> &Place {
        &self.places()[self.index(self.role, self.place)]
    }

    fn index(&self, role: Role, i: usize) -> usize {
        match role {
            Role::Producer => i,
            Role::Consumer => self.geo.producers as usize + i,
        }
    }

    /// Whether place `i` of `role` is held by a live process. A vacant
    /// place is not; failing to look (our own trouble) is no death.
    pub(crate) fn live(&mut self, role: Role, i: usize) -> bool {
        let at = self.index(role, i);
        // SAFETY: as in `places`; the place is read, not borrowed from self.
        let place = unsafe { &*self.places.as_ptr().add(at) };
        match place.peer.holder() {
            None => false,
            Some(holder) if holder == self.me => true,
            Some(holder) => self.watches[at].alive(holder).unwrap_or(true),
        }
    }

    /// What became of the other role's holders: `None` while one lives (or
    /// nobody has joined yet), else `PeerDied` naming a dead one's pid, or
    /// `PeerLeft` when all left cleanly.
    pub(crate) fn others_gone(&mut self) -> Option<Error> {
        let other = self.role.other();
        let count = match other {
            Role::Producer => self.geo.producers,
            Role::Consumer => self.geo.consumers,
        } as usize;
        let (mut ever, mut dead) = (false, None);
        for i in 0..count {
            let at = self.index(other, i);
            // SAFETY: as in `places`.
            let place = unsafe { &*self.places.as_ptr().add(at) };
            if place.peer.joins.load(Ordering::Acquire) > 0 {
                ever = true;
            }
            if let Some(holder) = place.peer.holder() {
                if self.watches[at].alive(holder).unwrap_or(true) {
                    return None;
                }
                dead = Some(holder.pid);
            }
        }
        if !ever {
            return None;
        }
        Some(match dead {
            Some(pid) => Error::PeerDied {
                queue: self.label.clone(),
                role: other,
                pid,
            },
            None => Error::PeerLeft {
                queue: self.label.clone(),
                role: other,
            },
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

    pub(crate) fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Positions skipped and messages lost so far (the ring's counters).
    pub(crate) fn counters(&self) -> (u64, u64) {
        let c = &self.header().counters;
        (
            c.skipped.load(Ordering::Acquire),
            c.lost.load(Ordering::Acquire),
        )
    }
}

/// A word to park on and the parked count to announce on, held apart from
/// the end (whose liveness checks run between park slices): the region
/// they live in is kept alive by the `Arc` held here.
pub(crate) struct ParkSpot {
    _region: Arc<Region>,
    word: NonNull<AtomicU32>,
    parked: NonNull<AtomicU32>,
}

impl ParkSpot {
    pub(crate) fn word(&self) -> &AtomicU32 {
        // SAFETY: a slot's sequence word of the mapping `_region` keeps
        // alive (located by `RawSlots::seq`); accessed atomically only.
        unsafe { self.word.as_ref() }
    }

    pub(crate) fn parked(&self) -> &AtomicU32 {
        // SAFETY: a header word of the same mapping; atomic only.
        unsafe { self.parked.as_ref() }
    }
}

impl MpmcEnd {
    /// Position `at`'s sequence word, and the parked count of `role`'s
    /// waiters (consumers wait for data, producers for room).
    pub(crate) fn park_spot(&self, at: u32, role: Role) -> ParkSpot {
        let ring = self.ring();
        let parked = match role {
            Role::Consumer => &*ring.header.data_parked,
            Role::Producer => &*ring.header.room_parked,
        };
        ParkSpot {
            _region: Arc::clone(&self.region),
            word: NonNull::from(ring.seq(at)),
            parked: NonNull::from(parked),
        }
    }
}

impl Drop for MpmcEnd {
    fn drop(&mut self) {
        let me = self.me;
        self.me().peer.leave(me);
        // Parked peers check the places at their next slice; nudge them now.
        let ring = self.ring();
        for cursor in [&ring.header.head, &ring.header.tail] {
            let at = cursor.load(Ordering::Acquire);
            let _ = nodeipc_shm::wait::unpark(ring.seq(at), u32::MAX);
        }
    }
}
