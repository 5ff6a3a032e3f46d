//! The server's side: the regions, and the handshake's decision per logon.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use nodeipc_handshake::{
    Credentials, Decision, FdKind, HandshakeOptions, HandshakeServer, Logon, Offer, RejectCode,
    ServerSession, count, reject,
};
use nodeipc_pool::{Handle, Pool, PoolConfig};
use nodeipc_queue::{Consumer, Producer, Queue};
use nodeipc_shm::Region;

use super::{DONE_SCHEMA, Done, PROGRESS_SCHEMA, Progress, TX_SCHEMA, Tx, roles};

/// The session's shape.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// Worker processes.
    pub workers: u32,
    /// Pool handles a scheduler may take.
    pub scheduler_handles: u32,
}

/// What the server owns and hands out.
struct Regions {
    pool: Arc<Region>,
    tpu: Queue<Tx>,
    progress: Queue<Progress>,
    to: Vec<Queue<Tx>>,
    from: Vec<Queue<Done>>,
    report: Vec<Queue<Done>>,
    setup: Setup,
    /// The scheduler holding a session, by pid: one at a time.
    scheduler: Mutex<Option<u32>>,
}

/// The validator's side of the session: its regions, its handshake server,
/// and the sessions it holds.
pub struct SessionServer {
    regions: Arc<Regions>,
    pool: Pool,
    sessions: mpsc::Receiver<ServerSession>,
    handshake: HandshakeServer,
}

impl SessionServer {
    /// Creates the pool and queues (sealed memfds: nothing named) and binds
    /// the handshake socket at `socket`.
    ///
    /// # Errors
    /// As the pool, queue and handshake layers.
    pub fn start(
        socket: &Path,
        setup: Setup,
        slabs: u32,
    ) -> Result<SessionServer, Box<dyn std::error::Error>> {
        // The TPU's handle, and two schedulers' worth (the dead one's
        // handles are reclaimed only after the new one joined).
        let pool = Pool::anonymous(&PoolConfig::new(slabs, 1 + 2 * setup.scheduler_handles))?;
        let queues = |n: u32, cap: u32| -> nodeipc_queue::Result<Vec<Queue<Tx>>> {
            (0..n).map(|_| Queue::anonymous(cap, TX_SCHEMA)).collect()
        };
        let dones = |n: u32, cap: u32| -> nodeipc_queue::Result<Vec<Queue<Done>>> {
            (0..n).map(|_| Queue::anonymous(cap, DONE_SCHEMA)).collect()
        };
        let regions = Arc::new(Regions {
            pool: Arc::clone(pool.region()),
            tpu: Queue::anonymous(4096, TX_SCHEMA)?,
            progress: Queue::anonymous(256, PROGRESS_SCHEMA)?,
            to: queues(setup.workers, 1024)?,
            from: dones(setup.workers, 1024)?,
            report: dones(setup.workers, 4096)?,
            setup,
            scheduler: Mutex::new(None),
        });
        let (sent, sessions) = mpsc::channel();
        let deciding = Arc::clone(&regions);
        let handshake = HandshakeServer::bind_sessions(
            socket,
            HandshakeOptions::default(),
            move |logon, peer| deciding.decide(logon, peer),
            move |session| {
                let _ = sent.send(session);
            },
        )?;
        Ok(SessionServer {
            regions,
            pool,
            sessions,
            handshake,
        })
    }

    /// The handshake socket.
    pub fn socket(&self) -> &Path {
        self.handshake.path()
    }

    /// The next session accepted, within `timeout`.
    pub fn next_session(&self, timeout: Duration) -> Option<ServerSession> {
        self.sessions.recv_timeout(timeout).ok()
    }

    /// Forgets the scheduler whose session ended, so another may log on.
    pub fn scheduler_gone(&self) {
        *self
            .regions
            .scheduler
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The TPU's ends: producer of the TPU and progress queues, consumer of
    /// every worker's report queue, and a pool handle to allocate with.
    ///
    /// # Errors
    /// As the queue and pool layers.
    #[allow(clippy::type_complexity)]
    pub fn tpu_ends(
        &self,
    ) -> Result<
        (
            Producer<Tx>,
            Producer<Progress>,
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
            self.pool.handle()?,
        ))
    }
}

impl Regions {
    /// Per logon: a worker gets its pair and its report queue; the one
    /// scheduler gets the pool, the TPU and progress queues and a pair per
    /// worker; anything else is refused, saying why.
    fn decide(&self, logon: &Logon, peer: &Credentials) -> Decision {
        let fd = |region: &Region| -> Result<OwnedFd, nodeipc_handshake::Reject> {
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
                Ok(offer
                    .fd(FdKind::Queue, roles::to_worker(w), size(to), fd(to)?)
                    .fd(FdKind::Queue, roles::from_worker(w), size(from), fd(from)?)
                    .fd(FdKind::Queue, roles::REPORT, size(report), fd(report)?))
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
                if handles > u64::from(self.setup.scheduler_handles) {
                    return Err(reject(
                        RejectCode::GeometryMismatch,
                        format!(
                            "{handles} pool handles asked for, a scheduler may take {}",
                            self.setup.scheduler_handles
                        ),
                    ));
                }
                {
                    let mut current = self.scheduler.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(pid) = *current {
                        return Err(reject(
                            RejectCode::RankTaken,
                            format!("scheduler pid {pid} holds the session"),
                        ));
                    }
                    *current = Some(peer.pid);
                }
                let (tpu, progress) = (self.tpu.region(), self.progress.region());
                let mut offer = offer.fd(FdKind::Queue, roles::TPU, size(tpu), fd(tpu)?).fd(
                    FdKind::Queue,
                    roles::PROGRESS,
                    size(progress),
                    fd(progress)?,
                );
                for w in 0..workers as u32 {
                    let (to, from) = (self.to[w as usize].region(), self.from[w as usize].region());
                    offer = offer
                        .fd(FdKind::Queue, roles::to_worker(w), size(to), fd(to)?)
                        .fd(FdKind::Queue, roles::from_worker(w), size(from), fd(from)?);
                }
                Ok(offer.payload(handles.to_le_bytes().to_vec()))
            }
            other => Err(reject(
                RejectCode::Malformed,
                format!(
                    "request {:?}: this server knows \"worker\" and \"scheduler\"",
                    String::from_utf8_lossy(other)
                ),
            )),
        }
    }
}
