//! [`ChannelOffer`]: what a coordinator hands workers that log on.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use nodeipc_fdpass::Credentials;
use nodeipc_proto::handshake::{
    Accept, ChannelGeometry, ClientKind, FdKind, Logon, PROTOCOL_VERSION, Reject, RejectCode,
    SemaphoreKind,
};
use nodeipc_shm::Region;

use super::server::passed;
use crate::config::ChannelConfig;
use crate::layout::{Layout, worker_flags};
use crate::payload::Payload;
use crate::sem_kind::SemKind;
use crate::{Coordinator, Error, Result};
use nodeipc_handshake::{Decision, Offer};

/// The decision a coordinator's handshake server makes: a logon of a worker
/// rank inside the channel, not taken, whose expectations the channel meets
/// (0 means "no expectation"; `workers` and `depth` must match exactly, the
/// sizes are minimums), gets the two regions' descriptors.
///
/// # Examples
/// ```no_run
/// use nodeipc_channel::{Channel, ChannelServer};
/// use nodeipc_proto::handshake::{Reject, RejectCode};
/// let coordinator = Channel::anonymous("/nodeipc-doc-offer").workers(2).create()?;
/// let offer = coordinator.offer()?;
/// // The offer's decision, after a policy of our own.
/// let server = ChannelServer::bind_with(
///     "/run/user/1000/job/channel.sock",
///     Default::default(),
///     move |logon, peer| {
///         if logon.worker_rank == 0 && peer.pid == 1 {
///             let code = RejectCode::PermissionDenied as i32;
///             return Err(Reject { code, reason: "not init".to_owned() });
///         }
///         offer.decide(logon, peer)
///     },
/// )?;
/// # Ok::<(), nodeipc_channel::Error>(())
/// ```
#[derive(Debug)]
pub struct ChannelOffer {
    config: ChannelConfig,
    layout: Layout,
    request: OwnedFd,
    response: OwnedFd,
    /// Our own mapping of the response region, to see which ranks are taken.
    response_view: Region,
}

impl<Req: Payload, Resp: Payload> Coordinator<Req, Resp> {
    /// What a handshake server should hand out for this channel.
    ///
    /// # Errors
    /// [`Error::Io`] if the descriptors cannot be duplicated; [`Error::Shm`].
    pub fn offer(&self) -> Result<ChannelOffer> {
        let context = || format!("channel {}", self.config().name);
        let dup = |fd: std::os::fd::BorrowedFd<'_>| {
            fd.try_clone_to_owned().map_err(|source| Error::Io {
                context: context(),
                op: "dup",
                source,
            })
        };
        let response = dup(self.response_fd())?;
        let response_view =
            Region::from_fd(dup(self.response_fd())?).map_err(|source| Error::Shm {
                channel: self.config().name.clone(),
                source,
            })?;
        Ok(ChannelOffer {
            config: self.config().clone(),
            layout: self.config().layout(),
            // Workers get the ring read-only: none can change a request.
            request: self.request_fd_read_only()?,
            response,
            response_view,
        })
    }
}

impl ChannelOffer {
    /// Decides one logon (the server has checked the version and the uid).
    pub fn decide(&self, logon: &Logon, _peer: &Credentials) -> Decision {
        let config = &self.config;
        let refuse = |code: RejectCode, reason: String| {
            Err(Reject {
                code: code as i32,
                reason,
            })
        };
        if logon.kind != ClientKind::Worker as i32 {
            return refuse(
                RejectCode::Malformed,
                format!("client kind {} is not a worker", logon.kind),
            );
        }
        if logon.worker_rank >= config.workers {
            return refuse(
                RejectCode::RankOutOfRange,
                format!(
                    "rank {} is outside a channel of {} workers",
                    logon.worker_rank, config.workers
                ),
            );
        }
        let exact = [
            ("workers", logon.workers, config.workers),
            ("depth", logon.depth, config.depth),
        ];
        for (what, asked, have) in exact {
            if asked != 0 && asked != have {
                return refuse(
                    RejectCode::GeometryMismatch,
                    format!("the client expects {what} {asked}, the channel has {have}"),
                );
            }
        }
        let minimums = [
            (
                "request capacity",
                logon.request_capacity,
                config.request_capacity,
            ),
            (
                "response slot size",
                logon.response_slot_size,
                config.response_slot_size,
            ),
            (
                "init slot size",
                logon.init_slot_size,
                config.init_slot_size,
            ),
        ];
        for (what, asked, have) in minimums {
            if asked > have as u64 {
                return refuse(
                    RejectCode::GeometryMismatch,
                    format!("the client needs a {what} of {asked}, the channel has {have}"),
                );
            }
        }
        let entry = self.layout.worker(&self.response_view, logon.worker_rank);
        let flags = entry.flags.load(Ordering::Acquire);
        if flags & worker_flags::JOINED != 0 && flags & worker_flags::LEFT == 0 {
            let pid = entry.pid.load(Ordering::Relaxed);
            return refuse(
                RejectCode::RankTaken,
                format!("rank {} is taken by pid {pid}", logon.worker_rank),
            );
        }
        // Out of descriptors (EMFILE) is the usual cause: say so, errno and all.
        let dup = |fd: &OwnedFd, what: &str| {
            fd.try_clone()
                .map_err(|e| format!("the server could not duplicate its {what} descriptor: {e}"))
        };
        let (request, response) = match (
            dup(&self.request, "request region"),
            dup(&self.response, "response region"),
        ) {
            (Ok(request), Ok(response)) => (request, response),
            (Err(why), _) | (_, Err(why)) => return refuse(RejectCode::Internal, why),
        };
        Ok(Offer {
            accept: Accept {
                protocol_version: PROTOCOL_VERSION,
                fds: vec![
                    passed(FdKind::RequestRegion, self.layout.request_size()),
                    passed(FdKind::ResponseRegion, self.layout.response_size()),
                ],
                geometry: Some(ChannelGeometry {
                    workers: config.workers,
                    request_capacity: config.request_capacity as u64,
                    response_slot_size: config.response_slot_size as u64,
                    init_slot_size: config.init_slot_size as u64,
                    depth: config.depth,
                    sems: match config.sems {
                        SemKind::Named => SemaphoreKind::Named as i32,
                        SemKind::InRegion => SemaphoreKind::Futex as i32,
                    },
                    semaphore_prefix: config.name.clone(),
                }),
                payload: Vec::new(),
            },
            descriptors: vec![request, response],
        })
    }
}
