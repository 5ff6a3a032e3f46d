//! The wire protocol against a server on a thread: malformed and oversize
//! frames, messages out of order, sections, configuration updates, and a
//! client that does not read its replies. No timeouts are configured: the
//! rank here is the test process itself.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::common::InProcess;
use nodeipc_monitor::{
    ControlClient, MAX_FRAME, MonitorClient, MonitorConfig, RankInfo, RankState, TimeoutUpdate,
};
use nodeipc_proto::monitor::{self as pb, client_message::Msg, server_message};
use nodeipc_proto::{encode_frame_to_vec, read_frame};
use nodeipc_testkit::Watchdog;

const T: Duration = Duration::from_secs(10);

fn quiet() -> MonitorConfig {
    MonitorConfig {
        check_interval: Duration::from_millis(50),
        ..MonitorConfig::default()
    }
}

/// A client speaking raw frames.
struct Raw {
    stream: UnixStream,
    scratch: Vec<u8>,
}

impl Raw {
    fn connect(server: &InProcess) -> Raw {
        let stream = UnixStream::connect(&server.socket).unwrap();
        stream.set_read_timeout(Some(T)).unwrap();
        Raw {
            stream,
            scratch: Vec::new(),
        }
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    fn send(&mut self, msg: Msg) {
        let frame = encode_frame_to_vec(&pb::ClientMessage { msg: Some(msg) }).unwrap();
        self.send_bytes(&frame);
    }

    fn recv(&mut self) -> server_message::Msg {
        let reply: pb::ServerMessage =
            read_frame(&mut self.stream, MAX_FRAME, &mut self.scratch).unwrap();
        reply.msg.expect("a message in the reply")
    }

    fn call(&mut self, msg: Msg) -> server_message::Msg {
        self.send(msg);
        self.recv()
    }

    fn expect_error(&mut self, msg: Msg, fragment: &str) {
        match self.call(msg) {
            server_message::Msg::Error(e) => {
                assert!(
                    e.cause.contains(fragment),
                    "{:?} lacks {fragment:?}",
                    e.cause
                )
            }
            other => panic!("expected Error with {fragment:?}, got {other:?}"),
        }
    }

    fn expect_ok(&mut self, msg: Msg) -> pb::Ok {
        match self.call(msg) {
            server_message::Msg::Ok(ok) => ok,
            other => panic!("expected Ok, got {other:?}"),
        }
    }

    fn init(&mut self) -> pb::Ok {
        self.expect_ok(Msg::Init(pb::Init {
            rank: Some(pb::RankInfo {
                global_rank: 2,
                local_rank: 0,
                pid: std::process::id(),
                host: "test".into(),
            }),
            want_heartbeat_region: false,
        }))
    }

    fn status(&mut self) -> pb::Status {
        match self.call(Msg::StatusQuery(pb::StatusQuery {})) {
            server_message::Msg::Status(s) => s,
            other => panic!("expected Status, got {other:?}"),
        }
    }

    fn section(name: &str, action: pb::SectionAction) -> Msg {
        Msg::Section(pb::Section {
            name: name.into(),
            action: action.into(),
        })
    }
}

#[test]
fn a_malformed_frame_gets_an_error_and_the_connection_keeps_working() {
    let _dog = Watchdog::new("malformed_frame", Duration::from_secs(60));
    let server = InProcess::start("mon-malformed", quiet());
    let mut raw = Raw::connect(&server);
    // A length that fits, bytes that are no protobuf (field 0 is invalid).
    raw.send_bytes(&[3, 0, 0, 0, 0x00, 0xFF, 0xFF]);
    match raw.recv() {
        server_message::Msg::Error(e) => {
            assert!(
                e.cause.contains("frame of 7 bytes holds no valid message"),
                "{}",
                e.cause
            )
        }
        other => panic!("{other:?}"),
    }
    // An empty frame decodes to an empty ClientMessage: refused, named.
    raw.send_bytes(&[0, 0, 0, 0]);
    match raw.recv() {
        server_message::Msg::Error(e) => {
            assert!(e.cause.contains("empty ClientMessage"), "{}", e.cause)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(raw.status().state, pb::MonitorState::Waiting as i32);
    raw.init();
    assert_eq!(raw.status().state, pb::MonitorState::Initialized as i32);
    server.finish();
}

#[test]
fn an_oversize_length_gets_an_error_then_the_server_serves_the_next_client() {
    let _dog = Watchdog::new("oversize", Duration::from_secs(60));
    let server = InProcess::start("mon-oversize", quiet());
    for announced in [u32::MAX, (MAX_FRAME - 3) as u32] {
        let mut raw = Raw::connect(&server);
        raw.init();
        raw.send_bytes(&announced.to_le_bytes());
        match raw.recv() {
            server_message::Msg::Error(e) => assert!(
                e.cause.contains(&format!(
                    "frame of {} bytes exceeds the limit of {MAX_FRAME} bytes",
                    u64::from(announced) + 4
                )),
                "{}",
                e.cause
            ),
            other => panic!("{other:?}"),
        }
        // Then the server closes the connection: the stream is out of step.
        let mut rest = Vec::new();
        raw.stream.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        // And serves the next client; the lost connection cleared the rank.
        let status = server.wait_status(T, |s| s.state == RankState::Restarting);
        assert!(status.rank.is_none());
    }
    // The largest frame allowed is read and answered (here: refused for
    // what it says, not for its size).
    let mut raw = Raw::connect(&server);
    raw.init();
    let name = "n".repeat(MAX_FRAME - 4 - 10);
    let frame = encode_frame_to_vec(&pb::ClientMessage {
        msg: Some(Raw::section(&name, pb::SectionAction::Open)),
    })
    .unwrap();
    assert!(
        frame.len() <= MAX_FRAME && frame.len() > MAX_FRAME - 16,
        "{}",
        frame.len()
    );
    raw.send_bytes(&frame);
    match raw.recv() {
        server_message::Msg::Error(e) => {
            assert!(
                e.cause
                    .contains("section name of 65522 bytes exceeds the cap of 256 bytes"),
                "{}",
                e.cause
            )
        }
        other => panic!("{other:?}"),
    }
    // The largest state a heartbeat may carry comes back in the status.
    let state = vec![7u8; nodeipc_monitor::MAX_STATE];
    raw.expect_ok(Msg::Heartbeat(pb::Heartbeat {
        state: Some(state.clone()),
    }));
    assert_eq!(raw.status().last_state, Some(state));
    raw.expect_error(
        Msg::Heartbeat(pb::Heartbeat {
            state: Some(vec![0; nodeipc_monitor::MAX_STATE + 1]),
        }),
        "heartbeat state of 16385 bytes exceeds the cap of 16384 bytes",
    );
    assert!(server.log_text().contains("exceeds the limit"));
    server.finish();
}

#[test]
fn a_client_that_hangs_up_mid_frame_does_not_disturb_the_server() {
    let _dog = Watchdog::new("mid_frame", Duration::from_secs(60));
    let server = InProcess::start("mon-midframe", quiet());
    let mut raw = Raw::connect(&server);
    raw.send_bytes(&[100, 0, 0, 0, 1, 2, 3]);
    drop(raw);
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    client.heartbeat().unwrap();
    server.finish();
}

#[test]
fn messages_out_of_order_are_refused_with_a_cause() {
    let _dog = Watchdog::new("out_of_order", Duration::from_secs(60));
    let server = InProcess::start("mon-order", quiet());
    let mut raw = Raw::connect(&server);
    raw.expect_error(
        Msg::Heartbeat(pb::Heartbeat::default()),
        "Heartbeat before Init",
    );
    raw.expect_error(
        Raw::section("s", pb::SectionAction::Open),
        "Section before Init",
    );
    raw.expect_error(Msg::Init(pb::Init::default()), "Init without rank info");
    // UpdateConfig and StatusQuery are fine before Init.
    let ok = raw.expect_ok(Msg::UpdateConfig(pb::UpdateConfig::default()));
    assert!(ok.config.is_some());
    raw.init();
    raw.expect_error(
        Msg::Init(pb::Init::default()),
        "already registered as global rank 2",
    );
    raw.expect_ok(Msg::Heartbeat(pb::Heartbeat {
        state: Some(b"step 9".to_vec()),
    }));
    let status = raw.status();
    assert_eq!(status.state, pb::MonitorState::Running as i32);
    assert_eq!(status.heartbeats, 1);
    assert_eq!(status.last_state.as_deref(), Some(&b"step 9"[..]));
    server.finish();
}

#[test]
fn sections_open_close_and_close_all_follow_the_rules() {
    let _dog = Watchdog::new("sections", Duration::from_secs(60));
    let server = InProcess::start("mon-sections", quiet());
    let mut raw = Raw::connect(&server);
    raw.init();
    use pb::SectionAction::{Close, CloseAll, Open, Unspecified};
    raw.expect_ok(Raw::section("", CloseAll)); // none open: fine
    raw.expect_ok(Raw::section("load", Open));
    raw.expect_ok(Raw::section("step", Open));
    raw.expect_error(
        Raw::section("step", Open),
        "section \"step\" is already open",
    );
    raw.expect_error(
        Raw::section("save", Close),
        "section \"save\" is not open (open: [load, step])",
    );
    raw.expect_error(Raw::section("", Open), "non-empty name");
    raw.expect_error(
        Raw::section("x", Unspecified),
        "is not OPEN (1), CLOSE (2) or CLOSE_ALL (3)",
    );
    raw.expect_error(
        Msg::Section(pb::Section {
            name: "x".into(),
            action: 42,
        }),
        "section action 42",
    );
    let status = raw.status();
    let open: Vec<&str> = status
        .open_sections
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(open, ["load", "step"]);
    assert_eq!(status.ms_out_of_section, None);
    raw.expect_ok(Raw::section("load", Close));
    raw.expect_error(Raw::section("load", Close), "not open (open: [step])");
    raw.expect_ok(Raw::section("", CloseAll));
    let status = raw.status();
    assert!(status.open_sections.is_empty());
    assert!(status.ms_out_of_section.is_some());
    server.finish();
}

#[test]
fn update_config_keeps_unset_fields_and_zero_removes() {
    let _dog = Watchdog::new("update_config", Duration::from_secs(60));
    let mut config = quiet();
    config.timeouts.heartbeat = Some(Duration::from_secs(60));
    config.timeouts.initial_heartbeat = Some(Duration::from_secs(90));
    config
        .timeouts
        .sections
        .insert("a".into(), Duration::from_secs(5));
    config
        .timeouts
        .sections
        .insert("b".into(), Duration::from_secs(6));
    let server = InProcess::start("mon-update", config);
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    let initial = client.init(&RankInfo::this_process(0, 0)).unwrap();
    assert_eq!(initial.timeouts.heartbeat, Some(Duration::from_secs(60)));
    assert_eq!(initial.termination_signal, libc::SIGKILL);
    let effective = client
        .send_timeouts(&TimeoutUpdate {
            heartbeat: Some(Duration::from_secs(30)),
            initial_heartbeat: Some(Duration::ZERO),
            out_of_section: None,
            sections: [
                ("a".to_owned(), Duration::ZERO),
                ("c".to_owned(), Duration::from_millis(700)),
            ]
            .into(),
        })
        .unwrap();
    let t = &effective.timeouts;
    assert_eq!(t.heartbeat, Some(Duration::from_secs(30)));
    assert_eq!(t.initial_heartbeat, None);
    assert_eq!(t.out_of_section, None);
    assert_eq!(
        t.sections,
        [
            ("b".to_owned(), Duration::from_secs(6)),
            ("c".to_owned(), Duration::from_millis(700))
        ]
        .into()
    );
    // A bad section name changes nothing.
    let refused = client
        .send_timeouts(&TimeoutUpdate {
            heartbeat: Some(Duration::from_secs(1)),
            sections: [("".to_owned(), Duration::from_secs(1))].into(),
            ..TimeoutUpdate::default()
        })
        .unwrap_err();
    assert!(
        refused.refusal_cause().unwrap().contains("non-empty name"),
        "{refused}"
    );
    let status = client.status().unwrap();
    assert_eq!(status.timeouts.heartbeat_ms, Some(30_000));
    assert_eq!(status.timeouts.sections_ms.len(), 2);
    server.finish();
}

#[test]
fn skipped_section_replies_keep_the_stream_in_step() {
    let _dog = Watchdog::new("skip_section_replies", Duration::from_secs(60));
    let server = InProcess::start(
        "mon-skip",
        MonitorConfig {
            skip_section_replies: true,
            ..quiet()
        },
    );
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    let config = client.init(&RankInfo::this_process(0, 0)).unwrap();
    assert!(config.skip_section_replies);
    client.start_section("step").unwrap();
    // Refused, but only logged: no reply comes.
    client.start_section("step").unwrap();
    client.heartbeat().unwrap();
    let status = client.status().unwrap();
    assert_eq!(status.open_sections.len(), 1);
    assert_eq!(status.heartbeats, 1);
    client.end_section("step").unwrap();
    assert!(client.status().unwrap().open_sections.is_empty());
    assert!(
        server
            .log_text()
            .contains("section message refused (no reply sent)"),
        "{}",
        server.log_text()
    );
    server.finish();
}

#[test]
fn a_client_that_never_reads_its_replies_does_not_block_the_server() {
    let _dog = Watchdog::new("unread_replies", Duration::from_secs(60));
    let server = InProcess::start("mon-flood", quiet());
    let mut raw = Raw::connect(&server);
    raw.init();
    let beat = encode_frame_to_vec(&pb::ClientMessage {
        msg: Some(Msg::Heartbeat(pb::Heartbeat::default())),
    })
    .unwrap();
    raw.stream.set_nonblocking(true).unwrap();
    // Write heartbeats until both directions' buffers are full.
    let start = Instant::now();
    let mut sent = 0usize;
    let mut stalled = 0;
    while stalled < 50 && start.elapsed() < Duration::from_secs(10) {
        match raw.stream.write(&beat) {
            Ok(n) => {
                sent += n;
                stalled = 0;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                stalled += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("{e}"),
        }
    }
    // The server stops reading from a client whose reply cannot go out
    // (backpressure): the client's writes stall once the kernel's queues
    // are full, after a few hundred frames.
    assert!(
        stalled >= 50 && sent > 1_000,
        "{sent} bytes went, writes stalled {stalled} times"
    );
    // The loop still answers the launcher at once.
    let asked = Instant::now();
    let status = ControlClient::connect(&server.socket, T)
        .unwrap()
        .status()
        .unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(status.state, RankState::Running);
    assert!(status.heartbeats > 0);
    drop(raw);
    server.finish();
}

#[test]
fn end_all_sections_closes_every_open_section_and_is_fine_with_none_open() {
    let _dog = Watchdog::new("end_all_sections", Duration::from_secs(60));
    let server = InProcess::start("mon-endall", quiet());
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    let open_names = |client: &mut MonitorClient| -> Vec<String> {
        client
            .status()
            .unwrap()
            .open_sections
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    // Before Init there is nothing to close: refused, naming why.
    let refused = client.end_all_sections().unwrap_err();
    assert!(
        refused
            .refusal_cause()
            .is_some_and(|c| c.contains("Section before Init")),
        "{refused}"
    );
    client.init(&RankInfo::this_process(0, 0)).unwrap();

    // None open: fine, and still none open.
    client.end_all_sections().unwrap();
    assert_eq!(open_names(&mut client), Vec::<String>::new());

    for name in ["load", "step", "save"] {
        client.start_section(name).unwrap();
    }
    assert_eq!(open_names(&mut client), ["load", "step", "save"]);
    client.end_all_sections().unwrap();
    let status = client.status().unwrap();
    assert!(
        status.open_sections.is_empty(),
        "sections left open: {:?}",
        status.open_sections
    );
    assert!(status.ms_out_of_section.is_some(), "{status:?}");
    // Each one is closed for real: closing it again is refused, opening it again works.
    let again = client.end_section("step").unwrap_err();
    assert!(
        again
            .refusal_cause()
            .is_some_and(|c| c.contains("section \"step\" is not open")),
        "{again}"
    );
    client.start_section("step").unwrap();
    assert_eq!(open_names(&mut client), ["step"]);
    client.end_all_sections().unwrap();
    // Twice in a row: the second finds none open, which is fine.
    client.end_all_sections().unwrap();
    assert_eq!(open_names(&mut client), Vec::<String>::new());
    server.finish();
}

#[test]
fn end_all_sections_without_replies_closes_every_section_too() {
    let _dog = Watchdog::new("end_all_sections_skipped", Duration::from_secs(60));
    let server = InProcess::start(
        "mon-endall-skip",
        MonitorConfig {
            skip_section_replies: true,
            ..quiet()
        },
    );
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    assert!(
        client
            .init(&RankInfo::this_process(0, 0))
            .unwrap()
            .skip_section_replies
    );
    client.end_all_sections().unwrap();
    client.start_section("load").unwrap();
    client.start_section("step").unwrap();
    assert_eq!(client.status().unwrap().open_sections.len(), 2);
    client.end_all_sections().unwrap();
    // The status query is answered after the unanswered CloseAll: in order.
    let status = client.status().unwrap();
    assert!(
        status.open_sections.is_empty(),
        "sections left open: {:?}",
        status.open_sections
    );
    assert!(
        !server.log_text().contains("refused"),
        "{}",
        server.log_text()
    );
    server.finish();
}

#[test]
fn a_client_that_shuts_down_its_sending_side_still_gets_every_answer() {
    let _dog = Watchdog::new("half close", Duration::from_secs(120));
    let server = InProcess::start("mon-half-close", quiet());
    let raw = Raw::connect(&server);
    // Enough queries that the answers fill the socket before the client
    // reads any: the server must keep them for a client that said EOF.
    const QUERIES: usize = 15_000;
    let frame = encode_frame_to_vec(&pb::ClientMessage {
        msg: Some(Msg::StatusQuery(pb::StatusQuery {})),
    })
    .unwrap();
    let mut writer = raw.stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        writer.write_all(&frame.repeat(QUERIES)).unwrap();
        writer.shutdown(std::net::Shutdown::Write).unwrap();
    });
    // Read nothing until everything is sent and the server has seen the
    // end of file with answers still waiting for room in the socket.
    sending.join().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut reader = raw.stream;
    let mut scratch = Vec::new();
    let mut answers = 0;
    loop {
        match read_frame::<pb::ServerMessage>(&mut reader, MAX_FRAME, &mut scratch) {
            Ok(reply) => {
                assert!(
                    matches!(reply.msg, Some(server_message::Msg::Status(_))),
                    "answer {answers}: {reply:?}"
                );
                answers += 1;
            }
            // The server closes once everything is answered.
            Err(nodeipc_proto::Error::Closed) => break,
            Err(e) => panic!("after {answers} answers: {e}"),
        }
    }
    assert_eq!(answers, QUERIES, "one answer for every query");
    server.finish();
}

#[test]
fn the_init_and_update_replies_carry_the_check_interval() {
    let _dog = Watchdog::new("check_interval_reply", Duration::from_secs(60));
    let server = InProcess::start(
        "mon-interval",
        MonitorConfig {
            check_interval: Duration::from_millis(250),
            ..quiet()
        },
    );
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    let config = client.init(&RankInfo::this_process(0, 0)).unwrap();
    assert_eq!(config.check_interval, Some(Duration::from_millis(250)));
    let updated = client.send_timeouts(&Default::default()).unwrap();
    assert_eq!(updated.check_interval, Some(Duration::from_millis(250)));
}

#[test]
fn a_workload_control_request_is_kept_for_the_launcher_the_most_severe_standing() {
    let _dog = Watchdog::new("workload_control", Duration::from_secs(60));
    let server = InProcess::start("mon-workload", quiet());
    let status = || server.wait_status(Duration::from_secs(5), |_| true);
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    let early = client.workload_control(2, "before Init").unwrap_err();
    assert!(early.is_refused(), "{early}");
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    let bad = client.workload_control(7, "no such action").unwrap_err();
    assert!(
        bad.refusal_cause().unwrap().contains("workload action 7"),
        "{bad}"
    );
    assert_eq!(status().workload_request, None);
    client.workload_control(0, "carry on").unwrap();
    assert_eq!(status().workload_request, Some((0, "carry on".into())));
    client.workload_control(2, "data exhausted").unwrap();
    client.workload_control(1, "bad node").unwrap();
    let long = "x".repeat(10_000);
    client.workload_control(0, &long).unwrap();
    // Shutting down stands over excluding and continuing.
    assert_eq!(
        status().workload_request,
        Some((2, "data exhausted".into()))
    );
    drop(client);
    // Kept once the rank is gone, for the launcher; a new Init clears it.
    let gone = server.wait_status(Duration::from_secs(10), |s| {
        !matches!(s.state, RankState::Running | RankState::Initialized)
    });
    assert_eq!(gone.workload_request, Some((2, "data exhausted".into())));
    let mut again = MonitorClient::connect(&server.socket, T).unwrap();
    again.init(&RankInfo::this_process(0, 0)).unwrap();
    assert_eq!(status().workload_request, None);
}
