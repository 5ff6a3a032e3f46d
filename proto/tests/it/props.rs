//! Property tests: whatever bytes another process wrote, decoding returns a
//! message or an error and never panics; arbitrary execute messages survive
//! the framing unchanged.

use nodeipc_proto::execute::{
    self, ExecuteRequest, ExecuteResponse, Finalize, ForwardRequest, ForwardResponse, InitResponse,
    ModelInit, PullKvRequest, PullKvResponse, PullKvResult, RecoverCommand, RecoverResponse,
    execute_request, execute_response,
};
use nodeipc_proto::{
    Error, KnownMessage, LEN_PREFIX, decode_frame, encode_frame, encode_frame_to_vec, frame_len,
    handshake, monitor, read_frame, write_frame,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Runs `$check::<M>($args)` for every message type of the three files.
macro_rules! for_every_message_type {
    ($check:ident($($arg:expr),*)) => {{
        $check::<execute::ExecuteRequest>($($arg),*)?;
        $check::<execute::ModelInit>($($arg),*)?;
        $check::<execute::ForwardRequest>($($arg),*)?;
        $check::<execute::PullKvRequest>($($arg),*)?;
        $check::<execute::RecoverCommand>($($arg),*)?;
        $check::<execute::Finalize>($($arg),*)?;
        $check::<execute::ExecuteResponse>($($arg),*)?;
        $check::<execute::InitResponse>($($arg),*)?;
        $check::<execute::ForwardResponse>($($arg),*)?;
        $check::<execute::PullKvResponse>($($arg),*)?;
        $check::<execute::PullKvResult>($($arg),*)?;
        $check::<execute::RecoverResponse>($($arg),*)?;
        $check::<handshake::Logon>($($arg),*)?;
        $check::<handshake::Count>($($arg),*)?;
        $check::<handshake::LogonReply>($($arg),*)?;
        $check::<handshake::Accept>($($arg),*)?;
        $check::<handshake::PassedFd>($($arg),*)?;
        $check::<handshake::ChannelGeometry>($($arg),*)?;
        $check::<handshake::Reject>($($arg),*)?;
        $check::<monitor::ClientMessage>($($arg),*)?;
        $check::<monitor::Init>($($arg),*)?;
        $check::<monitor::RankInfo>($($arg),*)?;
        $check::<monitor::Heartbeat>($($arg),*)?;
        $check::<monitor::Section>($($arg),*)?;
        $check::<monitor::UpdateConfig>($($arg),*)?;
        $check::<monitor::Timeouts>($($arg),*)?;
        $check::<monitor::StatusQuery>($($arg),*)?;
        $check::<monitor::ServerMessage>($($arg),*)?;
        $check::<monitor::Ok>($($arg),*)?;
        $check::<monitor::ShmHeartbeat>($($arg),*)?;
        $check::<monitor::Error>($($arg),*)?;
        $check::<monitor::EffectiveConfig>($($arg),*)?;
        $check::<monitor::Status>($($arg),*)?;
        $check::<monitor::OpenSection>($($arg),*)?;
        $check::<monitor::ControlRequest>($($arg),*)?;
        $check::<monitor::CloseConnection>($($arg),*)?;
        $check::<monitor::WorkloadControl>($($arg),*)?;
    }};
}

/// `decode_frame` agrees with `frame_len`, and each error is the one the
/// bytes call for.
fn decode_is_total<M: KnownMessage>(buf: &[u8], max: usize) -> Result<(), TestCaseError> {
    let len = frame_len(buf, max);
    match decode_frame::<M>(buf, max) {
        Ok(_) | Err(Error::Decode(_)) => {
            let size = len.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(size <= max && size <= buf.len() && size >= LEN_PREFIX);
        }
        Err(Error::TooLarge { size, max: limit }) => {
            prop_assert_eq!(limit, max);
            prop_assert!(size > max);
            prop_assert!(
                matches!(len, Err(Error::TooLarge { .. })),
                "frame_len gave {:?}",
                len
            );
        }
        Err(Error::Truncated { need, have }) => {
            prop_assert_eq!(have, buf.len());
            prop_assert!(need > have);
            prop_assert!(
                matches!(len, Err(Error::Truncated { .. })),
                "frame_len gave {:?}",
                len
            );
        }
        Err(other) => prop_assert!(false, "unexpected error: {other}"),
    }
    Ok(())
}

/// A message decoded from any bytes encodes again, and that encoding decodes
/// to the same message.
fn decoded_is_stable<M: KnownMessage + PartialEq + std::fmt::Debug>(
    buf: &[u8],
) -> Result<(), TestCaseError> {
    match decode_frame::<M>(buf, usize::MAX) {
        Ok(msg) => {
            let again =
                encode_frame_to_vec(&msg).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back = decode_frame::<M>(&again, again.len())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, msg);
        }
        Err(Error::Decode(_)) => {}
        Err(other) => prop_assert!(false, "a well-framed buffer gave {other}"),
    }
    Ok(())
}

/// Reading frames from any byte stream ends with an error after at most one
/// frame per 4 bytes, and `Closed` only at a frame boundary at the end.
fn read_is_total<M: KnownMessage>(bytes: &[u8], max: usize) -> Result<(), TestCaseError> {
    let mut stream = bytes;
    let mut scratch = Vec::new();
    for _ in 0..=bytes.len() / LEN_PREFIX {
        let before = stream.len();
        match read_frame::<M>(&mut stream, max, &mut scratch) {
            Ok(_) | Err(Error::Decode(_)) => prop_assert!(before - stream.len() >= LEN_PREFIX),
            Err(Error::Closed) => {
                prop_assert_eq!(before, 0);
                return Ok(());
            }
            Err(Error::TooLarge { size, max: limit }) => {
                prop_assert!(size > limit && limit == max);
                return Ok(());
            }
            Err(Error::Truncated { need, have }) => {
                prop_assert!(need > have && have == before);
                return Ok(());
            }
            Err(other) => prop_assert!(false, "unexpected error: {other}"),
        }
    }
    prop_assert!(stream.is_empty());
    Ok(())
}

/// Bytes that start with a correct prefix, so the decoder sees them.
fn framed_garbage() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(body, trailing)| {
            let mut buf = (body.len() as u32).to_le_bytes().to_vec();
            buf.extend(body);
            buf.extend(trailing);
            buf
        })
}

fn blob(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn ids() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(any::<u64>(), 0..6)
}

fn text() -> impl Strategy<Value = String> {
    ".{0,12}"
}

fn execute_request() -> impl Strategy<Value = ExecuteRequest> {
    use execute_request::Payload;
    let payload = prop_oneof![
        (text(), blob(32)).prop_map(|(model, config)| Payload::ModelInit(ModelInit {
            model,
            config: config.into()
        })),
        (ids(), blob(512)).prop_map(|(request_ids, input)| Payload::Forward(ForwardRequest {
            request_ids,
            input: input.into()
        })),
        (ids(), text()).prop_map(|(request_ids, source)| Payload::PullKv(PullKvRequest {
            request_ids,
            source
        })),
        (text(), ids()).prop_map(|(reason, request_ids)| Payload::Recover(RecoverCommand {
            reason,
            request_ids
        })),
        text().prop_map(|reason| Payload::Finalize(Finalize { reason })),
    ];
    (any::<i32>(), any::<u64>(), proptest::option::of(payload)).prop_map(
        |(execute_type, sequence, payload)| ExecuteRequest {
            execute_type,
            sequence,
            payload,
        },
    )
}

fn execute_response() -> impl Strategy<Value = ExecuteResponse> {
    use execute_response::Result as R;
    let result = prop_oneof![
        (any::<u32>(), blob(32)).prop_map(|(rank, info)| R::Init(InitResponse {
            rank,
            info: info.into()
        })),
        blob(512).prop_map(|output| R::Forward(ForwardResponse {
            output: output.into()
        })),
        proptest::collection::vec((any::<u64>(), any::<i32>()), 0..6).prop_map(|results| {
            R::PullKvResponse(PullKvResponse {
                results: results
                    .into_iter()
                    .map(|(request_id, pd_error_code)| PullKvResult {
                        request_id,
                        pd_error_code,
                    })
                    .collect(),
            })
        }),
        any::<u64>().prop_map(|last_sequence| R::Recover(RecoverResponse { last_sequence })),
    ];
    (
        any::<i32>(),
        any::<i32>(),
        any::<u64>(),
        text(),
        proptest::option::of(result),
    )
        .prop_map(
            |(status, msg_type, sequence, error, result)| ExecuteResponse {
                status,
                msg_type,
                sequence,
                error,
                result,
            },
        )
}

/// Every way through the framing gives the message back, and a buffer one
/// byte short is refused untouched.
fn frames_round_trip<M: KnownMessage + PartialEq + std::fmt::Debug>(
    msg: &M,
) -> Result<(), TestCaseError> {
    let size = LEN_PREFIX + msg.encoded_len();
    let mut buf = vec![0xC3; size + 1];
    let short = encode_frame(msg, &mut buf[..size - 1]);
    prop_assert!(
        matches!(short, Err(Error::TooLarge { size: s, max }) if s == size && max == size - 1),
        "one byte short gave {:?}",
        short
    );
    prop_assert!(buf.iter().all(|&b| b == 0xC3));
    prop_assert_eq!(encode_frame(msg, &mut buf).ok(), Some(size));
    prop_assert_eq!(buf[size], 0xC3);
    let decoded = decode_frame::<M>(&buf, size).ok();
    prop_assert_eq!(decoded.as_ref(), Some(msg));

    let mut stream = Vec::new();
    prop_assert!(write_frame(&mut stream, msg).is_ok());
    prop_assert_eq!(&stream[..], &buf[..size]);
    let back = read_frame::<M>(&mut stream.as_slice(), size, &mut Vec::new()).ok();
    prop_assert_eq!(back.as_ref(), Some(msg));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decode_frame_on_arbitrary_bytes_never_panics(
        buf in blob(48),
        max in prop_oneof![0usize..64, Just(usize::MAX)],
    ) {
        for_every_message_type!(decode_is_total(&buf, max));
    }

    #[test]
    fn decode_frame_on_well_framed_garbage_never_panics(buf in framed_garbage()) {
        for_every_message_type!(decode_is_total(&buf, usize::MAX));
        for_every_message_type!(decoded_is_stable(&buf));
    }

    #[test]
    fn read_frame_on_arbitrary_streams_never_panics(
        bytes in prop_oneof![blob(48), framed_garbage()],
        max in prop_oneof![0usize..64, Just(usize::MAX)],
    ) {
        for_every_message_type!(read_is_total(&bytes, max));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn arbitrary_execute_requests_round_trip(msg in execute_request()) {
        frames_round_trip(&msg)?;
    }

    #[test]
    fn arbitrary_execute_responses_round_trip(msg in execute_response()) {
        frames_round_trip(&msg)?;
    }
}
