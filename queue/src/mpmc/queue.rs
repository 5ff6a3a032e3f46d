//! Creating an MPMC ring: the region, its header, no place taken.

use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use nodeipc_shm::{Pages, Region};

use crate::mpmc::layout::{self, Geometry, Header};
use crate::mpmc::ring::Slots;
use crate::sync::Ordering;
use crate::{Error, Message, MpmcConsumer, MpmcProducer, Result};

/// An MPMC ring of `T` its creator made, for up to `producers` producers
/// and `consumers` consumers (fixed here: joins beyond are refused). It
/// owns the region (a named one loses its name when dropped) and hands it
/// to the ends, here ([`producer`](MpmcQueue::producer),
/// [`consumer`](MpmcQueue::consumer)) or in other processes
/// ([`as_fd`](MpmcQueue::as_fd), or the name).
#[derive(Debug)]
pub struct MpmcQueue<T> {
    region: Arc<Region>,
    schema: u64,
    _message: PhantomData<fn(T) -> T>,
}

impl<T: Message> MpmcQueue<T> {
    /// Creates a named ring of `capacity` slots (a power of two, 4 to 2^30)
    /// for 1 to 64 producers and 1 to 64 consumers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]; those of `Region::create`.
    pub fn create(
        name: &str,
        capacity: u32,
        producers: u32,
        consumers: u32,
        schema: u64,
    ) -> Result<Self> {
        let geo = Geometry::new(name, size_of::<T>(), capacity, producers, consumers)?;
        let region = Region::create(name, region_len(name, geo)?)?;
        Ok(Self::init(region, geo, schema))
    }

    /// Creates an anonymous ring (a memfd sealed against growing and
    /// shrinking).
    ///
    /// # Errors
    /// As [`create`](MpmcQueue::create).
    pub fn anonymous(capacity: u32, producers: u32, consumers: u32, schema: u64) -> Result<Self> {
        Self::anonymous_pages(capacity, producers, consumers, schema, Pages::Normal)
    }

    /// As [`anonymous`](MpmcQueue::anonymous), backed as `pages` asks (see
    /// [`Queue::anonymous_pages`](crate::Queue::anonymous_pages)).
    ///
    /// # Errors
    /// As [`anonymous`](MpmcQueue::anonymous); with [`Pages::Huge`],
    /// `nodeipc_shm::Error::HugePagesUnavailable`.
    pub fn anonymous_pages(
        capacity: u32,
        producers: u32,
        consumers: u32,
        schema: u64,
        pages: Pages,
    ) -> Result<Self> {
        let label = "memfd mpmc queue";
        let geo = Geometry::new(label, size_of::<T>(), capacity, producers, consumers)?;
        let region = Region::anonymous_pages(region_len(label, geo)?, pages)?;
        region.seal_grow_shrink()?;
        Ok(Self::init(region, geo, schema))
    }

    fn init(region: Region, geo: Geometry, schema: u64) -> Self {
        // A fresh region is ours alone until we hand it over.
        let header: &Header = region
            .view(0)
            .expect("a fresh region holds the header: its length was computed for it");
        // Each slot's sequence word starts at its index: free for lap 0.
        let slots = SeqWords {
            region: &region,
            geo,
        };
        for i in 0..geo.capacity as usize {
            slots.seq(i).store(i as u32, Ordering::Relaxed);
        }
        layout::init(header, size_of::<T>(), align_of::<T>(), geo, schema);
        MpmcQueue {
            region: Arc::new(region),
            schema,
            _message: PhantomData,
        }
    }

    /// Takes a producer place in this process.
    ///
    /// # Errors
    /// As [`MpmcProducer::join`].
    pub fn producer(&self) -> Result<MpmcProducer<T>> {
        MpmcProducer::join(self.region.clone(), self.schema)
    }

    /// Takes a consumer place in this process.
    ///
    /// # Errors
    /// As [`MpmcConsumer::join`].
    pub fn consumer(&self) -> Result<MpmcConsumer<T>> {
        MpmcConsumer::join(self.region.clone(), self.schema)
    }

    /// Whether huge pages back the ring's region.
    pub fn huge_pages(&self) -> bool {
        self.region.is_huge()
    }

    /// The region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }
}

impl<T> AsFd for MpmcQueue<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.region.as_fd()
    }
}

/// The sequence words of a fresh region, for its initialisation.
struct SeqWords<'a> {
    region: &'a Region,
    geo: Geometry,
}

impl Slots for SeqWords<'_> {
    fn seq(&self, index: usize) -> &crate::sync::AtomicU32 {
        self.region
            .view(self.geo.slots_offset + index * self.geo.stride)
            .expect("a fresh region holds its slots: its length was computed for them")
    }

    fn words(&self, _index: usize) -> &[crate::sync::AtomicU64] {
        &[]
    }
}

fn region_len(queue: &str, geo: Geometry) -> Result<usize> {
    geo.region_len().ok_or_else(|| Error::InvalidArgument {
        queue: queue.to_owned(),
        what: "capacity",
        value: u64::from(geo.capacity),
        limit: "capacity × message size overflows the address space",
    })
}
