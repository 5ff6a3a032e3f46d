//! [`Channel`] and [`ChannelBuilder`]: the one way a channel is made, and
//! the way its workers join it by name.

use std::fmt;
use std::time::Duration;

use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};

use crate::config::ChannelConfig;
use crate::payload::{Payload, Raw};
use crate::sem_kind::SemKind;
use crate::{Coordinator, Error, Result, Worker};

/// Where channels are made: [`Channel::builder`] for one over named regions
/// (workers join by name), [`Channel::anonymous`] for one over anonymous
/// regions (workers get them as descriptors, through the handshake).
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use nodeipc_channel::{Channel, SemKind};
///
/// let channel = Channel::builder("/nodeipc-doc-job")
///     .workers(4)
///     .depth(2)
///     .request_capacity(64 << 10)
///     .response_slot_size(4 << 10)
///     .sems(SemKind::InRegion)
///     .timeout(Duration::from_secs(30));
/// let coordinator = channel.create()?;          // execute.proto messages
/// // in each worker process: channel.join(rank)?
/// # Ok::<(), nodeipc_channel::Error>(())
/// ```
#[derive(Debug)]
pub enum Channel {}

impl Channel {
    /// A channel whose regions (and semaphores, if named) have names
    /// derived from `name`, a POSIX shared-memory name
    /// (`/nodeipc-job42-exec`): workers [`join`](ChannelBuilder::join) it
    /// by name, and the coordinator's
    /// [`wait_for_workers`](Coordinator::wait_for_workers) removes every
    /// name once all are in.
    pub fn builder(name: impl Into<String>) -> ChannelBuilder {
        ChannelBuilder::new(name.into(), false)
    }

    /// A channel over anonymous regions (sealed memfds) that have no name
    /// at all: workers get them as descriptors, through the handshake
    /// ([`ChannelServer`](crate::ChannelServer)) or any other way, and join
    /// with [`Worker::from_fds`]. `label` names the channel in errors and in
    /// the handshake's accept (with named semaphores, their names derive
    /// from it).
    pub fn anonymous(label: impl Into<String>) -> ChannelBuilder {
        ChannelBuilder::new(label.into(), true)
    }
}

/// A channel's shape, waits and message types, for its coordinator
/// ([`create`](ChannelBuilder::create)) and its workers
/// ([`join`](ChannelBuilder::join)): made by [`Channel::builder`] or
/// [`Channel::anonymous`], with our `execute.proto` messages until
/// [`typed`](ChannelBuilder::typed) or [`raw`](ChannelBuilder::raw) says
/// otherwise.
///
/// Defaults: 1 worker, 64 KiB requests, 16 KiB responses, 4 KiB init
/// slots, depth 1, in-region semaphores, a 30 s timeout, no busy-polling.
pub struct ChannelBuilder<Req = ExecuteRequest, Resp = ExecuteResponse>
where
    Resp: Payload,
{
    config: ChannelConfig,
    anonymous: bool,
    /// What a coordinator of these types checks and aggregates with:
    /// the execute schema's rules for the default types, none otherwise.
    rules: fn(Coordinator<Req, Resp>) -> Coordinator<Req, Resp>,
}

impl ChannelBuilder {
    fn new(name: String, anonymous: bool) -> ChannelBuilder {
        ChannelBuilder {
            config: ChannelConfig::new(name, 1),
            anonymous,
            rules: Coordinator::execute_rules,
        }
    }
}

impl<Req: Payload, Resp: Payload> ChannelBuilder<Req, Resp> {
    /// With `workers` worker processes, 1..=[`MAX_WORKERS`](crate::MAX_WORKERS).
    pub fn workers(mut self, workers: u32) -> Self {
        self.config.workers = workers;
        self
    }

    /// With a ring of `depth` request frames, 1..=[`MAX_DEPTH`](crate::MAX_DEPTH):
    /// how many requests the coordinator may run ahead of the slowest
    /// worker (1: lock-step).
    pub fn depth(mut self, depth: u32) -> Self {
        self.config.depth = depth;
        self
    }

    /// With request frames of `bytes` (the 4-byte length prefix included).
    pub fn request_capacity(mut self, bytes: usize) -> Self {
        self.config.request_capacity = bytes;
        self
    }

    /// With response slots of `bytes` (the 4-byte length prefix included).
    pub fn response_slot_size(mut self, bytes: usize) -> Self {
        self.config.response_slot_size = bytes;
        self
    }

    /// With init slots of `bytes` (the 4-byte length prefix included).
    pub fn init_slot_size(mut self, bytes: usize) -> Self {
        self.config.init_slot_size = bytes;
        self
    }

    /// With these semaphores: [`SemKind::InRegion`] (futex words in the
    /// response region, the fast path) or [`SemKind::Named`] (glibc, so a
    /// C or C++ process using `sem_open` can be a worker).
    pub fn sems(mut self, sems: SemKind) -> Self {
        self.config.sems = sems;
        self
    }

    /// With `timeout` bounding every call not given a timeout of its own.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// With a side that waits busy-polling for up to `poll` before it
    /// sleeps (see [`ChannelConfig::poll`]): a coordinator made by
    /// [`create`](ChannelBuilder::create) and a worker made by
    /// [`join`](ChannelBuilder::join) each poll this long.
    pub fn poll(mut self, poll: Duration) -> Self {
        self.config.poll = poll;
        self
    }

    /// Carrying `Q` requests and `S` responses, any protobuf messages:
    /// responses are handed out as they decode (no status check), and
    /// [`Aggregated`](crate::Aggregated) gathers need a rule
    /// ([`Coordinator::set_aggregate`]).
    pub fn typed<Q, S>(self) -> ChannelBuilder<Q, S>
    where
        Q: prost::Message + Default + 'static,
        S: prost::Message + Default + 'static,
    {
        ChannelBuilder {
            config: self.config,
            anonymous: self.anonymous,
            rules: |coordinator| coordinator,
        }
    }

    /// Carrying frames of bytes of any encoding ([`Raw`]): the coordinator
    /// sends `&[u8]` and gathers views of the workers' bytes.
    pub fn raw(self) -> ChannelBuilder<Raw, Raw> {
        ChannelBuilder {
            config: self.config,
            anonymous: self.anonymous,
            rules: |coordinator| coordinator,
        }
    }

    /// The configuration so far: what a worker joining by name needs.
    pub fn config(&self) -> &ChannelConfig {
        &self.config
    }

    /// Makes the channel: its regions, semaphores and header, published
    /// for workers. With the execute schema's default types, a response
    /// with a non-zero status or an unknown message type is refused, and
    /// [`Aggregated`](crate::Aggregated) gathers use
    /// [`PullKvRule`](crate::PullKvRule).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`]; [`Error::Shm`] / [`Error::Sem`] (a name
    /// already taken, say).
    pub fn create(&self) -> Result<Coordinator<Req, Resp>> {
        Coordinator::create(self.config.clone(), self.anonymous).map(self.rules)
    }

    /// Joins the named channel as worker `rank` (see [`Worker::join`]),
    /// polling as [`poll`](ChannelBuilder::poll) says.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an [`anonymous`](Channel::anonymous)
    /// channel, which has no names to join by; otherwise as [`Worker::join`].
    pub fn join(&self, rank: u32) -> Result<Worker<Req, Resp>> {
        if self.anonymous {
            return Err(Error::InvalidConfig {
                channel: self.config.name.clone(),
                reason: "an anonymous channel has no names to join by: take its descriptors \
                         (the handshake's connect, or Worker::from_fds)"
                    .to_owned(),
            });
        }
        Worker::join(self.config.clone(), rank)
    }
}

impl<Req, Resp: Payload> Clone for ChannelBuilder<Req, Resp> {
    fn clone(&self) -> Self {
        ChannelBuilder {
            config: self.config.clone(),
            anonymous: self.anonymous,
            rules: self.rules,
        }
    }
}

impl<Req, Resp: Payload> fmt::Debug for ChannelBuilder<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelBuilder")
            .field("config", &self.config)
            .field("anonymous", &self.anonymous)
            .field("request", &std::any::type_name::<Req>())
            .field("response", &std::any::type_name::<Resp>())
            .finish()
    }
}
