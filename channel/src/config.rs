//! The shape of a channel, agreed by the coordinator and every worker.

use std::time::Duration;

use nodeipc_shm::Region;

use crate::layout::{self, Layout};
use crate::sem_kind::{Direction, Role, SemKind};
use crate::{Error, Result};

/// Everything that fixes a channel's layout and behaviour: plain data,
/// which a [`ChannelBuilder`](crate::ChannelBuilder) fills (and
/// [`Coordinator::config`](crate::Coordinator::config) and
/// [`Worker::config`](crate::Worker::config) give back), and which a worker
/// joining by name is given ([`Worker::join`](crate::Worker::join)).
#[derive(Clone, Debug)]
pub struct ChannelConfig {
    /// The channel's name, a POSIX shared-memory name (`/nodeipc-job42-exec`).
    /// Named regions and semaphores derive their names from it; two channels
    /// with different names never meet.
    pub name: String,
    /// Worker processes, 1..=[`MAX_WORKERS`](crate::MAX_WORKERS).
    pub workers: u32,
    /// Bytes of the largest request frame (length prefix included).
    pub request_capacity: usize,
    /// Bytes of each worker's response slot (length prefix included).
    pub response_slot_size: usize,
    /// Bytes of each worker's init-response slot (length prefix included).
    pub init_slot_size: usize,
    /// Requests the coordinator may run ahead of the slowest worker: the
    /// request region is a ring of this many frames (1: lock-step).
    pub depth: u32,
    /// Which semaphores to use.
    pub sems: SemKind,
    /// How long one call (a send, a gather, a receive) may wait on its
    /// peers, unless the call is given a timeout of its own.
    pub timeout: Duration,
    /// How long a waiting side busy-polls before it sleeps. Zero (the
    /// default): the semaphores' own short spin, then a futex sleep — no
    /// core burnt while a peer works. Longer: lower latency when a peer
    /// takes microseconds to answer (a large request being read), at the
    /// price of a core spinning meanwhile, as a polling transport does.
    /// Each process chooses its own (see [`Worker::set_poll`](crate::Worker::set_poll)).
    pub poll: Duration,
}

impl ChannelConfig {
    /// A configuration with defaults: 64 KiB requests, 16 KiB responses,
    /// 4 KiB init slots, depth 1, in-region semaphores, a 30 s timeout, no
    /// busy-polling. Change a field as needed, or build the channel with
    /// [`Channel::builder`](crate::Channel::builder).
    pub fn new(name: impl Into<String>, workers: u32) -> ChannelConfig {
        ChannelConfig {
            name: name.into(),
            workers,
            request_capacity: 64 << 10,
            response_slot_size: 16 << 10,
            init_slot_size: 4 << 10,
            depth: 1,
            sems: SemKind::InRegion,
            timeout: Duration::from_secs(30),
            poll: Duration::ZERO,
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |reason: String| {
            Err(Error::InvalidConfig {
                channel: self.name.clone(),
                reason,
            })
        };
        // Named semaphores derive their names from the channel's; with
        // in-region ones over anonymous regions the name only labels errors
        // (named regions check their own names when they are created).
        if self.sems == SemKind::Named {
            if let Err(e) = nodeipc_shm::validate_name(&self.name) {
                return invalid(e.to_string());
            }
            // The longest derived name: `<name>_response_produce_<rank>`.
            if self.name.len() + "_response_produce_".len() + 10 > 251 {
                return invalid(format!(
                    "name is {} bytes; names derived from it would be too long",
                    self.name.len()
                ));
            }
        }
        self.layout().check(&self.name)
    }

    /// Where everything sits in the regions of a channel of this shape.
    pub fn layout(&self) -> Layout {
        Layout {
            workers: self.workers,
            depth: self.depth,
            request_capacity: self.request_capacity,
            response_slot_size: self.response_slot_size,
            init_slot_size: self.init_slot_size,
        }
    }

    /// The configuration a coordinator published in the regions' headers,
    /// for workers that received the regions without one (through the
    /// handshake). Range-checked like any configuration before anything is
    /// computed from it; `name` only labels errors, `timeout` bounds waits.
    pub(crate) fn published(
        name: &str,
        request: &Region,
        response: &Region,
        timeout: Duration,
    ) -> Result<ChannelConfig> {
        let (layout, sems) = layout::read_published(name, request, response)?;
        let config = ChannelConfig {
            name: name.to_owned(),
            workers: layout.workers,
            request_capacity: layout.request_capacity,
            response_slot_size: layout.response_slot_size,
            init_slot_size: layout.init_slot_size,
            depth: layout.depth,
            sems,
            timeout,
            poll: Duration::ZERO,
        };
        config.check()?;
        Ok(config)
    }

    /// The name of one of the named semaphores.
    pub fn semaphore_name(&self, direction: Direction, role: Role, rank: u32) -> String {
        format!(
            "{}_{}_{}_{rank}",
            self.name,
            direction.as_str(),
            role.as_str()
        )
    }

    /// The name of the named request region.
    pub fn request_region_name(&self) -> String {
        format!("{}_request", self.name)
    }

    /// The name of the named response region.
    pub fn response_region_name(&self) -> String {
        format!("{}_response", self.name)
    }
}
