//! [`MonitorClient`], the rank's side, and [`ControlClient`], the launcher's.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nodeipc_proto::monitor as pb;
use nodeipc_proto::{LEN_PREFIX, decode_message};

use crate::conn::MAX_FRAME;
use crate::fastpath::ClientRegion;
use crate::wire::{Wire, check_timeout, connect_retrying, set_timeouts, timed_out};
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
    /// How often the monitor checks the timeouts (`None` from an older one).
    pub check_interval: Option<Duration>,
}

impl EffectiveConfig {
    fn from_proto(c: &pb::EffectiveConfig) -> EffectiveConfig {
        EffectiveConfig {
            timeouts: Timeouts::from_proto(&c.timeouts.clone().unwrap_or_default()),
            termination_signal: c.termination_signal,
            kill_after: c.kill_after_ms.map(Duration::from_millis),
            skip_section_replies: c.skip_section_replies,
            check_interval: c.check_interval_ms.map(Duration::from_millis),
        }
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
    wire: Wire,
    skip_section_replies: bool,
    region: Option<ClientRegion>,
    estimator: Option<TimeoutEstimator>,
}

impl MonitorClient {
    /// Connects to the monitor's rank socket, retrying for up to `timeout`
    /// while it does not exist or nobody listens yet, and checks that the
    /// monitor runs as our uid (`SO_PEERCRED`).
    ///
    /// `timeout` also bounds each call: sending a request and waiting for
    /// its reply.
    ///
    /// # Errors
    /// [`Error::ConnectTimeout`] with the last error (`EAGAIN`: the
    /// monitor's backlog stayed full); [`Error::Fdpass`] (`PeerRefused`) for
    /// a server of another uid, `Connect` for a socket that cannot be
    /// connected to; [`Error::Config`] for a zero timeout; [`Error::Io`].
    pub fn connect(path: impl AsRef<Path>, timeout: Duration) -> Result<MonitorClient> {
        let path = path.as_ref();
        Ok(MonitorClient {
            wire: Wire {
                stream: connect_retrying(path, timeout)?,
                path: path.to_owned(),
                scratch: Vec::new(),
            },
            skip_section_replies: false,
            region: None,
            estimator: None,
        })
    }

    /// The socket path this client connected to.
    pub fn path(&self) -> &Path {
        &self.wire.path
    }

    /// Changes how long each call waits for its reply.
    ///
    /// # Errors
    /// [`Error::Config`] for zero; [`Error::Io`] from `setsockopt`.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        check_timeout(&self.wire.path, timeout)?;
        set_timeouts(&self.wire.stream, &self.wire.path, timeout)
    }

    /// Registers the rank (`Init`). `rank.pid` must be this process, a
    /// descendant of it, or 0 (this process).
    ///
    /// # Errors
    /// [`Error::Refused`] (another pid, a second `Init`, or the monitor's
    /// refusal after holding this connection while another client held the
    /// rank slot); [`Error::Timeout`] when no answer came in time, saying
    /// whether another client holds the rank connection; framing errors.
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
        if let Err(sent) = self.wire.send("Init", &request) {
            return Err(self.wire.refusal_after_hang_up("Init", sent));
        }
        let ok = self.read_init_reply()?;
        let (ok, mut fds) = ok;
        if ok.heartbeat_region_attached {
            let (Some(fd), Some(desc)) = (fds.pop(), ok.shm_heartbeat.as_ref()) else {
                return Err(Error::Protocol {
                    reason: format!(
                        "the monitor at {} announced a heartbeat region without its descriptor or layout",
                        self.wire.path.display()
                    ),
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

    /// The reply to `Init`, with the region's descriptor riding on its
    /// first byte.
    fn read_init_reply(&mut self) -> Result<(pb::Ok, Vec<OwnedFd>)> {
        const OP: &str = "waiting for the reply to Init";
        let started = Instant::now();
        let mut prefix = [0u8; LEN_PREFIX];
        let fds = nodeipc_fdpass::recv_fds_exact(&self.wire.stream, &mut prefix, 1).map_err(
            |e| match e {
                nodeipc_fdpass::Error::Io { source, .. } if timed_out(&source) => {
                    let detail = unanswered_init_detail(&self.wire.path);
                    self.wire.timeout(OP.to_owned(), started, detail)
                }
                nodeipc_fdpass::Error::Io { source, .. } => {
                    self.wire.error(OP.to_owned(), started, source.into())
                }
                nodeipc_fdpass::Error::Closed { received, .. } => {
                    let source = if received == 0 {
                        nodeipc_proto::Error::Closed
                    } else {
                        nodeipc_proto::Error::Truncated {
                            need: LEN_PREFIX,
                            have: received,
                        }
                    };
                    self.wire.error(OP.to_owned(), started, source)
                }
                other => Error::Fdpass(other),
            },
        )?;
        let size = u32::from_le_bytes(prefix) as usize + LEN_PREFIX;
        if size > MAX_FRAME {
            let source = nodeipc_proto::Error::TooLarge {
                size,
                max: MAX_FRAME,
            };
            return Err(self.wire.error(OP.to_owned(), started, source));
        }
        let mut body = vec![0u8; size - LEN_PREFIX];
        if let Err(e) = self.wire.stream.read_exact(&mut body) {
            return Err(self.wire.error(OP.to_owned(), started, e.into()));
        }
        // As every other reply is read (`read_frame`): map fields' wire
        // types checked, which prost's `decode` skips.
        let reply = decode_message::<pb::ServerMessage>(&body).map_err(|e| {
            self.wire
                .error("decoding the reply to Init".to_owned(), started, e)
        })?;
        let msg = reply.msg.ok_or_else(|| self.wire.empty_reply("Init"))?;
        Ok((self.wire.expect_ok("Init", msg)?, fds))
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
        let reply = self.wire.call("the heartbeat", &request)?;
        self.wire.expect_ok("the heartbeat", reply)?;
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
        let what = match action {
            pb::SectionAction::Open => "the section start",
            pb::SectionAction::Close => "the section end",
            _ => "the end of all sections",
        };
        if self.skip_section_replies {
            return self.wire.send(what, &request);
        }
        let reply = self.wire.call(what, &request)?;
        self.wire.expect_ok(what, reply).map(drop)
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
        let reply = self.wire.call("the timeout update", &request)?;
        let ok = self.wire.expect_ok("the timeout update", reply)?;
        Ok(EffectiveConfig::from_proto(&ok.config.unwrap_or_default()))
    }

    /// Asks the launcher, through the monitor, for `action` (`monitor.proto`'s
    /// `WorkloadAction`: 0 continue, 1 exclude this node, 2 shut down).
    ///
    /// # Errors
    /// [`Error::Refused`] before `Init` or for another action; framing errors.
    pub fn workload_control(&mut self, action: i32, description: &str) -> Result<()> {
        const WHAT: &str = "the workload control request";
        let description = description.to_owned();
        let msg = pb::client_message::Msg::WorkloadControl(pb::WorkloadControl {
            action,
            description,
        });
        let request = pb::ClientMessage { msg: Some(msg) };
        let reply = self.wire.call(WHAT, &request)?;
        self.wire.expect_ok(WHAT, reply).map(drop)
    }

    /// The monitor's state (`StatusQuery`).
    ///
    /// # Errors
    /// Framing errors; [`Error::Protocol`] for an unexpected reply.
    pub fn status(&mut self) -> Result<MonitorStatus> {
        let request = pb::ClientMessage {
            msg: Some(pb::client_message::Msg::StatusQuery(pb::StatusQuery {})),
        };
        let reply = self.wire.call("the status query", &request)?;
        self.wire.expect_status("the status query", reply)
    }

    /// Lets `estimator` observe this client's heartbeats and sections from
    /// now on; [`estimator_mut`](MonitorClient::estimator_mut)'s proposal goes
    /// to [`send_timeouts`](MonitorClient::send_timeouts).
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
}

/// The launcher's connection to a monitor's control socket
/// (`PATH.control`): status and close-connection, served beside the rank.
#[derive(Debug)]
pub struct ControlClient {
    wire: Wire,
}

impl ControlClient {
    /// Connects to the control socket of the monitor whose rank socket is
    /// `socket` (a path already ending in `.control` is taken as it is),
    /// retrying for up to `timeout`, and checks that it runs as our uid.
    ///
    /// # Errors
    /// [`Error::ConnectTimeout`] (`EAGAIN`: the monitor's backlog stayed
    /// full); [`Error::Fdpass`] (`PeerRefused`) for a server of another uid;
    /// [`Error::Config`] for a zero timeout; [`Error::Io`].
    pub fn connect(socket: impl AsRef<Path>, timeout: Duration) -> Result<ControlClient> {
        let socket = socket.as_ref();
        let path = if socket.extension().is_some_and(|e| e == "control") {
            socket.to_owned()
        } else {
            control_socket_path(socket)
        };
        Ok(ControlClient {
            wire: Wire {
                stream: connect_retrying(&path, timeout)?,
                path,
                scratch: Vec::new(),
            },
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
        let reply = self.wire.call("the status query", &request)?;
        self.wire.expect_status("the status query", reply)
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
        let reply = self.wire.call("close-connection", &request)?;
        self.wire.expect_ok("close-connection", reply).map(drop)
    }
}

/// Why a rank's `Init` went unanswered, asked of the monitor's control
/// socket (briefly): the monitor serves one rank connection at a time and
/// holds the others unanswered, or it is not running at all.
fn unanswered_init_detail(path: &Path) -> String {
    const PROBE: Duration = Duration::from_millis(250);
    match ControlClient::connect(path, PROBE).and_then(|mut c| c.status()) {
        Ok(MonitorStatus {
            rank: Some(holder), ..
        }) => format!(
            ": it did not accept the rank: another client holds the rank connection \
             (global rank {}, pid {}); the monitor serves one at a time",
            holder.global_rank, holder.pid
        ),
        Ok(_) => ": it did not accept the rank, though it answers on its control socket: \
                   another connection may hold the rank slot (the monitor serves one at a time)"
            .to_owned(),
        Err(e) => format!(": its control socket does not answer either ({e})"),
    }
}
