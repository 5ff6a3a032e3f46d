//! What `nodeipc ls` shows of a queue, read without joining it.

use nodeipc_shm::Region;

use crate::layout::{Header, MAGIC, MAX_CAPACITY};
use crate::sync::Ordering;

/// A queue seen from outside: its header's words, each read once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// Slots.
    pub capacity: u32,
    /// Bytes of a message.
    pub element_size: u32,
    /// Messages published and not yet consumed (tail − head; a value past
    /// the capacity is shown as it is: the indices are corrupt).
    pub len: u32,
    /// The producer's pid (0: none).
    pub producer: u32,
    /// The consumer's pid (0: none).
    pub consumer: u32,
}

/// Reads a queue's header, or `None` when the region is not a queue.
pub fn inspect(region: &Region) -> Option<QueueInfo> {
    let header: &Header = region.view(0).ok()?;
    let c = &header.config;
    if c.magic.load(Ordering::Acquire) != MAGIC {
        return None;
    }
    let capacity = c.capacity.load(Ordering::Relaxed);
    if capacity > MAX_CAPACITY {
        return None;
    }
    let tail = header.tail.load(Ordering::Acquire);
    let head = header.head.load(Ordering::Acquire);
    Some(QueueInfo {
        capacity,
        element_size: c.elem_size.load(Ordering::Relaxed),
        len: tail.wrapping_sub(head),
        producer: header.roles.producer.pid.load(Ordering::Relaxed),
        consumer: header.roles.consumer.pid.load(Ordering::Relaxed),
    })
}
