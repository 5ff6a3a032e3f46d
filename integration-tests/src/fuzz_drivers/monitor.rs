//! The rank monitor's socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nodeipc_proto::{Error as ProtoError, LEN_PREFIX, decode_message, monitor, read_frame};
use nodeipc_testkit::TempDir;

use super::decode::check_decode_error;

/// A monitor server on a thread of this process, its periodic check an hour
/// away: whatever the bytes register, no timeout can fire a signal at us.
pub struct MonitorFixture {
    socket: PathBuf,
    /// Removed on drop, after the server stopped.
    _dir: TempDir,
    stop: nodeipc_monitor::StopHandle,
    serving: Option<std::thread::JoinHandle<()>>,
    exchanges: AtomicU32,
}

impl MonitorFixture {
    /// Serves a socket in a new private directory under `/tmp`, removed on
    /// drop.
    pub fn start() -> MonitorFixture {
        let dir = TempDir::new("fuzz-mon");
        let socket = dir.join("rank.sock");
        let config = nodeipc_monitor::MonitorConfig {
            check_interval: nodeipc_monitor::MAX_CHECK_INTERVAL,
            connection_wait: Duration::from_secs(2),
            ..nodeipc_monitor::MonitorConfig::default()
        };
        let mut server = nodeipc_monitor::MonitorServer::bind(&socket, config).expect("bind");
        server.on_log(|_, _| {});
        let stop = server.stop_handle();
        let serving = std::thread::spawn(move || {
            server.run().expect("the monitor keeps serving");
        });
        MonitorFixture {
            socket,
            _dir: dir,
            stop,
            serving: Some(serving),
            exchanges: AtomicU32::new(0),
        }
    }
}

impl Drop for MonitorFixture {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(serving) = self.serving.take() {
            let _ = serving.join();
        }
    }
}

/// Arbitrary bytes on the rank socket: every frame the bytes hold gets the
/// answer the protocol calls for, in order — an Error quoting the decode
/// error for a frame that is not a `ClientMessage`, an Error and the end for
/// an oversize prefix, and for a message what the connection's state calls
/// for (see [`RankConnection`]): Errors name what was wrong. The server
/// closes the connection once we stop sending, forgets its rank, and
/// answers the next client.
pub fn monitor_stream(fixture: &MonitorFixture, data: &[u8]) {
    let mut stream = UnixStream::connect(&fixture.socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // The server may close early (an oversize prefix): a failed write is fine.
    let _ = stream.write_all(data);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut replies = Vec::new();
    if let Err(e) = stream.read_to_end(&mut replies) {
        assert!(
            e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
            "the monitor neither answered nor closed within 5 s"
        );
    }
    let mut answers = Vec::new();
    let mut rest = replies.as_slice();
    let mut scratch = Vec::new();
    while !rest.is_empty() {
        answers.push(
            read_frame::<monitor::ServerMessage>(
                &mut rest,
                nodeipc_monitor::MAX_FRAME,
                &mut scratch,
            )
            .expect("every answer is a well-formed ServerMessage frame"),
        );
    }
    let mut answers = answers.into_iter();
    let mut connection = RankConnection::default();
    let mut sent = data;
    let mut frames = 0;
    loop {
        let size = match nodeipc_proto::frame_len(sent, nodeipc_monitor::MAX_FRAME) {
            Ok(size) => size,
            Err(ProtoError::TooLarge { size, .. }) => {
                let answer = answers
                    .next()
                    .unwrap_or_else(|| panic!("an oversize prefix (frame {frames}) got no answer"));
                let cause = error_cause(&answer, "an oversize prefix");
                assert!(
                    cause.contains("exceeds the limit") && cause.contains(&size.to_string()),
                    "the refusal of an oversize prefix of {size} bytes does not say so: {cause:?}"
                );
                break;
            }
            // A partial frame when the stream ends is never answered.
            Err(_) => break,
        };
        let body = &sent[LEN_PREFIX..size];
        sent = &sent[size..];
        let answer = answers
            .next()
            .unwrap_or_else(|| panic!("frame {frames} ({body:02x?}) got no answer"));
        // As the monitor decodes: map fields' wire types checked first.
        match decode_message::<monitor::ClientMessage>(body) {
            Ok(msg) => connection.answered(&msg, &answer),
            Err(ProtoError::Decode(e)) => {
                let text = check_decode_error::<monitor::ClientMessage>(&e, body);
                let cause = error_cause(&answer, "a frame that is not a ClientMessage");
                assert!(
                    cause.contains("holds no valid message") && cause.ends_with(&text),
                    "the refusal of a malformed frame does not say what was wrong \
                     (expected prost's {text:?}): {cause:?}"
                );
            }
            Err(other) => panic!("unexpected error {other}"),
        }
        frames += 1;
    }
    let extra: Vec<_> = answers.collect();
    assert!(
        extra.is_empty(),
        "{} answers more than the {frames} frames sent: {extra:?}",
        extra.len()
    );
    let n = fixture.exchanges.fetch_add(1, Ordering::Relaxed);
    if n.is_multiple_of(16) {
        let status =
            nodeipc_monitor::ControlClient::connect(&fixture.socket, Duration::from_secs(5))
                .and_then(|mut c| c.status())
                .expect("the monitor still answers");
        // The connection is gone, and with it its rank: no heartbeat of it
        // counts any more (and never more than it sent).
        assert!(
            status.rank.is_none() && status.heartbeats == 0,
            "a closed connection's rank is still registered ({:?}, {} heartbeats; {} sent)",
            status.rank,
            status.heartbeats,
            connection.heartbeats_sent
        );
    }
}

/// The cause of an Error answer; any other answer to `what` is a failure.
fn error_cause<'m>(answer: &'m monitor::ServerMessage, what: &str) -> &'m str {
    match &answer.msg {
        Some(monitor::server_message::Msg::Error(e)) => {
            assert!(!e.cause.is_empty(), "an Error without a cause for {what}");
            &e.cause
        }
        other => panic!("{what} was answered with {other:?}, not an Error"),
    }
}

/// What the monitor knows of one rank connection, as its answers must show
/// it: the pid registered by an accepted Init (none before), the heartbeats
/// accepted since, the sections open (`monitor.proto` and the server's rules).
#[derive(Default)]
struct RankConnection {
    registered: Option<u32>,
    heartbeats: u64,
    heartbeats_sent: u64,
    sections: Vec<String>,
}

impl RankConnection {
    /// Checks `answer` against what `msg` calls for, and moves on.
    fn answered(&mut self, msg: &monitor::ClientMessage, answer: &monitor::ServerMessage) {
        use monitor::client_message::Msg as C;
        use monitor::server_message::Msg as S;
        let us = std::process::id();
        let outcome = match &answer.msg {
            Some(S::Error(e)) => Err(e.cause.as_str()),
            Some(S::Ok(ok)) => Ok(ok),
            Some(S::Status(status)) => {
                assert!(
                    matches!(msg.msg, Some(C::StatusQuery(_))),
                    "{msg:?} was answered with a Status"
                );
                assert_eq!(
                    status.rank.as_ref().map(|r| r.pid),
                    self.registered,
                    "the Status names another rank than the Init accepted"
                );
                // Every heartbeat the monitor counted is one it accepted
                // on this connection since Init (the shared-memory region,
                // if one went with the Init's answer, was dropped unused).
                assert_eq!(
                    status.heartbeats, self.heartbeats,
                    "the Status counts {} heartbeats; {} were accepted ({} sent)",
                    status.heartbeats, self.heartbeats, self.heartbeats_sent
                );
                let open: Vec<&str> = status
                    .open_sections
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect();
                assert_eq!(open, self.sections, "the Status's open sections");
                return;
            }
            None => panic!("an answer with nothing set, to {msg:?}"),
        };
        // Whether a refusal (`Err`) names what was wrong: it contains one of
        // `terms`.
        let refused = |outcome: &Result<&monitor::Ok, &str>, terms: &[&str]| match outcome {
            Err(cause) => {
                assert!(
                    terms.iter().any(|t| cause.contains(t)),
                    "refusing {msg:?}, the cause names none of {terms:?}: {cause:?}"
                );
            }
            Ok(_) => panic!("{msg:?} was accepted; expected an Error naming one of {terms:?}"),
        };
        match &msg.msg {
            None => refused(&outcome, &["empty ClientMessage"]),
            Some(C::StatusQuery(_)) => panic!("a StatusQuery was answered with {answer:?}"),
            Some(C::Init(init)) => {
                let Some(info) = &init.rank else {
                    let term = if self.registered.is_some() {
                        "already registered"
                    } else {
                        "without rank info"
                    };
                    return refused(&outcome, &[term]);
                };
                if self.registered.is_some() {
                    return refused(&outcome, &["already registered"]);
                }
                let pid = if info.pid == 0 { us } else { info.pid };
                match outcome {
                    Ok(ok) => {
                        assert!(
                            pid == us || is_descendant_of(pid, us),
                            "an Init naming pid {pid}, neither us ({us}) nor our descendant, was accepted"
                        );
                        assert!(
                            ok.config.is_some(),
                            "an Ok to Init without the configuration"
                        );
                        self.registered = Some(pid);
                        self.heartbeats = 0;
                        self.sections.clear();
                    }
                    Err(cause) => {
                        assert_ne!(pid, us, "our own Init was refused: {cause}");
                        assert!(
                            cause.contains(&pid.to_string()),
                            "the refusal of an Init naming pid {pid} does not name it: {cause:?}"
                        );
                        refused(
                            &outcome,
                            &[
                                "cannot watch pid",
                                "is neither the connecting process",
                                "exited during registration",
                            ],
                        );
                    }
                }
            }
            Some(C::Heartbeat(beat)) => {
                self.heartbeats_sent += 1;
                if beat
                    .state
                    .as_ref()
                    .is_some_and(|s| s.len() > nodeipc_monitor::MAX_STATE)
                {
                    refused(&outcome, &["heartbeat state of"]);
                } else if self.registered.is_none() {
                    refused(&outcome, &["Heartbeat before Init"]);
                } else {
                    assert!(outcome.is_ok(), "a heartbeat was refused: {outcome:?}");
                    self.heartbeats += 1;
                }
            }
            Some(C::Section(section)) => {
                use monitor::SectionAction as A;
                if self.registered.is_none() {
                    return refused(&outcome, &["Section before Init"]);
                }
                let name = section.name.as_str();
                let bad_name = section_name_fault(name);
                let open = self.sections.iter().position(|n| n == name);
                match A::try_from(section.action).unwrap_or(A::Unspecified) {
                    A::Unspecified => {
                        refused(&outcome, &["is not OPEN (1), CLOSE (2) or CLOSE_ALL (3)"])
                    }
                    A::Open | A::Close if bad_name.is_some() => {
                        refused(&outcome, &[bad_name.unwrap_or_default()])
                    }
                    A::Open if open.is_some() => refused(&outcome, &["is already open"]),
                    A::Open if self.sections.len() >= nodeipc_monitor::MAX_SECTIONS => {
                        refused(&outcome, &["sections are open already"])
                    }
                    A::Open => {
                        assert!(
                            outcome.is_ok(),
                            "opening section {name:?} was refused: {outcome:?}"
                        );
                        self.sections.push(name.to_owned());
                    }
                    A::Close => match open {
                        None => refused(&outcome, &["is not open"]),
                        Some(i) => {
                            assert!(
                                outcome.is_ok(),
                                "closing section {name:?} was refused: {outcome:?}"
                            );
                            self.sections.remove(i);
                        }
                    },
                    A::CloseAll => {
                        assert!(
                            outcome.is_ok(),
                            "closing all sections was refused: {outcome:?}"
                        );
                        self.sections.clear();
                    }
                }
            }
            Some(C::WorkloadControl(request)) => {
                if self.registered.is_none() {
                    refused(&outcome, &["workload control request before Init"]);
                } else if monitor::WorkloadAction::try_from(request.action).is_err() {
                    refused(&outcome, &["is not 0, 1 or 2"]);
                } else {
                    assert!(
                        outcome.is_ok(),
                        "a workload control request was refused: {outcome:?}"
                    );
                }
            }
            Some(C::UpdateConfig(update)) => {
                let faults: Vec<&str> = update
                    .timeouts
                    .iter()
                    .flat_map(|t| t.section_timeouts_ms.keys())
                    .filter_map(|name| section_name_fault(name))
                    .collect();
                if !faults.is_empty() {
                    return refused(&outcome, &faults);
                }
                // The monitor keeps the section timeouts of earlier
                // connections: this update may take it past the limit.
                match outcome {
                    Ok(ok) => {
                        let config = ok
                            .config
                            .as_ref()
                            .expect("an Ok to UpdateConfig carries the configuration");
                        let sections = config
                            .timeouts
                            .as_ref()
                            .map_or(0, |t| t.section_timeouts_ms.len());
                        assert!(
                            sections <= nodeipc_monitor::MAX_SECTIONS,
                            "{sections} section timeouts accepted"
                        );
                    }
                    Err(_) => refused(&outcome, &["section timeouts; at most"]),
                }
            }
        }
    }
}

/// What the monitor says of a section name it refuses (empty, or longer than
/// its limit); `None` for a name it takes.
fn section_name_fault(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("non-empty name")
    } else if name.len() > nodeipc_monitor::MAX_SECTION_NAME {
        Some("section name of")
    } else {
        None
    }
}

/// Whether `pid`'s chain of parents (`/proc/PID/stat`) reaches `ancestor`.
fn is_descendant_of(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    for _ in 0..64 {
        if current == ancestor {
            return true;
        }
        match nodeipc_fdpass::process_stat(current) {
            Ok(stat) if stat.ppid != 0 && stat.ppid != current => current = stat.ppid,
            _ => return false,
        }
    }
    false
}
