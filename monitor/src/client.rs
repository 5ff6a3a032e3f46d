//! [`MonitorClient`], the rank's side, and [`ControlClient`], the launcher's.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodeipc_proto::monitor as pb;
use nodeipc_proto::{LEN_PREFIX, read_frame, write_frame};
use prost::Message;

use crate::conn::MAX_FRAME;
use crate::fastpath::ClientRegion;
use crate::{
    Error, MonitorStatus, RankInfo, Result, TimeoutEstimator, TimeoutUpdate, Timeouts,
    control_socket_path,
};

/// The configuration a server reports in its answers to `Init` and
/// `UpdateConfig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectiveConfig {
    /// The timeouts in force.
    pub timeouts: Timeouts,
    /// The termination signal's number.
    pub termination_signal: i32,
    /// Grace period before `SIGKILL`, when escalation is configured.
    pub kill_after: Option<Duration>,
    /// Whether `Section` messages go unanswered.
    pub skip_section_replies: bool,
}

impl EffectiveConfig {
    fn from_proto(c: &pb::EffectiveConfig) -> EffectiveConfig {
        EffectiveConfig {
            timeouts: Timeouts::from_proto(&c.timeouts.clone().unwrap_or_default()),
            termination_signal: c.termination_signal,
            kill_after: c.kill_after_ms.map(Duration::from_millis),
            skip_section_replies: c.skip_section_replies,
        }
    }
}

/// Connects, retrying while the socket is missing or nobody listens yet.
fn connect_retrying(path: &Path, timeout: Duration) -> Result<UnixStream> {
    let start = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(stream) => {
                // Only a monitor of our own uid gets our Init (and hands us
                // a region): a stranger may have bound the path.
                nodeipc_fdpass::require_peer_uid(&stream, &[])?;
                let io = |e| Error::io("set socket timeout", path.display(), e);
                stream.set_read_timeout(Some(timeout)).map_err(io)?;
                stream.set_write_timeout(Some(timeout)).map_err(io)?;
                return Ok(stream);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) && start.elapsed() < timeout =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(last) => {
                return Err(Error::ConnectTimeout {
                    path: path.to_owned(),
                    waited: start.elapsed(),
                    last,
                });
            }
        }
    }
}

/// One request, one reply, over a framed stream.
fn call<Q: Message>(
    stream: &mut UnixStream,
    scratch: &mut Vec<u8>,
    request: &Q,
) -> Result<pb::server_message::Msg> {
    write_frame(stream, request).map_err(|e| Error::frame("sending a request", e))?;
    read_reply(stream, scratch)
}

fn read_reply(stream: &mut UnixStream, scratch: &mut Vec<u8>) -> Result<pb::server_message::Msg> {
    let reply: pb::ServerMessage = read_frame(stream, MAX_FRAME, scratch)
        .map_err(|e| Error::frame("reading the monitor's reply", e))?;
    reply.msg.ok_or_else(|| Error::Protocol {
        reason: "the monitor sent an empty ServerMessage".to_owned(),
    })
}

fn expect_ok(reply: pb::server_message::Msg) -> Result<pb::Ok> {
    match reply {
        pb::server_message::Msg::Ok(ok) => Ok(ok),
        pb::server_message::Msg::Error(e) => Err(Error::Refused { cause: e.cause }),
        pb::server_message::Msg::Status(_) => Err(Error::Protocol {
            reason: "expected Ok or Error, got Status".to_owned(),
        }),
    }
}

fn expect_status(reply: pb::server_message::Msg) -> Result<MonitorStatus> {
    match reply {
        pb::server_message::Msg::Status(s) => {
            MonitorStatus::from_proto(&s).ok_or_else(|| Error::Protocol {
                reason: format!("Status with unknown state {}", s.state),
            })
        }
        pb::server_message::Msg::Error(e) => Err(Error::Refused { cause: e.cause }),
        pb::server_message::Msg::Ok(_) => Err(Error::Protocol {
            reason: "expected Status, got Ok".to_owned(),
        }),
    }
}

/// The rank's connection to its monitor.
///
/// Every call waits at most the timeout given to
/// [`connect`](MonitorClient::connect) for the reply. When another rank
/// connection is being served, the server holds this one (for its
/// connection-wait limit) before answering: give a timeout longer than that.
#[derive(Debug)]
pub struct MonitorClient {
    stream: UnixStream,
    path: PathBuf,
    scratch: Vec<u8>,
    skip_section_replies: bool,
    region: Option<ClientRegion>,
    estimator: Option<TimeoutEstimator>,
}

impl MonitorClient {
    /// Connects to the monitor's rank socket, retrying for up to `timeout`
    /// while it does not exist or nobody listens yet, and checks that the
    /// monitor runs as our uid (`SO_PEERCRED`).
    ///
    /// # Errors
    /// [`Error::ConnectTimeout`] with the last error; [`Error::Fdpass`]
    /// (`PeerRefused`) for a server of another uid; [`Error::Io`].
    pub fn connect(path: impl AsRef<Path>, timeout: Duration) -> Result<MonitorClient> {
        let path = path.as_ref();
        Ok(MonitorClient {
            stream: connect_retrying(path, timeout)?,
            path: path.to_owned(),
            scratch: Vec::new(),
            skip_section_replies: false,
            region: None,
            estimator: None,
        })
    }

    /// The socket path this client connected to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Changes how long each call waits for its reply.
    ///
    /// # Errors
    /// [`Error::Io`] from `setsockopt`.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        let io = |e| Error::io("set socket timeout", self.path.display(), e);
        self.stream.set_read_timeout(Some(timeout)).map_err(io)?;
        self.stream.set_write_timeout(Some(timeout)).map_err(io)
    }

    /// Registers the rank (`Init`). `rank.pid` must be this process, a
    /// descendant of it, or 0 (this process).
    ///
    /// # Errors
    /// [`Error::Refused`] (another pid, a second `Init`); framing errors.
    pub fn init(&mut self, rank: &RankInfo) -> Result<EffectiveConfig> {
        self.init_impl(rank, false)
    }

    /// Like [`init`](MonitorClient::init), asking for the shared-memory
    /// heartbeat region; [`has_heartbeat_region`](MonitorClient::has_heartbeat_region)
    /// says whether the server granted it.
    ///
    /// # Errors
    /// As [`init`](MonitorClient::init); [`Error::BadHeartbeatRegion`] when
    /// the region does not match its description.
    pub fn init_with_heartbeat_region(&mut self, rank: &RankInfo) -> Result<EffectiveConfig> {
        self.init_impl(rank, true)
    }

    fn init_impl(&mut self, rank: &RankInfo, want_region: bool) -> Result<EffectiveConfig> {
        let request = pb::ClientMessage {
            msg: Some(pb::client_message::Msg::Init(pb::Init {
                rank: Some(rank.to_proto()),
                want_heartbeat_region: want_region,
            })),
        };
        write_frame(&mut self.stream, &request).map_err(|e| Error::frame("sending Init", e))?;
        // The region's descriptor travels with the reply's first byte.
        let mut prefix = [0u8; LEN_PREFIX];
        let mut fds = nodeipc_fdpass::recv_fds_exact(&self.stream, &mut prefix, 1)?;
        let size = u32::from_le_bytes(prefix) as usize + LEN_PREFIX;
        if size > MAX_FRAME {
            return Err(Error::frame(
                "reading the reply to Init",
                nodeipc_proto::Error::TooLarge {
                    size,
                    max: MAX_FRAME,
                },
            ));
        }
        let mut body = vec![0u8; size - LEN_PREFIX];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| Error::frame("reading the reply to Init", e.into()))?;
        let reply = pb::ServerMessage::decode(body.as_slice())
            .map_err(|e| Error::frame("decoding the reply to Init", e.into()))?;
        let ok = expect_ok(reply.msg.ok_or_else(|| Error::Protocol {
            reason: "the monitor sent an empty ServerMessage".to_owned(),
        })?)?;
        if ok.heartbeat_region_attached {
            let (Some(fd), Some(desc)) = (fds.pop(), ok.shm_heartbeat.as_ref()) else {
                return Err(Error::Protocol {
                    reason: "heartbeat region announced without its descriptor or layout"
                        .to_owned(),
                });
            };
            self.region = Some(ClientRegion::open(fd, desc)?);
        }
        let config = EffectiveConfig::from_proto(&ok.config.unwrap_or_default());
        self.skip_section_replies = config.skip_section_replies;
        if let Some(estimator) = self.estimator.as_mut() {
            estimator.record_init(Instant::now());
        }
        Ok(config)
    }

    /// Whether `heartbeat_fast` works: the server handed us the region.
    pub fn has_heartbeat_region(&self) -> bool {
        self.region.is_some()
    }

    /// One heartbeat over the socket, answered by the server.
    ///
    /// # Errors
    /// [`Error::Refused`] (before `Init`, after a timeout fired); framing errors.
    pub fn heartbeat(&mut self) -> Result<()> {
        self.beat(None)
    }

    /// A heartbeat carrying application state (a training step, say) that
    /// the status reports.
    ///
    /// # Errors
    /// As [`heartbeat`](MonitorClient::heartbeat).
    pub fn heartbeat_with_state(&mut self, state: &[u8]) -> Result<()> {
        self.beat(Some(state.to_vec()))
    }

    fn beat(&mut self, state: Option<Vec<u8>>) -> Result<()> {
        let request = pb::ClientMessage {
            msg: Some(pb::client_message::Msg::Heartbeat(pb::Heartbeat { state })),
        };
        expect_ok(call(&mut self.stream, &mut self.scratch, &request)?)?;
        if let Some(estimator) = self.estimator.as_mut() {
            estimator.record_heartbeat(Instant::now());
        }
        Ok(())
    }

    /// One heartbeat through the shared-memory region: a single atomic
    /// increment, no system call. The server sees it at its next periodic
    /// check. (The estimator is not fed from here: call its
    /// `record_heartbeat` if you want it to.)
    ///
    /// # Errors
    /// [`Error::NoHeartbeatRegion`] when the server did not hand one over.
    #[inline]
    pub fn heartbeat_fast(&self) -> Result<()> {
        match &self.region {
            Some(region) => {
                region.beat();
                Ok(())
            }
            None => Err(Error::NoHeartbeatRegion),
        }
    }

    /// Opens a section; its timeout (if configured) starts.
    ///
    /// # Errors
    /// [`Error::Refused`] when it is open already (not reported when the
    /// server skips section replies).
    pub fn start_section(&mut self, name: &str) -> Result<()> {
        self.section(name, pb::SectionAction::Open)?;
        if let Some(estimator) = self.estimator.as_mut() {
            estimator.record_section_start(name, Instant::now());
        }
        Ok(())
    }

    /// Closes a section.
    ///
    /// # Errors
    /// [`Error::Refused`] when it is not open (not reported when the server
    /// skips section replies).
    pub fn end_section(&mut self, name: &str) -> Result<()> {
        self.section(name, pb::SectionAction::Close)?;
        if let Some(estimator) = self.estimator.as_mut() {
            estimator.record_section_end(name, Instant::now());
        }
        Ok(())
    }

    /// Closes every open section (none open is fine).
    ///
    /// # Errors
    /// Framing errors; [`Error::Refused`] before `Init`.
    pub fn end_all_sections(&mut self) -> Result<()> {
        self.section("", pb::SectionAction::CloseAll)?;
        if let Some(estimator) = self.estimator.as_mut() {
            estimator.record_all_sections_end(Instant::now());
        }
        Ok(())
    }

    fn section(&mut self, name: &str, action: pb::SectionAction) -> Result<()> {
        let request = pb::ClientMessage {
            msg: Some(pb::client_message::Msg::Section(pb::Section {
                name: name.to_owned(),
                action: action.into(),
            })),
        };
        if self.skip_section_replies {
            return write_frame(&mut self.stream, &request)
                .map_err(|e| Error::frame("sending Section", e));
        }
        expect_ok(call(&mut self.stream, &mut self.scratch, &request)?).map(drop)
    }

    /// Changes the server's timeouts (`UpdateConfig`); returns the
    /// configuration now in force.
    ///
    /// # Errors
    /// [`Error::Refused`] for a bad section name; framing errors.
    pub fn send_timeouts(&mut self, update: &TimeoutUpdate) -> Result<EffectiveConfig> {
        let request = pb::ClientMessage {
            msg: Some(pb::client_message::Msg::UpdateConfig(pb::UpdateConfig {
                timeouts: Some(update.to_proto()),
            })),
        };
        let ok = expect_ok(call(&mut self.stream, &mut self.scratch, &request)?)?;
        Ok(EffectiveConfig::from_proto(&ok.config.unwrap_or_default()))
    }

    /// The monitor's state (`StatusQuery`).
    ///
    /// # Errors
    /// Framing errors; [`Error::Protocol`] for an unexpected reply.
    pub fn status(&mut self) -> Result<MonitorStatus> {
        let request = pb::ClientMessage {
            msg: Some(pb::client_message::Msg::StatusQuery(pb::StatusQuery {})),
        };
        expect_status(call(&mut self.stream, &mut self.scratch, &request)?)
    }

    /// Lets `estimator` observe this client's heartbeats and sections from
    /// now on (see [`send_estimated_timeouts`](MonitorClient::send_estimated_timeouts)).
    pub fn attach_estimator(&mut self, mut estimator: TimeoutEstimator) {
        estimator.record_init(Instant::now());
        self.estimator = Some(estimator);
    }

    /// The attached estimator.
    pub fn estimator(&self) -> Option<&TimeoutEstimator> {
        self.estimator.as_ref()
    }

    /// The attached estimator, to record observations by hand.
    pub fn estimator_mut(&mut self) -> Option<&mut TimeoutEstimator> {
        self.estimator.as_mut()
    }

    /// Asks the attached estimator for timeouts and sends them.
    ///
    /// # Errors
    /// [`Error::NotEnoughSamples`] (nothing sent); [`Error::Config`] when no
    /// estimator is attached; as [`send_timeouts`](MonitorClient::send_timeouts).
    pub fn send_estimated_timeouts(&mut self) -> Result<EffectiveConfig> {
        let update = self
            .estimator
            .as_mut()
            .ok_or_else(|| Error::config("no estimator attached"))?
            .propose()?;
        self.send_timeouts(&update)
    }
}

/// The launcher's connection to a monitor's control socket
/// (`PATH.control`): status and close-connection, served beside the rank.
#[derive(Debug)]
pub struct ControlClient {
    stream: UnixStream,
    scratch: Vec<u8>,
}

impl ControlClient {
    /// Connects to the control socket of the monitor whose rank socket is
    /// `socket` (a path already ending in `.control` is taken as it is),
    /// retrying for up to `timeout`, and checks that it runs as our uid.
    ///
    /// # Errors
    /// [`Error::ConnectTimeout`]; [`Error::Fdpass`] (`PeerRefused`) for a
    /// server of another uid; [`Error::Io`].
    pub fn connect(socket: impl AsRef<Path>, timeout: Duration) -> Result<ControlClient> {
        let socket = socket.as_ref();
        let path = if socket.extension().is_some_and(|e| e == "control") {
            socket.to_owned()
        } else {
            control_socket_path(socket)
        };
        Ok(ControlClient {
            stream: connect_retrying(&path, timeout)?,
            scratch: Vec::new(),
        })
    }

    /// The monitor's state.
    ///
    /// # Errors
    /// Framing errors; [`Error::Protocol`].
    pub fn status(&mut self) -> Result<MonitorStatus> {
        let request = pb::ControlRequest {
            request: Some(pb::control_request::Request::Status(pb::StatusQuery {})),
        };
        expect_status(call(&mut self.stream, &mut self.scratch, &request)?)
    }

    /// Drops the current rank connection (its state is cleared; the monitor
    /// becomes `Restarting`, or `Waiting` when it expects no restart).
    ///
    /// # Errors
    /// [`Error::Refused`] when no rank is connected; framing errors.
    pub fn close_connection(&mut self) -> Result<()> {
        let request = pb::ControlRequest {
            request: Some(pb::control_request::Request::CloseConnection(
                pb::CloseConnection {},
            )),
        };
        expect_ok(call(&mut self.stream, &mut self.scratch, &request)?).map(drop)
    }
}
