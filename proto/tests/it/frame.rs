//! Framing on buffers: exact fits, one byte short, truncated frames, lengths
//! over the caller's maximum and over the buffer, garbage, and the error
//! messages and conversions.

use std::io;

use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteType, Finalize, ForwardRequest, PdErrorCode, PullKvResult,
    execute_request,
};
use nodeipc_proto::{
    Error, LEN_PREFIX, decode_frame, encode_frame, encode_frame_to_vec, frame_len, write_frame,
};
use prost::Message;
use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType};

fn request(input_len: usize) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute.into(),
        sequence: 1,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![1, 2, 3],
            input: (vec![0x5A; input_len]).into(),
        })),
    }
}

/// A frame announcing `len` bytes, followed by `body`.
fn frame_with(len: u32, body: &[u8]) -> Vec<u8> {
    let mut frame = len.to_le_bytes().to_vec();
    frame.extend_from_slice(body);
    frame
}

/// A frame holding exactly `body`.
fn frame_of(body: &[u8]) -> Vec<u8> {
    frame_with(body.len() as u32, body)
}

#[test]
fn buffer_of_exactly_the_frame_size_holds_it() {
    for input_len in [0, 1, 127, 128, 4096] {
        let msg = request(input_len);
        let size = LEN_PREFIX + msg.encoded_len();
        let mut buf = vec![0; size];
        assert_eq!(encode_frame(&msg, &mut buf).unwrap(), size);
        assert_eq!(decode_frame::<ExecuteRequest>(&buf, size).unwrap(), msg);
    }
}

#[test]
fn larger_buffer_is_untouched_past_the_frame() {
    let msg = request(10);
    let mut buf = vec![0xEE; 200];
    let size = encode_frame(&msg, &mut buf).unwrap();
    assert!(buf[size..].iter().all(|&b| b == 0xEE));
}

#[test]
fn one_byte_short_is_too_large_and_leaves_the_buffer_untouched() {
    for input_len in [0, 1, 127, 128, 4096] {
        let msg = request(input_len);
        let size = LEN_PREFIX + msg.encoded_len();
        let mut buf = vec![0xEE; size - 1];
        match encode_frame(&msg, &mut buf) {
            Err(Error::TooLarge { size: s, max }) => {
                assert_eq!((s, max), (size, size - 1));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(buf.iter().all(|&b| b == 0xEE), "buffer was written to");
    }
}

#[test]
fn every_buffer_shorter_than_the_frame_is_refused() {
    let msg = request(20);
    let size = LEN_PREFIX + msg.encoded_len();
    for len in 0..size {
        let mut buf = vec![0xEE; len];
        assert!(matches!(
            encode_frame(&msg, &mut buf),
            Err(Error::TooLarge { size: s, max }) if s == size && max == len
        ));
        assert!(buf.iter().all(|&b| b == 0xEE));
    }
}

#[test]
fn empty_message_still_needs_room_for_the_prefix() {
    let mut buf = [0xEE; 3];
    assert!(matches!(
        encode_frame(&Finalize::default(), &mut buf),
        Err(Error::TooLarge { size: 4, max: 3 })
    ));
    assert_eq!(buf, [0xEE; 3]);
    assert!(matches!(
        encode_frame(&Finalize::default(), &mut []),
        Err(Error::TooLarge { size: 4, max: 0 })
    ));
}

#[test]
fn buffer_shorter_than_the_prefix_is_truncated() {
    for have in 0..LEN_PREFIX {
        let buf = vec![0; have];
        assert!(matches!(
            frame_len(&buf, 1024),
            Err(Error::Truncated { need: LEN_PREFIX, have: h }) if h == have
        ));
        assert!(matches!(
            decode_frame::<Finalize>(&buf, 1024),
            Err(Error::Truncated { need: LEN_PREFIX, have: h }) if h == have
        ));
    }
}

#[test]
fn every_cut_of_a_frame_is_truncated() {
    let frame = encode_frame_to_vec(&request(30)).unwrap();
    for have in LEN_PREFIX..frame.len() {
        let cut = &frame[..have];
        assert!(matches!(
            decode_frame::<ExecuteRequest>(cut, usize::MAX),
            Err(Error::Truncated { need, have: h }) if need == frame.len() && h == have
        ));
        assert!(matches!(
            frame_len(cut, usize::MAX),
            Err(Error::Truncated { need, .. }) if need == frame.len()
        ));
    }
}

#[test]
fn frame_at_the_maximum_is_accepted_and_one_over_is_refused() {
    let frame = encode_frame_to_vec(&request(30)).unwrap();
    let size = frame.len();
    assert_eq!(frame_len(&frame, size).unwrap(), size);
    assert!(decode_frame::<ExecuteRequest>(&frame, size).is_ok());
    assert!(matches!(
        decode_frame::<ExecuteRequest>(&frame, size - 1),
        Err(Error::TooLarge { size: s, max }) if s == size && max == size - 1
    ));
    // A zero maximum refuses even the empty message's frame.
    assert!(matches!(
        decode_frame::<Finalize>(&[0, 0, 0, 0], 0),
        Err(Error::TooLarge { size: 4, max: 0 })
    ));
}

/// The maximum is checked before the buffer: a peer announcing a huge
/// message learns it is too large, not that its bytes have not arrived yet.
#[test]
fn length_over_the_maximum_is_refused_before_looking_at_the_buffer() {
    let frame = frame_with(1000, &[]);
    assert!(matches!(
        frame_len(&frame, 100),
        Err(Error::TooLarge {
            size: 1004,
            max: 100
        })
    ));
    assert!(matches!(
        decode_frame::<ExecuteRequest>(&frame, 100),
        Err(Error::TooLarge {
            size: 1004,
            max: 100
        })
    ));
}

#[test]
fn length_over_the_buffer_is_truncated() {
    let frame = frame_with(100, &[0; 6]);
    assert!(matches!(
        decode_frame::<ExecuteRequest>(&frame, 4096),
        Err(Error::Truncated {
            need: 104,
            have: 10
        })
    ));
}

#[test]
fn largest_prefix_is_handled_without_overflow() {
    let frame = frame_with(u32::MAX, &[1, 2, 3]);
    let size = u32::MAX as usize + LEN_PREFIX;
    assert!(matches!(
        decode_frame::<ExecuteRequest>(&frame, usize::MAX),
        Err(Error::Truncated { need, have: 7 }) if need == size
    ));
    assert!(matches!(
        frame_len(&frame, 1 << 20),
        Err(Error::TooLarge { size: s, max }) if s == size && max == 1 << 20
    ));
}

#[test]
fn garbage_bodies_are_decode_errors() {
    let bodies: [&[u8]; 7] = [
        &[0x08],             // field 1 varint without its value
        &[0x00],             // field number 0
        &[0x0F],             // wire type 7 does not exist
        &[0x0A, 0x00],       // field 1 (an enum) sent length-delimited
        &[0x5A, 0x05, 0x01], // field 11 announcing 5 bytes, 1 present
        &[
            0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01,
        ], // 11-byte varint
        &[0xFF; 16],
    ];
    for body in bodies {
        let frame = frame_of(body);
        match decode_frame::<ExecuteRequest>(&frame, 64) {
            Err(Error::Decode(_)) => {}
            other => panic!("{body:02x?}: expected Decode, got {other:?}"),
        }
    }
    // A string field must hold UTF-8.
    assert!(matches!(
        decode_frame::<Finalize>(&frame_of(&[0x0A, 0x01, 0xFF]), 64),
        Err(Error::Decode(_))
    ));
}

/// Fields a newer peer adds are skipped by an older reader.
#[test]
fn unknown_fields_are_skipped() {
    // field 111 varint 1, then field 2 (sequence) varint 9.
    let frame = frame_of(&[0xF8, 0x06, 0x01, 0x10, 0x09]);
    let msg = decode_frame::<ExecuteRequest>(&frame, 64).unwrap();
    assert_eq!(
        msg,
        ExecuteRequest {
            sequence: 9,
            ..ExecuteRequest::default()
        }
    );
}

/// Enum values a newer peer adds survive as numbers. The generated getter
/// falls back to the zero value, which for `PdErrorCode` is success: callers
/// that must treat unknown codes as failures use `try_from`.
#[test]
fn unknown_enum_values_are_kept_as_numbers() {
    let request = decode_frame::<ExecuteRequest>(&frame_of(&[0x08, 0x63]), 64).unwrap();
    assert_eq!(request.execute_type, 99);
    assert_eq!(request.execute_type(), ExecuteType::Unspecified);

    let result = decode_frame::<PullKvResult>(&frame_of(&[0x08, 0x01, 0x10, 0x63]), 64).unwrap();
    assert_eq!(result.pd_error_code, 99);
    assert_eq!(result.pd_error_code(), PdErrorCode::PdSuccess);
    assert!(PdErrorCode::try_from(result.pd_error_code).is_err());
}

/// A message that claims to need one byte more than a `u32` can announce,
/// without allocating anything like it.
#[derive(Debug, Default)]
struct Oversized;

impl Message for Oversized {
    fn encode_raw(&self, _buf: &mut impl BufMut) {
        panic!("a message too large for a frame must never be encoded");
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        u32::MAX as usize + 1
    }

    fn clear(&mut self) {}
}

#[test]
fn message_longer_than_a_u32_is_too_large() {
    let size = u32::MAX as usize + 1 + LEN_PREFIX;
    let mut buf = [0xEE; 16];
    assert!(matches!(
        encode_frame(&Oversized, &mut buf),
        Err(Error::TooLarge { size: s, max: 16 }) if s == size
    ));
    assert_eq!(buf, [0xEE; 16]);
    assert!(matches!(
        encode_frame_to_vec(&Oversized),
        Err(Error::TooLarge { size: s, max }) if s == size && max == size - 1
    ));
    let mut out = Vec::new();
    assert!(matches!(
        write_frame(&mut out, &Oversized),
        Err(Error::TooLarge { .. })
    ));
    assert!(out.is_empty());
}

#[test]
fn error_messages_carry_the_numbers() {
    let too_large = Error::TooLarge {
        size: 1004,
        max: 100,
    };
    assert_eq!(
        too_large.to_string(),
        "frame of 1004 bytes exceeds the limit of 100 bytes"
    );
    let truncated = Error::Truncated {
        need: 104,
        have: 10,
    };
    assert_eq!(
        truncated.to_string(),
        "truncated frame: 104 bytes needed, only 10 available"
    );
    let decode = decode_frame::<ExecuteRequest>(&frame_of(&[0x08]), 64).unwrap_err();
    assert!(
        decode
            .to_string()
            .starts_with("frame holds no valid message: ")
    );
    assert!(std::error::Error::source(&decode).is_some());
}

#[test]
fn errors_convert_into_io_errors_of_the_closest_kind() {
    let io_error: io::Error = Error::Io(io::Error::from_raw_os_error(32)).into();
    assert_eq!(io_error.raw_os_error(), Some(32));

    let cases = [
        (Error::Closed, io::ErrorKind::UnexpectedEof),
        (
            Error::Truncated { need: 8, have: 5 },
            io::ErrorKind::UnexpectedEof,
        ),
        (
            Error::TooLarge { size: 9, max: 8 },
            io::ErrorKind::InvalidData,
        ),
        (
            decode_frame::<ExecuteRequest>(&frame_of(&[0x00]), 64).unwrap_err(),
            io::ErrorKind::InvalidData,
        ),
    ];
    for (error, kind) in cases {
        let message = error.to_string();
        let io_error = io::Error::from(error);
        assert_eq!(io_error.kind(), kind);
        assert_eq!(io_error.to_string(), message);
        assert!(io_error.into_inner().unwrap().downcast::<Error>().is_ok());
    }
}
