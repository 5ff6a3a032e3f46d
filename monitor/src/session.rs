//! What the rank's messages do: registration (with the pid check), heartbeats,
//! sections, configuration updates and the status a query answers.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use nodeipc_fdpass::Pidfd;
use nodeipc_proto::monitor as pb;

use crate::config::{check_section_name, ms};
use crate::conn::PeerStart;
use crate::fastpath::ServerRegion;
use crate::limits::{MAX_HOST, MAX_SECTIONS, MAX_STATE, over_cap};
use crate::server::{error, ok, status_reply};
use crate::status::TimeoutsMs;
use crate::{MonitorServer, MonitorStatus, OpenSectionStatus, RankInfo, RankState, procfs};

/// A registered rank: who it is, its process pinned by a pidfd, and what the
/// timeouts measure from.
#[derive(Debug)]
pub(crate) struct Registered {
    /// Who it is (`pid` resolved: never 0).
    pub(crate) info: RankInfo,
    /// Its process; signals go only through this.
    pub(crate) pidfd: Pidfd,
    /// Its start time in clock ticks since boot, for reports.
    pub(crate) start_time: u64,
    pub(crate) init_at: Instant,
    pub(crate) last_heartbeat: Option<Instant>,
    pub(crate) heartbeats: u64,
    /// Open sections, in the order they were opened.
    pub(crate) sections: Vec<(String, Instant)>,
    /// Since when no section is open (`None` while one is).
    pub(crate) out_of_section_since: Option<Instant>,
    pub(crate) last_state: Option<Vec<u8>>,
    pub(crate) region: Option<ServerRegion>,
}

/// A termination in progress: the signal went at `signalled_at`, `SIGKILL`
/// follows at `escalate_at` if the rank still lives.
#[derive(Debug)]
pub(crate) struct Termination {
    pub(crate) signalled_at: Instant,
    pub(crate) escalate_at: Option<Instant>,
}

impl Registered {
    /// `"a (1200 ms), b (30 ms)"`, or empty when none is open.
    pub(crate) fn describe_sections(&self) -> String {
        let now = Instant::now();
        self.sections
            .iter()
            .map(|(name, since)| {
                format!("{name:?} ({} ms)", now.duration_since(*since).as_millis())
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Counts the beats the fast path saw since the last look.
    pub(crate) fn sample_region(&mut self, now: Instant) {
        let Some(region) = self.region.as_mut() else {
            return;
        };
        let beats = region.take_beats();
        if beats > 0 {
            self.heartbeats = self.heartbeats.saturating_add(beats);
            self.last_heartbeat = Some(now);
        }
    }
}

type Reply = Option<(pb::ServerMessage, Option<OwnedFd>)>;

impl MonitorServer {
    /// Answers one message from the rank connection (`None`: no answer, for a
    /// section when section replies are skipped).
    pub(crate) fn handle_rank_message(&mut self, msg: pb::ClientMessage) -> Reply {
        use pb::client_message::Msg;
        let reply = match msg.msg {
            Some(Msg::Init(init)) => return Some(self.on_init(init)),
            Some(Msg::Heartbeat(beat)) => self.on_heartbeat(beat),
            Some(Msg::Section(section)) => {
                let result = self.on_section(&section);
                if self.config.skip_section_replies {
                    if let Err(cause) = result {
                        self.log.warn_limited(
                            "refused section",
                            &format!("section message refused (no reply sent): {cause}"),
                        );
                    }
                    return None;
                }
                result
            }
            Some(Msg::UpdateConfig(update)) => self.on_update(update),
            Some(Msg::StatusQuery(_)) => return Some((status_reply(self.status()), None)),
            None => Err(
                "empty ClientMessage: exactly one of init, heartbeat, section, update_config, status_query must be set"
                    .to_owned(),
            ),
        };
        Some((reply.map_or_else(error, ok), None))
    }

    fn on_init(&mut self, init: pb::Init) -> (pb::ServerMessage, Option<OwnedFd>) {
        match self.register(init) {
            Ok((reply, fd)) => (ok(reply), fd),
            Err(cause) => {
                self.log
                    .warn_limited("refused Init", &format!("Init refused: {cause}"));
                (error(cause), None)
            }
        }
    }

    /// Checks the pid the client names and registers the rank.
    ///
    /// The pidfd is opened first and the process checked alive last: if it
    /// is alive then, the pid named it all along, so the ancestry read from
    /// `/proc` in between was its own and not a recycled pid's.
    fn register(&mut self, init: pb::Init) -> Result<(pb::Ok, Option<OwnedFd>), String> {
        if let Some(rank) = &self.rank {
            return Err(match self.state {
                RankState::TimedOut => format!(
                    "the previous rank (pid {}) is being terminated; retry once it has exited",
                    rank.info.pid
                ),
                _ => format!(
                    "already registered as global rank {} (pid {}); Init is the first message of a connection, sent once",
                    rank.info.global_rank, rank.info.pid
                ),
            });
        }
        let Some((peer, peer_start)) = self.conn.as_ref().map(|c| (c.peer, c.peer_start.clone()))
        else {
            return Err("no connection".to_owned());
        };
        let Some(info) = init.rank else {
            return Err("Init without rank info".to_owned());
        };
        if info.host.len() > MAX_HOST {
            return Err(over_cap(
                "host name (RankInfo.host)",
                info.host.len(),
                MAX_HOST,
            ));
        }
        if peer.pid == 0 {
            return Err(
                "the connecting process lives in a pid namespace the monitor cannot see (SO_PEERCRED pid 0); run the monitor in the rank's pid namespace"
                    .to_owned(),
            );
        }
        // SO_PEERCRED's pid was read when the client connected (it may have
        // waited for the rank connection since): the process must still be
        // the one that connected, not another that got its pid since. Only
        // the kernel saying so (no such process, another start time) means
        // it has gone; failing to look (EMFILE, say) is refused as that.
        let exited_since = || {
            format!(
                "the connecting process (pid {}) has exited since it connected; a process that holds its socket now cannot register in its name",
                peer.pid
            )
        };
        let cannot_check = |e: &dyn std::fmt::Display| {
            format!(
                "cannot check the connecting process (pid {}): {e}; retry once the monitor has descriptors again",
                peer.pid
            )
        };
        match peer_start {
            PeerStart::Known(then) => match nodeipc_fdpass::process_start_time(peer.pid) {
                Ok(now) if now == then => {}
                Ok(_) | Err(nodeipc_fdpass::Error::ProcessGone { .. }) => {
                    return Err(exited_since());
                }
                Err(e) => return Err(cannot_check(&e)),
            },
            PeerStart::Gone | PeerStart::Hidden => return Err(exited_since()),
            PeerStart::Unreadable(e) => {
                return Err(cannot_check(&format!("when it connected, {e}")));
            }
        }
        let pid = if info.pid == 0 { peer.pid } else { info.pid };
        let pidfd = Pidfd::open(pid).map_err(|e| format!("cannot watch pid {pid}: {e}"))?;
        if !procfs::is_self_or_descendant(pid, peer.pid).map_err(|e| cannot_check(&e))? {
            return Err(format!(
                "pid {pid} is neither the connecting process (pid {}, from SO_PEERCRED) nor a descendant of it; a client may only name itself or its own descendants",
                peer.pid
            ));
        }
        let exited = || format!("process {pid} exited during registration");
        let start_time = match nodeipc_fdpass::process_start_time(pid) {
            Ok(start_time) => start_time,
            Err(nodeipc_fdpass::Error::ProcessGone { .. }) => return Err(exited()),
            Err(e) => return Err(cannot_check(&e)),
        };
        if pidfd.has_exited().map_err(|e| cannot_check(&e))? {
            return Err(exited());
        }
        let region = if init.want_heartbeat_region && self.config.heartbeat_region {
            match ServerRegion::create() {
                Ok(region) => Some(region),
                Err(e) => {
                    self.log.warn_limited(
                        "heartbeat region",
                        &format!("no heartbeat region for pid {pid}: {e}"),
                    );
                    None
                }
            }
        } else {
            None
        };
        let fd = region
            .as_ref()
            .and_then(|r| r.as_fd().try_clone_to_owned().ok());
        let shm_heartbeat = fd.as_ref().and(region.as_ref().map(ServerRegion::describe));
        let now = Instant::now();
        let rank = RankInfo {
            pid,
            ..RankInfo::from_proto(&info)
        };
        // Limited: a client may register and leave in a loop.
        self.log.info_limited(
            "registration",
            &format!(
                "registered global rank {} (local {}) pid {pid} on {:?}{}",
                rank.global_rank,
                rank.local_rank,
                rank.host,
                if fd.is_some() {
                    ", shared-memory heartbeat attached"
                } else {
                    ""
                }
            ),
        );
        if let Some(conn) = self.conn.as_mut() {
            // Registered: the connection holds the rank slot by right now.
            conn.settle();
        }
        self.rank = Some(Registered {
            info: rank,
            pidfd,
            start_time,
            init_at: now,
            last_heartbeat: None,
            heartbeats: 0,
            sections: Vec::new(),
            out_of_section_since: Some(now),
            last_state: None,
            region,
        });
        self.termination = None;
        self.state = RankState::Initialized;
        let reply = pb::Ok {
            config: Some(self.config.effective()),
            heartbeat_region_attached: fd.is_some(),
            shm_heartbeat,
        };
        Ok((reply, fd))
    }

    /// The registered rank, or the reason a message needs one.
    fn live_rank(&mut self, what: &str) -> Result<&mut Registered, String> {
        if self.state == RankState::TimedOut {
            return Err(format!(
                "{what} refused: the monitor timed out this rank ({}) and is terminating it",
                self.last_timeout.as_deref().unwrap_or("timeout")
            ));
        }
        self.rank
            .as_mut()
            .ok_or_else(|| format!("{what} before Init: send Init first"))
    }

    fn on_heartbeat(&mut self, beat: pb::Heartbeat) -> Result<pb::Ok, String> {
        if let Some(state) = beat.state.as_ref().filter(|s| s.len() > MAX_STATE) {
            return Err(over_cap("heartbeat state", state.len(), MAX_STATE));
        }
        let rank = self.live_rank("Heartbeat")?;
        rank.last_heartbeat = Some(Instant::now());
        rank.heartbeats = rank.heartbeats.saturating_add(1);
        if let Some(state) = beat.state {
            rank.last_state = Some(state);
        }
        self.state = RankState::Running;
        Ok(pb::Ok::default())
    }

    fn on_section(&mut self, section: &pb::Section) -> Result<pb::Ok, String> {
        let action =
            pb::SectionAction::try_from(section.action).unwrap_or(pb::SectionAction::Unspecified);
        let rank = self.live_rank("Section")?;
        let now = Instant::now();
        let name = section.name.as_str();
        match action {
            pb::SectionAction::Open => {
                check_section_name(name)?;
                if let Some((_, since)) = rank.sections.iter().find(|(n, _)| n == name) {
                    return Err(format!(
                        "section {name:?} is already open (for {} ms)",
                        now.duration_since(*since).as_millis()
                    ));
                }
                if rank.sections.len() >= MAX_SECTIONS {
                    return Err(format!(
                        "{MAX_SECTIONS} sections are open already, the cap; close one first"
                    ));
                }
                rank.sections.push((name.to_owned(), now));
                rank.out_of_section_since = None;
            }
            pb::SectionAction::Close => {
                check_section_name(name)?;
                let Some(i) = rank.sections.iter().position(|(n, _)| n == name) else {
                    let open: Vec<&str> = rank.sections.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(format!(
                        "section {name:?} is not open (open: [{}])",
                        open.join(", ")
                    ));
                };
                rank.sections.remove(i);
                if rank.sections.is_empty() {
                    rank.out_of_section_since = Some(now);
                }
            }
            pb::SectionAction::CloseAll => {
                if !rank.sections.is_empty() {
                    rank.sections.clear();
                    rank.out_of_section_since = Some(now);
                }
            }
            pb::SectionAction::Unspecified => {
                return Err(format!(
                    "section action {} is not OPEN (1), CLOSE (2) or CLOSE_ALL (3)",
                    section.action
                ));
            }
        }
        Ok(pb::Ok::default())
    }

    fn on_update(&mut self, update: pb::UpdateConfig) -> Result<pb::Ok, String> {
        if let Some(timeouts) = &update.timeouts {
            self.config.timeouts.apply(timeouts)?;
            // Limited: each line can list every section timeout (17 KiB).
            self.log.info_limited(
                "timeouts updated",
                &format!(
                    "timeouts updated: {}",
                    serde_json::to_string(&TimeoutsMs::from(&self.config.timeouts))
                        .unwrap_or_default()
                ),
            );
        }
        Ok(pb::Ok {
            config: Some(self.config.effective()),
            ..pb::Ok::default()
        })
    }

    /// The answer to a status query, the heartbeat region read first.
    pub(crate) fn status(&mut self) -> MonitorStatus {
        let now = Instant::now();
        if let Some(rank) = self.rank.as_mut() {
            let before = rank.heartbeats;
            rank.sample_region(now);
            if rank.heartbeats > before && self.state == RankState::Initialized {
                self.state = RankState::Running;
            }
        }
        let since = |t: Instant| ms(now.duration_since(t));
        let rank = self.rank.as_ref();
        let effective = self.config.effective();
        MonitorStatus {
            state: self.state,
            rank: rank.map(|r| r.info.clone()),
            heartbeats: rank.map_or(0, |r| r.heartbeats),
            open_sections: rank
                .map(|r| {
                    r.sections
                        .iter()
                        .map(|(name, at)| OpenSectionStatus {
                            name: name.clone(),
                            open_ms: since(*at),
                            timeout_ms: self.config.timeouts.sections.get(name).map(|d| ms(*d)),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            ms_since_last_heartbeat: rank.and_then(|r| r.last_heartbeat).map(since),
            ms_since_init: rank.map(|r| since(r.init_at)),
            ms_out_of_section: rank.and_then(|r| r.out_of_section_since).map(since),
            last_timeout: self.last_timeout.clone(),
            timeouts: TimeoutsMs::from(&self.config.timeouts),
            termination_signal: effective.termination_signal,
            kill_after_ms: effective.kill_after_ms,
            skip_section_replies: effective.skip_section_replies,
            last_state: rank.and_then(|r| r.last_state.clone()),
        }
    }
}
