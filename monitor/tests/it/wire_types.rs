//! A map field on a wire type its schema does not take is refused naming
//! the field, on both ends of the monitor's socket. prost alone does not
//! check a map field's wire type: it reads the bytes as an entry anyway, so
//! eight bytes sent as a `fixed64` become a section timeout nobody asked for.

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::time::Duration;

use crate::common::{InProcess, config, raw};
use nodeipc_monitor::{MAX_FRAME, MonitorClient, RankInfo};
use nodeipc_proto::monitor as pb;
use nodeipc_proto::{LEN_PREFIX, read_frame};
use nodeipc_testkit::{TempDir, Watchdog};
use prost::Message;

const CALL: Duration = Duration::from_secs(10);

/// `Timeouts` whose `section_timeouts_ms` (field 4) comes on wire type 1
/// (`fixed64`). Its eight bytes read as a length (7) and an entry — `"x"`
/// to 5 ms — when the wire type is not checked.
const MISTYPED_TIMEOUTS: [u8; 9] = [0x21, 0x07, 0x0a, 0x01, b'x', 0x10, 0x05, 0x10, 0x05];

/// The wrapping of `inner` as length-delimited field 1, `count` times.
fn in_field_1(inner: &[u8], count: usize) -> Vec<u8> {
    (0..count).fold(inner.to_vec(), |body, _| {
        let mut outer = vec![0x0a, u8::try_from(body.len()).expect("a short body")];
        outer.extend(body);
        outer
    })
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(body);
    frame
}

/// What the refusal must say: the message and the field, and the wire types.
const NAMED: &str = "Timeouts.section_timeouts_ms: UpdateConfig.timeouts: ClientMessage.msg: \
                     invalid wire type: SixtyFourBit (expected LengthDelimited)";

#[test]
fn regression_a_mistyped_map_in_update_config_is_refused_naming_the_field() {
    let _dog = Watchdog::new("mistyped_map_server", Duration::from_secs(60));
    // ClientMessage.update_config (field 4) { UpdateConfig.timeouts (1) { … } }
    let timeouts = in_field_1(&MISTYPED_TIMEOUTS, 1);
    let mut body = vec![0x22, u8::try_from(timeouts.len()).unwrap()];
    body.extend(&timeouts);
    // prost's own reading: an entry the sender never wrote.
    let invented = pb::ClientMessage::decode(body.as_slice()).expect("prost alone takes it");
    let Some(pb::client_message::Msg::UpdateConfig(update)) = invented.msg else {
        panic!("{invented:?}");
    };
    assert_eq!(
        update.timeouts.unwrap().section_timeouts_ms,
        [("x".to_owned(), 5)].into()
    );

    let server = InProcess::start("mon-wire-types", config("{}"));
    let mut rank = raw::connect(&server.socket);
    rank.write_all(&frame(&body)).unwrap();
    match raw::reply(&mut rank) {
        pb::server_message::Msg::Error(e) => {
            assert_eq!(e.code(), pb::ErrorCode::Malformed, "{}", e.cause);
            assert!(
                e.cause.starts_with(&format!(
                    "frame of {} bytes holds no valid message: ",
                    body.len() + LEN_PREFIX
                )) && e.cause.ends_with(NAMED),
                "{}",
                e.cause
            );
        }
        other => panic!("a mistyped map field was answered with {other:?}"),
    }
    // The connection keeps working, and no section timeout came of it.
    rank.write_all(&raw::client_frame(pb::client_message::Msg::UpdateConfig(
        pb::UpdateConfig { timeouts: None },
    )))
    .unwrap();
    match raw::reply(&mut rank) {
        pb::server_message::Msg::Ok(ok) => {
            let timeouts = ok.config.unwrap().timeouts.unwrap_or_default();
            assert!(timeouts.section_timeouts_ms.is_empty(), "{timeouts:?}");
        }
        other => panic!("expected Ok, got {other:?}"),
    }
    drop(rank);
    server.finish();
}

/// A monitor (here a fake one) whose answer to Init holds the mistyped map
/// in its configuration: the client refuses the answer naming the field
/// instead of taking a section timeout the monitor never set.
#[test]
fn regression_a_mistyped_map_in_the_answer_to_init_is_refused_naming_the_field() {
    let _dog = Watchdog::new("mistyped_map_client", Duration::from_secs(60));
    let dir = TempDir::new("mon-wire-types-client");
    let socket = dir.join("rank.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let fake = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(CALL)).unwrap();
        let init: pb::ClientMessage = read_frame(&mut stream, MAX_FRAME, &mut Vec::new()).unwrap();
        assert!(matches!(init.msg, Some(pb::client_message::Msg::Init(_))));
        // ServerMessage.ok { Ok.config { EffectiveConfig.timeouts { … } } }
        stream
            .write_all(&frame(&in_field_1(&MISTYPED_TIMEOUTS, 3)))
            .unwrap();
    });
    let mut client = MonitorClient::connect(&socket, CALL).unwrap();
    let error = client
        .init(&RankInfo::this_process(0, 0))
        .expect_err("an answer with a mistyped map field was taken");
    let text = error.to_string();
    assert!(
        text.contains(
            "Timeouts.section_timeouts_ms: EffectiveConfig.timeouts: Ok.config: \
             ServerMessage.msg: invalid wire type: SixtyFourBit (expected LengthDelimited)"
        ),
        "{text}"
    );
    fake.join().unwrap();
}
