//! A field on a wire type its schema does not take is refused naming the
//! message and the field — map fields included, which prost does not check
//! on its own (it reads whatever comes as an entry and falls out of step).

use nodeipc_proto::monitor::{ClientMessage, Timeouts, UpdateConfig, client_message};
use nodeipc_proto::{Error, KnownMessage, LEN_PREFIX, decode_frame, decode_message, read_frame};
use prost::Message;

/// The prefix of a frame holding `body`.
fn frame_of(body: &[u8]) -> Vec<u8> {
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(body);
    frame
}

/// The decode error of `frame` as an `M`, through the buffer and the stream
/// readers (which must agree).
fn refusal<M: KnownMessage + std::fmt::Debug>(frame: &[u8]) -> String {
    let from_buffer = match decode_frame::<M>(frame, usize::MAX) {
        Err(Error::Decode(e)) => e.to_string(),
        other => panic!("expected a decode error, got {other:?}"),
    };
    let mut stream = frame;
    let from_stream = match read_frame::<M>(&mut stream, usize::MAX, &mut Vec::new()) {
        Err(Error::Decode(e)) => e.to_string(),
        other => panic!("expected a decode error, got {other:?}"),
    };
    assert_eq!(from_buffer, from_stream);
    from_buffer
}

/// The `frame` fuzz target's input `c7 4d 09 00 00 00 21 00 00 00 00 00 00 00
/// 00`: message type 199 % 35 (`Timeouts`), no limit, then a frame whose
/// field 4 (`section_timeouts_ms`, a map) comes as a `fixed64`. prost read
/// its first zero as an entry's length and the next zero as a key:
/// "invalid tag value: 0", naming no field.
#[test]
fn regression_a_map_field_on_a_fixed64_is_refused_naming_the_field() {
    let input = [
        0xc7, 0x4d, 0x09, 0x00, 0x00, 0x00, 0x21, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    let frame = &input[2..];
    assert_eq!(frame.len(), LEN_PREFIX + 9);
    assert_eq!(
        refusal::<Timeouts>(frame),
        "failed to decode Protobuf message: Timeouts.section_timeouts_ms: \
         invalid wire type: SixtyFourBit (expected LengthDelimited)"
    );
    // What prost alone says: the fault, but not where.
    let bare = Timeouts::decode(&frame[LEN_PREFIX..])
        .unwrap_err()
        .to_string();
    assert_eq!(
        bare,
        "failed to decode Protobuf message: invalid tag value: 0"
    );
}

/// Every wire type but length-delimited, for the map, is refused by name.
#[test]
fn a_map_field_on_any_other_wire_type_is_refused_naming_the_field() {
    for (body, wire) in [
        (&[0x20, 0x00][..], "Varint"),
        (&[0x21, 0, 0, 0, 0, 0, 0, 0, 0][..], "SixtyFourBit"),
        (&[0x25, 0, 0, 0, 0][..], "ThirtyTwoBit"),
        (&[0x23, 0x24][..], "StartGroup"),
        (&[0x24][..], "EndGroup"),
    ] {
        let text = refusal::<Timeouts>(&frame_of(body));
        assert_eq!(
            text,
            format!(
                "failed to decode Protobuf message: Timeouts.section_timeouts_ms: \
                 invalid wire type: {wire} (expected LengthDelimited)"
            ),
            "{body:02x?}"
        );
    }
}

/// prost alone accepts some of these and makes up an entry the sender never
/// wrote (a varint 2 read as a length, the next field read as the entry),
/// where other protobuf readers skip or refuse the field.
#[test]
fn a_map_field_on_a_varint_is_not_read_as_an_entry() {
    let body = [0x20, 0x02, 0x0a, 0x00];
    let invented = Timeouts::decode(&body[..]).unwrap();
    assert_eq!(invented.section_timeouts_ms.len(), 1, "prost's own reading");
    let err = decode_message::<Timeouts>(&body).unwrap_err();
    assert!(
        err.to_string()
            .contains("Timeouts.section_timeouts_ms: invalid wire type"),
        "{err}"
    );
}

/// Deep inside: the path names each message and field, innermost first,
/// as prost's own errors do.
#[test]
fn a_mistyped_map_deep_in_a_message_names_the_whole_path() {
    // ClientMessage.update_config (4) { UpdateConfig.timeouts (1) { field 4 varint 0 } }
    let body = [0x22, 0x04, 0x0a, 0x02, 0x20, 0x00];
    assert_eq!(
        refusal::<ClientMessage>(&frame_of(&body)),
        "failed to decode Protobuf message: Timeouts.section_timeouts_ms: \
         UpdateConfig.timeouts: ClientMessage.msg: invalid wire type: Varint (expected LengthDelimited)"
    );
}

/// Maps on their own wire type, and everything else, decode as before.
#[test]
fn well_typed_maps_still_decode() {
    let message = ClientMessage {
        msg: Some(client_message::Msg::UpdateConfig(UpdateConfig {
            timeouts: Some(Timeouts {
                heartbeat_ms: Some(5),
                section_timeouts_ms: [("step".to_owned(), 100), ("ckpt".to_owned(), 0)].into(),
                ..Timeouts::default()
            }),
        })),
    };
    let frame = nodeipc_proto::encode_frame_to_vec(&message).unwrap();
    assert_eq!(
        decode_frame::<ClientMessage>(&frame, usize::MAX).unwrap(),
        message
    );
    assert_eq!(
        decode_message::<ClientMessage>(&frame[LEN_PREFIX..]).unwrap(),
        message
    );
}
