//! Creating a queue: the region, its header, no role taken.

use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use crate::Message;
use nodeipc_shm::{Pages, Region};

use crate::layout::{self, Geometry, Header};
use crate::{Consumer, Error, Producer, Result};

/// A queue of `T` its creator made: it owns the region (and, for a named
/// one, removes the name when dropped) and hands it to the two ends, in
/// this process ([`producer`](Queue::producer), [`consumer`](Queue::consumer))
/// or another ([`as_fd`](Queue::as_fd), or the name).
#[derive(Debug)]
pub struct Queue<T> {
    region: Arc<Region>,
    schema: u64,
    _message: PhantomData<fn(T) -> T>,
}

impl<T: Message> Queue<T> {
    /// Creates a named queue of `capacity` slots (a power of two).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the capacity or a zero-sized or too
    /// large `T`; those of `Region::create`.
    pub fn create(name: &str, capacity: u32, schema: u64) -> Result<Self> {
        let geo = Geometry::new(name, size_of::<T>(), capacity)?;
        let region = Region::create(name, region_len(name, geo)?)?;
        Ok(Self::init(region, geo, schema))
    }

    /// Creates an anonymous queue (a memfd, sealed against growing and
    /// shrinking), to hand over as a descriptor.
    ///
    /// # Errors
    /// As [`create`](Queue::create).
    pub fn anonymous(capacity: u32, schema: u64) -> Result<Self> {
        Self::anonymous_pages(capacity, schema, Pages::Normal)
    }

    /// As [`anonymous`](Queue::anonymous), backed as `pages` asks: with
    /// [`Pages::HugeOrNormal`] huge pages when the system can reserve them
    /// now (`fallocate` at creation), else normal ones;
    /// [`huge_pages`](Queue::huge_pages) says which it got.
    ///
    /// # Errors
    /// As [`anonymous`](Queue::anonymous); with [`Pages::Huge`],
    /// `nodeipc_shm::Error::HugePagesUnavailable` saying what the system has.
    pub fn anonymous_pages(capacity: u32, schema: u64, pages: Pages) -> Result<Self> {
        let geo = Geometry::new("memfd queue", size_of::<T>(), capacity)?;
        let region = Region::anonymous_pages(region_len("memfd queue", geo)?, pages)?;
        region.seal_grow_shrink()?;
        Ok(Self::init(region, geo, schema))
    }

    /// Whether huge pages back the queue's region.
    pub fn huge_pages(&self) -> bool {
        self.region.is_huge()
    }

    fn init(region: Region, geo: Geometry, schema: u64) -> Self {
        // A fresh region is ours alone until we hand it over.
        let header: &Header = region
            .view(0)
            .expect("a fresh region holds the header: its length was computed for it");
        layout::init(header, size_of::<T>(), align_of::<T>(), geo, schema);
        Queue {
            region: Arc::new(region),
            schema,
            _message: PhantomData,
        }
    }

    /// Takes the producer role in this process.
    ///
    /// # Errors
    /// As [`Producer::join`].
    pub fn producer(&self) -> Result<Producer<T>> {
        Producer::join(self.region.clone(), self.schema)
    }

    /// Takes the consumer role in this process.
    ///
    /// # Errors
    /// As [`Consumer::join`].
    pub fn consumer(&self) -> Result<Consumer<T>> {
        Consumer::join(self.region.clone(), self.schema)
    }

    /// The region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }
}

impl<T> AsFd for Queue<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.region.as_fd()
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
