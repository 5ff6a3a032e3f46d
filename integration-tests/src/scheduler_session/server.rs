//! The server's side: the regions, and what each logon is granted, in
//! Agave's `Server::accept()` shape.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodeipc_handshake::{
    AcceptedSession, Acceptor, Credentials, FdKind, HandshakeOptions, Logon, Offer, Reject,
    RejectCode, count, reject,
};
use nodeipc_pool::{Handle, Pool, PoolConfig};
use nodeipc_queue::{Consumer, MpmcQueue, Pages, Producer, Queue};
use nodeipc_shm::Region;

use super::{
    DONE_SCHEMA, Done, FROM_CHECK_SCHEMA, FROM_WORKER_SCHEMA, PROGRESS_SCHEMA, TO_CHECK_SCHEMA,
    TO_WORKER_SCHEMA, TPU_SCHEMA, roles,
};
use crate::agave_bindings::{
    CheckWorkerToPackMessage, ExecutionWorkerToPackMessage, PackToCheckWorkerMessage,
    PackToExecutionWorkerMessage, ProgressMessage, TpuToPackMessage,
};

/// The session's shape.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// Worker processes.
    pub workers: u32,
    /// Pool handles a scheduler may take.
    pub scheduler_handles: u32,
    /// Check worker processes (on the two MPMC rings).
    pub checkers: u32,
}

impl Setup {
    /// Pool handles in all: the TPU's (0), one per worker (1..=W), and two
    /// schedulers' worth (a dead scheduler's handles stay taken until a
    /// later one is granted them again and takes them over by id).
    fn handles(&self) -> u32 {
        1 + self.workers + self.checkers + 2 * self.scheduler_handles
    }

    /// Handle ids granted to the `k`-th scheduler: every other scheduler
    /// is granted the same ones again (by then the one before it is dead).
    fn scheduler_handles(&self, k: u32) -> Vec<u32> {
        let base = 1 + self.workers + self.checkers + (k % 2) * self.scheduler_handles;
        (base..base + self.scheduler_handles).collect()
    }
}

/// What the server made for a logon: what `accept` returns with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Worker `w`, with the pool handle id it allocates responses from.
    Worker {
        /// Its index.
        w: u32,
        /// Its pool handle id.
        handle: u32,
    },
    /// Check worker `c`, with the pool handle id it allocates responses from.
    Checker {
        /// Its index.
        c: u32,
        /// Its pool handle id.
        handle: u32,
    },
    /// A scheduler, with the pool handle ids it may take.
    Scheduler {
        /// Its pool handle ids.
        handles: Vec<u32>,
    },
}

impl Grant {
    /// The handle ids, as the accept's payload carries them (u32 LE each).
    fn payload(&self) -> Vec<u8> {
        let ids: &[u32] = match self {
            Grant::Worker { handle, .. } | Grant::Checker { handle, .. } => {
                std::slice::from_ref(handle)
            }
            Grant::Scheduler { handles } => handles,
        };
        ids.iter().flat_map(|id| id.to_le_bytes()).collect()
    }

    /// The handle ids in an accept's payload.
    pub fn handles_in(payload: &[u8]) -> Vec<u32> {
        payload
            .as_chunks::<4>()
            .0
            .iter()
            .map(|c| u32::from_le_bytes(*c))
            .collect()
    }
}

/// What the server owns and hands out.
struct Regions {
    pool: Arc<Region>,
    tpu: Queue<TpuToPackMessage>,
    progress: Queue<ProgressMessage>,
    to: Vec<Queue<PackToExecutionWorkerMessage>>,
    from: Vec<Queue<ExecutionWorkerToPackMessage>>,
    report: Vec<Queue<Done>>,
    to_check: MpmcQueue<PackToCheckWorkerMessage>,
    from_check: MpmcQueue<CheckWorkerToPackMessage>,
    setup: Setup,
    /// The scheduler holding a session, by pid (one at a time), and how
    /// many have been granted one.
    scheduler: Mutex<(Option<u32>, u32)>,
}

/// The validator's side of the session: its regions, and its handshake
/// server, whose sessions come out of [`accept`](SessionServer::accept).
pub struct SessionServer {
    regions: Arc<Regions>,
    pool: Pool,
    acceptor: Acceptor<Grant>,
}

impl SessionServer {
    /// Creates the pool and queues (sealed memfds, on huge pages where the
    /// system has them: nothing named) and binds the handshake socket.
    ///
    /// # Errors
    /// As the pool, queue and handshake layers.
    pub fn start(
        socket: &Path,
        setup: Setup,
        slabs: u32,
    ) -> Result<SessionServer, Box<dyn std::error::Error>> {
        let pages = Pages::HugeOrNormal;
        let pool = Pool::anonymous_pages(&PoolConfig::new(slabs, setup.handles()), pages)?;
        let queues = |n: u32, cap: u32| -> nodeipc_queue::Result<Vec<_>> {
            (0..n)
                .map(|_| Queue::anonymous_pages(cap, TO_WORKER_SCHEMA, pages))
                .collect()
        };
        let answers = |n: u32, cap: u32| -> nodeipc_queue::Result<Vec<_>> {
            (0..n)
                .map(|_| Queue::anonymous_pages(cap, FROM_WORKER_SCHEMA, pages))
                .collect()
        };
        let reports = |n: u32, cap: u32| -> nodeipc_queue::Result<Vec<_>> {
            (0..n)
                .map(|_| Queue::anonymous_pages(cap, DONE_SCHEMA, pages))
                .collect()
        };
        let regions = Arc::new(Regions {
            pool: Arc::clone(pool.region()),
            tpu: Queue::anonymous_pages(4096, TPU_SCHEMA, pages)?,
            progress: Queue::anonymous_pages(256, PROGRESS_SCHEMA, pages)?,
            to: queues(setup.workers, 256)?,
            from: answers(setup.workers, 256)?,
            report: reports(setup.workers, 4096)?,
            // Two scheduler places: a killed one's stays held until the
            // next scheduler takes it over (or takes the other).
            to_check: MpmcQueue::anonymous_pages(256, 2, setup.checkers, TO_CHECK_SCHEMA, pages)?,
            from_check: MpmcQueue::anonymous_pages(
                256,
                setup.checkers,
                2,
                FROM_CHECK_SCHEMA,
                pages,
            )?,
            setup,
            scheduler: Mutex::new((None, 0)),
        });
        let deciding = Arc::clone(&regions);
        let acceptor = Acceptor::bind(socket, HandshakeOptions::default(), move |logon, peer| {
            deciding.decide(logon, peer)
        })?;
        Ok(SessionServer {
            regions,
            pool,
            acceptor,
        })
    }

    /// The handshake socket.
    pub fn socket(&self) -> &Path {
        self.acceptor.path()
    }

    /// Whether huge pages back the pool (`Pages::HugeOrNormal`: where the
    /// system has them).
    pub fn huge_pages(&self) -> bool {
        self.pool.huge_pages()
    }

    /// The next session accepted, within `timeout`: the logon, what was
    /// granted (made) for it, and the session's link.
    ///
    /// # Errors
    /// `Timeout` when nobody logged on in time.
    pub fn accept(
        &mut self,
        timeout: Duration,
    ) -> nodeipc_handshake::Result<AcceptedSession<Grant>> {
        self.acceptor.accept(timeout)
    }

    /// Forgets the scheduler whose session ended, so another may log on.
    pub fn scheduler_gone(&self) {
        self.regions
            .scheduler
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0 = None;
    }

    /// The TPU's ends: producer of the TPU and progress queues, consumer of
    /// every worker's report queue, and pool handle 0 to allocate with.
    ///
    /// # Errors
    /// As the queue and pool layers.
    #[allow(clippy::type_complexity)]
    pub fn tpu_ends(
        &self,
    ) -> Result<
        (
            Producer<TpuToPackMessage>,
            Producer<ProgressMessage>,
            Vec<Consumer<Done>>,
            Handle,
        ),
        Box<dyn std::error::Error>,
    > {
        let r = &self.regions;
        let reports = r
            .report
            .iter()
            .map(Queue::consumer)
            .collect::<nodeipc_queue::Result<Vec<_>>>()?;
        Ok((
            r.tpu.producer()?,
            r.progress.producer()?,
            reports,
            self.pool.handle_id(0)?,
        ))
    }

    /// Takes every handle but the TPU's in turn (a dead holder's over, a
    /// departed one's slabs adopted, their remote frees taken back) and
    /// returns the blocks still allocated, per handle that holds any: what
    /// no process holds any more and none will free.
    ///
    /// # Errors
    /// As the pool layer.
    pub fn blocks_left(&self, tpu: &mut Handle) -> nodeipc_pool::Result<Vec<(u32, usize)>> {
        tpu.clean_remote_frees()?;
        for id in 1..self.regions.setup.handles() {
            let mut handle = self.pool.handle_id(id)?;
            handle.clean_remote_frees()?;
        }
        Ok(tpu
            .occupancy_all()?
            .iter()
            .filter(|o| o.blocks > 0)
            .map(|o| (o.handle, o.blocks))
            .collect())
    }
}

impl Regions {
    /// Per logon: a worker gets its pair and its report queue and a pool
    /// handle id; a check worker the two check rings and a handle id; the
    /// one scheduler gets the pool, the TPU and progress queues, the check
    /// rings, a pair per worker and its pool handle ids; anything else is
    /// refused, saying why.
    fn decide(&self, logon: &Logon, peer: &Credentials) -> Result<(Offer, Grant), Reject> {
        let fd = |region: &Region| -> Result<OwnedFd, Reject> {
            region.as_fd().try_clone_to_owned().map_err(|e| {
                reject(
                    RejectCode::Internal,
                    format!("the server could not duplicate a descriptor: {e}"),
                )
            })
        };
        let size = |region: &Region| region.len() as u64;
        let pool = fd(&self.pool)?;
        let offer = Offer::new().fd(FdKind::Pool, roles::POOL, size(&self.pool), pool);
        match logon.request.as_slice() {
            b"worker" => {
                let w = count(logon, "worker").unwrap_or(u64::MAX);
                let Some(w) = u32::try_from(w).ok().filter(|&w| w < self.setup.workers) else {
                    return Err(reject(
                        RejectCode::RankOutOfRange,
                        format!("worker {w}: this server has {}", self.setup.workers),
                    ));
                };
                let (to, from, report) = (
                    self.to[w as usize].region(),
                    self.from[w as usize].region(),
                    self.report[w as usize].region(),
                );
                let grant = Grant::Worker { w, handle: 1 + w };
                let offer = offer
                    .fd(FdKind::Queue, roles::to_worker(w), size(to), fd(to)?)
                    .fd(FdKind::Queue, roles::from_worker(w), size(from), fd(from)?)
                    .fd(FdKind::Queue, roles::REPORT, size(report), fd(report)?)
                    .payload(grant.payload());
                Ok((offer, grant))
            }
            b"checker" => {
                let c = count(logon, "checker").unwrap_or(u64::MAX);
                let Some(c) = u32::try_from(c).ok().filter(|&c| c < self.setup.checkers) else {
                    return Err(reject(
                        RejectCode::RankOutOfRange,
                        format!("checker {c}: this server has {}", self.setup.checkers),
                    ));
                };
                let (to, from) = (self.to_check.region(), self.from_check.region());
                let grant = Grant::Checker {
                    c,
                    handle: 1 + self.setup.workers + c,
                };
                let offer = offer
                    .fd(FdKind::Queue, roles::TO_CHECK, size(to), fd(to)?)
                    .fd(FdKind::Queue, roles::FROM_CHECK, size(from), fd(from)?)
                    .payload(grant.payload());
                Ok((offer, grant))
            }
            b"scheduler" => {
                let workers = count(logon, "workers").unwrap_or(0);
                let handles = count(logon, "pool_handles").unwrap_or(0);
                if workers > u64::from(self.setup.workers) {
                    return Err(reject(
                        RejectCode::GeometryMismatch,
                        format!(
                            "{workers} workers asked for, the server has {}",
                            self.setup.workers
                        ),
                    ));
                }
                if handles != u64::from(self.setup.scheduler_handles) {
                    return Err(reject(
                        RejectCode::GeometryMismatch,
                        format!(
                            "{handles} pool handles asked for, a scheduler takes {}",
                            self.setup.scheduler_handles
                        ),
                    ));
                }
                let grant = {
                    let mut current = self.scheduler.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(pid) = current.0 {
                        return Err(reject(
                            RejectCode::RankTaken,
                            format!("scheduler pid {pid} holds the session"),
                        ));
                    }
                    let k = current.1;
                    *current = (Some(peer.pid), k + 1);
                    Grant::Scheduler {
                        handles: self.setup.scheduler_handles(k),
                    }
                };
                let (tpu, progress) = (self.tpu.region(), self.progress.region());
                let mut offer = offer.fd(FdKind::Queue, roles::TPU, size(tpu), fd(tpu)?).fd(
                    FdKind::Queue,
                    roles::PROGRESS,
                    size(progress),
                    fd(progress)?,
                );
                let (to, from) = (self.to_check.region(), self.from_check.region());
                offer = offer
                    .fd(FdKind::Queue, roles::TO_CHECK, size(to), fd(to)?)
                    .fd(FdKind::Queue, roles::FROM_CHECK, size(from), fd(from)?);
                for w in 0..workers as u32 {
                    let (to, from) = (self.to[w as usize].region(), self.from[w as usize].region());
                    offer = offer
                        .fd(FdKind::Queue, roles::to_worker(w), size(to), fd(to)?)
                        .fd(FdKind::Queue, roles::from_worker(w), size(from), fd(from)?);
                }
                Ok((offer.payload(grant.payload()), grant))
            }
            other => Err(reject(
                RejectCode::Malformed,
                format!(
                    "request {:?}: this server knows \"worker\", \"checker\" and \"scheduler\"",
                    String::from_utf8_lossy(other)
                ),
            )),
        }
    }
}
