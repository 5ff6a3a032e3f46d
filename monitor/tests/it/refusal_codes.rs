//! Every `Error` the server sends carries a stable code beside its cause,
//! and the client hands it over (`Error::refusal_code`): a program tells a
//! spoofed pid from a busy slot without reading the words.

use std::io::Write;
use std::time::Duration;

use crate::common::{InProcess, config, raw};
use nodeipc_monitor::{ControlClient, MonitorClient, RankInfo, RefusalCode};
use nodeipc_proto::monitor as pb;
use nodeipc_testkit::Watchdog;

const CALL: Duration = Duration::from_secs(10);

/// The code and cause of the next reply, which must be an `Error`.
fn error_reply(stream: &mut std::os::unix::net::UnixStream) -> (pb::ErrorCode, String) {
    match raw::reply(stream) {
        pb::server_message::Msg::Error(e) => (e.code(), e.cause),
        other => panic!("expected an Error, got {other:?}"),
    }
}

#[test]
fn the_client_reports_the_code_of_each_refusal() {
    let _dog = Watchdog::new("refusal_codes_client", Duration::from_secs(60));
    let server = InProcess::start("mon-codes", config("{}"));
    let mut client = MonitorClient::connect(&server.socket, CALL).unwrap();
    let code = |e: nodeipc_monitor::Error| {
        assert!(e.is_refused(), "{e}");
        e.refusal_code().expect("a refusal has a code")
    };

    assert_eq!(
        code(client.heartbeat().unwrap_err()),
        RefusalCode::NotInitialized
    );
    let spoofed = RankInfo {
        pid: 1,
        ..RankInfo::this_process(0, 0)
    };
    let e = client.init(&spoofed).unwrap_err();
    assert!(
        e.refusal_cause().unwrap().contains("pid 1 is neither"),
        "{e}"
    );
    assert_eq!(code(e), RefusalCode::PidNotAllowed);
    let long_host = RankInfo {
        host: "h".repeat(300),
        ..RankInfo::this_process(0, 0)
    };
    assert_eq!(
        code(client.init(&long_host).unwrap_err()),
        RefusalCode::FieldTooLarge
    );

    client.init(&RankInfo::this_process(0, 0)).unwrap();
    let again = client.init(&RankInfo::this_process(0, 0)).unwrap_err();
    assert_eq!(code(again), RefusalCode::AlreadyRegistered);
    assert_eq!(
        code(client.end_section("x").unwrap_err()),
        RefusalCode::SectionNotOpen
    );
    client.start_section("x").unwrap();
    assert_eq!(
        code(client.start_section("x").unwrap_err()),
        RefusalCode::SectionAlreadyOpen
    );
    // Other errors have no refusal code.
    assert_eq!(client.heartbeat_fast().unwrap_err().refusal_code(), None);

    drop(client);
    let mut control = ControlClient::connect(&server.socket, CALL).unwrap();
    server.wait_status(CALL, |s| s.rank.is_none());
    assert_eq!(
        code(control.close_connection().unwrap_err()),
        RefusalCode::NoRankConnection
    );
    server.finish();
}

#[test]
fn frames_and_deadlines_are_refused_with_their_codes() {
    let _dog = Watchdog::new("refusal_codes_wire", Duration::from_secs(60));
    let server = InProcess::start(
        "mon-codes-wire",
        config(r#"{"first_message_timeout_ms": 800, "connection_wait_ms": 100}"#),
    );

    // Bytes that are no ClientMessage: refused, the connection kept.
    let mut rank = raw::connect(&server.socket);
    rank.write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).unwrap();
    assert_eq!(error_reply(&mut rank).0, pb::ErrorCode::Malformed);
    rank.write_all(&[0, 0, 0, 0]).unwrap();
    assert_eq!(error_reply(&mut rank).0, pb::ErrorCode::UnknownMessage);

    // A second client waits for the slot past its limit.
    let mut second = raw::connect(&server.socket);
    second
        .write_all(&raw::client_frame(pb::client_message::Msg::StatusQuery(
            pb::StatusQuery {},
        )))
        .unwrap();
    let (code, cause) = error_reply(&mut second);
    assert_eq!(code, pb::ErrorCode::RankSlotBusy, "{cause}");

    // The first never registers: closed at its deadline.
    let (code, cause) = error_reply(&mut rank);
    assert_eq!(code, pb::ErrorCode::FirstMessageDeadline, "{cause}");
    raw::read_to_close(&mut rank);

    // A prefix above the limit: refused, then closed.
    let mut big = raw::connect(&server.socket);
    big.write_all(&(1u32 << 20).to_le_bytes()).unwrap();
    let (code, cause) = error_reply(&mut big);
    assert_eq!(code, pb::ErrorCode::FrameTooLarge, "{cause}");
    raw::read_to_close(&mut big);

    // The control socket's own refusals.
    let mut control = raw::connect(&std::path::PathBuf::from(format!(
        "{}.control",
        server.socket.display()
    )));
    control.write_all(&[0, 0, 0, 0]).unwrap();
    let (code, cause) = error_reply(&mut control);
    assert_eq!(code, pb::ErrorCode::UnknownMessage, "{cause}");
    assert!(cause.contains("empty ControlRequest"), "{cause}");
    server.finish();
}
