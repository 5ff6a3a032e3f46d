//! What the rank's messages do to the [`RankTracker`]: `Init` (its part
//! that needs no process), heartbeats, sections, timeout updates, status.

use std::time::Instant;

use nodeipc_proto::monitor as pb;

use super::{RankTracker, Tracked};
use super::{ok, status_reply};
use crate::config::check_section_name;
use crate::limits::{MAX_CAUSE, MAX_HOST, MAX_SECTIONS, MAX_STATE, truncate};
use crate::refusal::{Refusal, RefusalCode, over_cap};
use crate::status::TimeoutsMs;
use crate::{LogLevel, RankInfo, RankState};

/// What became of one message from the rank connection.
#[derive(Debug)]
pub enum Handled {
    /// Send this reply (boxed: a status is large, the other variants small).
    Reply(Box<pb::ServerMessage>),
    /// Send nothing: a section while section replies are skipped.
    NoReply,
    /// An `Init` the tracker can take: the server checks the process it
    /// names, then calls [`RankTracker::register`] or
    /// [`RankTracker::refuse_init`].
    Register(Registration),
}

/// An `Init` waiting for the server's check of its process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The rank as the client describes it (`pid` 0: the connecting process).
    pub rank: RankInfo,
    /// Whether it asks for the shared-memory heartbeat region.
    pub want_heartbeat_region: bool,
}

impl RankTracker {
    /// Answers one message from the rank connection, received at `now`.
    /// For a status query the server reads the heartbeat region first.
    pub fn handle(&mut self, msg: pb::ClientMessage, now: Instant) -> Handled {
        use pb::client_message::Msg;
        let result = match msg.msg {
            Some(Msg::Init(init)) => return self.on_init(init),
            Some(Msg::Heartbeat(beat)) => self.on_heartbeat(beat, now),
            Some(Msg::Section(section)) => {
                let result = self.on_section(&section, now);
                if self.config.skip_section_replies {
                    if let Err(refusal) = result {
                        self.note_limited(
                            LogLevel::Warn,
                            "refused section",
                            format!("section message refused (no reply sent): {refusal}"),
                        );
                    }
                    return Handled::NoReply;
                }
                result
            }
            Some(Msg::UpdateConfig(update)) => self.on_update(update),
            Some(Msg::WorkloadControl(request)) => self.on_workload(request),
            Some(Msg::StatusQuery(_)) => {
                return Handled::Reply(Box::new(status_reply(&self.status(now))));
            }
            None => Err(Refusal::new(
                RefusalCode::UnknownMessage,
                "empty ClientMessage: exactly one of init, heartbeat, section, update_config, status_query, workload_control must be set",
            )),
        };
        Handled::Reply(Box::new(result.map_or_else(Refusal::to_message, ok)))
    }

    /// What an `Init` can be refused for before its process is looked at.
    fn on_init(&mut self, init: pb::Init) -> Handled {
        let checked = self.check_init(&init).map(|rank| Registration {
            rank,
            want_heartbeat_region: init.want_heartbeat_region,
        });
        match checked {
            Ok(registration) => Handled::Register(registration),
            Err(refusal) => Handled::Reply(Box::new(self.refuse_init(refusal))),
        }
    }

    fn check_init(&self, init: &pb::Init) -> Result<RankInfo, Refusal> {
        if let Some(rank) = &self.rank {
            return Err(match self.state {
                RankState::TimedOut => Refusal::new(
                    RefusalCode::RankTimedOut,
                    format!(
                        "the previous rank (pid {}) is being terminated; retry once it has exited",
                        rank.info.pid
                    ),
                ),
                _ => Refusal::new(
                    RefusalCode::AlreadyRegistered,
                    format!(
                        "already registered as global rank {} (pid {}); Init is the first message of a connection, sent once",
                        rank.info.global_rank, rank.info.pid
                    ),
                ),
            });
        }
        let Some(info) = &init.rank else {
            return Err(Refusal::new(
                RefusalCode::InvalidArgument,
                "Init without rank info",
            ));
        };
        if info.host.len() > MAX_HOST {
            return Err(over_cap(
                "host name (RankInfo.host)",
                info.host.len(),
                MAX_HOST,
            ));
        }
        Ok(RankInfo::from_proto(info))
    }

    /// The registered rank, or the reason a message needs one.
    fn live_rank(&mut self, what: &str) -> Result<&mut Tracked, Refusal> {
        if self.state == RankState::TimedOut {
            return Err(Refusal::new(
                RefusalCode::RankTimedOut,
                format!(
                    "{what} refused: the monitor timed out this rank ({}) and is terminating it",
                    self.last_timeout.as_deref().unwrap_or("timeout")
                ),
            ));
        }
        self.rank.as_mut().ok_or_else(|| {
            Refusal::new(
                RefusalCode::NotInitialized,
                format!("{what} before Init: send Init first"),
            )
        })
    }

    fn on_heartbeat(&mut self, beat: pb::Heartbeat, now: Instant) -> Result<pb::Ok, Refusal> {
        if let Some(state) = beat.state.as_ref().filter(|s| s.len() > MAX_STATE) {
            return Err(over_cap("heartbeat state", state.len(), MAX_STATE));
        }
        let rank = self.live_rank("Heartbeat")?;
        rank.last_heartbeat = Some(now);
        rank.heartbeats = rank.heartbeats.saturating_add(1);
        if let Some(state) = beat.state {
            rank.last_state = Some(state);
        }
        self.state = RankState::Running;
        Ok(pb::Ok::default())
    }

    fn on_section(&mut self, section: &pb::Section, now: Instant) -> Result<pb::Ok, Refusal> {
        let action =
            pb::SectionAction::try_from(section.action).unwrap_or(pb::SectionAction::Unspecified);
        let rank = self.live_rank("Section")?;
        let name = section.name.as_str();
        match action {
            pb::SectionAction::Open => {
                check_section_name(name)?;
                if let Some((_, since)) = rank.sections.iter().find(|(n, _)| n == name) {
                    return Err(Refusal::new(
                        RefusalCode::SectionAlreadyOpen,
                        format!(
                            "section {name:?} is already open (for {} ms)",
                            now.saturating_duration_since(*since).as_millis()
                        ),
                    ));
                }
                if rank.sections.len() >= MAX_SECTIONS {
                    return Err(Refusal::new(
                        RefusalCode::TooManySections,
                        format!(
                            "{MAX_SECTIONS} sections are open already, the cap; close one first"
                        ),
                    ));
                }
                rank.sections.push((name.to_owned(), now));
                rank.out_of_section_since = None;
            }
            pb::SectionAction::Close => {
                check_section_name(name)?;
                let Some(i) = rank.sections.iter().position(|(n, _)| n == name) else {
                    let open: Vec<&str> = rank.sections.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(Refusal::new(
                        RefusalCode::SectionNotOpen,
                        format!("section {name:?} is not open (open: [{}])", open.join(", ")),
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
                return Err(Refusal::new(
                    RefusalCode::InvalidArgument,
                    format!(
                        "section action {} is not OPEN (1), CLOSE (2) or CLOSE_ALL (3)",
                        section.action
                    ),
                ));
            }
        }
        Ok(pb::Ok::default())
    }

    /// A workload control request: kept for the launcher, the most severe standing.
    fn on_workload(&mut self, request: pb::WorkloadControl) -> Result<pb::Ok, Refusal> {
        self.live_rank("a workload control request")?;
        if pb::WorkloadAction::try_from(request.action).is_err() {
            let why = format!("workload action {} is not 0, 1 or 2", request.action);
            return Err(Refusal::new(RefusalCode::InvalidArgument, why));
        }
        let why = truncate(request.description, MAX_CAUSE);
        // The most severe stands: shutting down, then excluding, then continuing.
        self.workload = self.workload.take().max(Some((request.action, why)));
        Ok(pb::Ok::default())
    }

    fn on_update(&mut self, update: pb::UpdateConfig) -> Result<pb::Ok, Refusal> {
        if let Some(timeouts) = &update.timeouts {
            self.config.timeouts.apply(timeouts)?;
            // Limited: each line can list every section timeout (17 KiB).
            let line = format!(
                "timeouts updated: {}",
                TimeoutsMs::from(&self.config.timeouts)
            );
            self.note_limited(LogLevel::Info, "timeouts updated", line);
        }
        Ok(pb::Ok {
            config: Some(self.config.effective()),
            ..pb::Ok::default()
        })
    }
}
