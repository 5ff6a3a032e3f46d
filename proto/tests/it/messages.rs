//! Every message type of the three `.proto` files through the framing: full
//! values, every oneof variant, default (zero-byte) values, and pinned bytes
//! that catch a changed field number.

use std::collections::BTreeMap;
use std::fmt::Debug;

use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, Finalize, ForwardRequest, ForwardResponse,
    InitResponse, ModelInit, PdErrorCode, PullKvRequest, PullKvResponse, PullKvResult,
    RecoverCommand, RecoverResponse, execute_request, execute_response,
};
use nodeipc_proto::handshake::{
    Accept, ChannelGeometry, ClientKind, Count, FdKind, Logon, LogonReply, PROTOCOL_VERSION,
    PassedFd, Reject, RejectCode, SemaphoreKind, logon_reply,
};
use nodeipc_proto::monitor::{
    self, ClientMessage, EffectiveConfig, ErrorCode, Heartbeat, Init, MonitorState, OpenSection,
    RankInfo, Section, SectionAction, ServerMessage, ShmHeartbeat, Status, StatusQuery, Timeouts,
    UpdateConfig, WorkloadAction, WorkloadControl, client_message, server_message,
};
use nodeipc_proto::{
    KnownMessage, LEN_PREFIX, decode_frame, encode_frame, encode_frame_to_vec, frame_len,
    read_frame, write_frame,
};
use prost::Message;

/// Frames `msg` every way the crate offers and checks each gives it back.
fn round_trip<M: KnownMessage + PartialEq + Debug>(msg: &M) {
    let size = LEN_PREFIX + msg.encoded_len();

    // In place, into a buffer of exactly the frame's size.
    let mut buf = vec![0xA5; size];
    assert_eq!(encode_frame(msg, &mut buf).unwrap(), size);
    assert_eq!(buf[..LEN_PREFIX], (msg.encoded_len() as u32).to_le_bytes());
    assert_eq!(frame_len(&buf, size).unwrap(), size);
    assert_eq!(&decode_frame::<M>(&buf, size).unwrap(), msg);

    // Allocating, the same bytes.
    assert_eq!(encode_frame_to_vec(msg).unwrap(), buf);

    // Bytes after the frame are not part of it.
    let mut longer = buf.clone();
    longer.extend_from_slice(&[0xFF; 9]);
    assert_eq!(frame_len(&longer, longer.len()).unwrap(), size);
    assert_eq!(&decode_frame::<M>(&longer, longer.len()).unwrap(), msg);

    // Through a stream.
    let mut stream = Vec::new();
    write_frame(&mut stream, msg).unwrap();
    assert_eq!(stream, buf);
    let mut scratch = Vec::new();
    let back: M = read_frame(&mut stream.as_slice(), size, &mut scratch).unwrap();
    assert_eq!(&back, msg);
}

fn forward_request() -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute.into(),
        sequence: 42,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![1, 2, 300],
            input: (vec![0, 1, 2, 3, 255]).into(),
        })),
    }
}

fn pull_kv_response() -> ExecuteResponse {
    ExecuteResponse {
        status: 0,
        msg_type: ExecuteType::PullKv.into(),
        sequence: 43,
        error: String::new(),
        result: Some(execute_response::Result::PullKvResponse(PullKvResponse {
            results: vec![
                PullKvResult {
                    request_id: 7,
                    pd_error_code: PdErrorCode::PdSuccess.into(),
                },
                PullKvResult {
                    request_id: 8,
                    pd_error_code: PdErrorCode::PdTimeout.into(),
                },
            ],
        })),
    }
}

fn rank_info() -> RankInfo {
    RankInfo {
        global_rank: 9,
        local_rank: 1,
        pid: 4321,
        host: "node-a".into(),
    }
}

fn timeouts() -> Timeouts {
    Timeouts {
        initial_heartbeat_ms: Some(60_000),
        heartbeat_ms: Some(0),
        out_of_section_ms: None,
        section_timeouts_ms: BTreeMap::from([("checkpoint".into(), 600_000), ("step".into(), 0)]),
    }
}

fn effective_config() -> EffectiveConfig {
    EffectiveConfig {
        timeouts: Some(timeouts()),
        termination_signal: 15,
        kill_after_ms: Some(5_000),
        skip_section_replies: true,
        check_interval_ms: Some(1000),
    }
}

fn logon() -> Logon {
    Logon {
        protocol_version: PROTOCOL_VERSION,
        kind: ClientKind::Worker.into(),
        worker_rank: 3,
        workers: 4,
        request_capacity: 1 << 20,
        response_slot_size: 1 << 16,
        init_slot_size: 4096,
        depth: 2,
        counts: vec![Count {
            name: "workers".into(),
            value: 4,
        }],
        request: vec![1, 2, 3],
    }
}

fn accept() -> Accept {
    Accept {
        protocol_version: PROTOCOL_VERSION,
        fds: vec![
            PassedFd {
                kind: FdKind::RequestRegion.into(),
                size: 1 << 20,
                role: String::new(),
            },
            PassedFd {
                kind: FdKind::Queue.into(),
                size: 4 << 16,
                role: "worker.0.to_worker".into(),
            },
        ],
        geometry: Some(ChannelGeometry {
            workers: 4,
            request_capacity: 1 << 20,
            response_slot_size: 1 << 16,
            init_slot_size: 4096,
            depth: 2,
            sems: SemaphoreKind::Named.into(),
            semaphore_prefix: "/nodeipc-demo".into(),
        }),
        payload: b"server's own".to_vec(),
    }
}

fn status() -> Status {
    Status {
        state: MonitorState::Running.into(),
        rank: Some(rank_info()),
        heartbeats: 1234,
        open_sections: vec![
            OpenSection {
                name: "step".into(),
                ms_open: 17,
                timeout_ms: Some(1000),
            },
            OpenSection {
                name: "io".into(),
                ms_open: 3,
                timeout_ms: None,
            },
        ],
        ms_since_last_heartbeat: Some(12),
        last_timeout: String::new(),
        ms_since_init: Some(99_000),
        ms_out_of_section: None,
        config: Some(effective_config()),
        last_state: Some(b"step 1000".to_vec()),
        ms_restarting: Some(2500),
        workload_request: Some(WorkloadControl {
            action: WorkloadAction::ShutdownWorkload.into(),
            description: "done".into(),
        }),
    }
}

#[test]
fn execute_requests_round_trip_with_every_payload() {
    let payloads = [
        (
            ExecuteType::ModelInit,
            execute_request::Payload::ModelInit(ModelInit {
                model: "/models/llama".into(),
                config: br#"{"tp":2}"#.to_vec().into(),
            }),
        ),
        (
            ExecuteType::Execute,
            execute_request::Payload::Forward(ForwardRequest {
                request_ids: vec![5, 6],
                input: (vec![7; 1000]).into(),
            }),
        ),
        (
            ExecuteType::PullKv,
            execute_request::Payload::PullKv(PullKvRequest {
                request_ids: vec![u64::MAX, 0],
                source: "prefill-0".into(),
            }),
        ),
        (
            ExecuteType::Recover,
            execute_request::Payload::Recover(RecoverCommand {
                reason: "worker 2 died".into(),
                request_ids: vec![],
            }),
        ),
        (
            ExecuteType::Finalize,
            execute_request::Payload::Finalize(Finalize {
                reason: "shutdown".into(),
            }),
        ),
    ];
    for (sequence, (kind, payload)) in payloads.into_iter().enumerate() {
        round_trip(&ExecuteRequest {
            execute_type: kind.into(),
            sequence: sequence as u64,
            payload: Some(payload),
        });
    }
    round_trip(&forward_request());
}

#[test]
fn execute_responses_round_trip_with_every_result() {
    let results = [
        (
            ExecuteType::ModelInit,
            Some(execute_response::Result::Init(InitResponse {
                rank: 1,
                info: (vec![1, 2, 3]).into(),
            })),
        ),
        (
            ExecuteType::Execute,
            Some(execute_response::Result::Forward(ForwardResponse {
                output: (vec![9; 513]).into(),
            })),
        ),
        (
            ExecuteType::Recover,
            Some(execute_response::Result::Recover(RecoverResponse {
                last_sequence: 41,
            })),
        ),
        (ExecuteType::Finalize, None),
    ];
    for (kind, result) in results {
        round_trip(&ExecuteResponse {
            status: 0,
            msg_type: kind.into(),
            sequence: 5,
            error: String::new(),
            result,
        });
    }
    round_trip(&pull_kv_response());
    round_trip(&ExecuteResponse {
        status: -3,
        msg_type: ExecuteType::Execute.into(),
        sequence: 6,
        error: "CUDA out of memory".into(),
        result: None,
    });
}

#[test]
fn execute_payload_messages_round_trip_alone() {
    round_trip(&ModelInit {
        model: "m".into(),
        config: vec![0].into(),
    });
    round_trip(&ForwardRequest {
        request_ids: vec![1],
        input: vec![2].into(),
    });
    round_trip(&PullKvRequest {
        request_ids: vec![3],
        source: "s".into(),
    });
    round_trip(&RecoverCommand {
        reason: "r".into(),
        request_ids: vec![4],
    });
    round_trip(&Finalize { reason: "f".into() });
    round_trip(&InitResponse {
        rank: 2,
        info: vec![5].into(),
    });
    round_trip(&ForwardResponse {
        output: vec![6].into(),
    });
    round_trip(&PullKvResponse {
        results: vec![PullKvResult {
            request_id: 1,
            pd_error_code: PdErrorCode::PdKvNotFound.into(),
        }],
    });
    round_trip(&PullKvResult {
        request_id: 2,
        pd_error_code: PdErrorCode::PdInternalError.into(),
    });
    round_trip(&RecoverResponse { last_sequence: 7 });
}

#[test]
fn handshake_messages_round_trip() {
    round_trip(&logon());
    round_trip(&Logon {
        kind: ClientKind::Observer.into(),
        ..logon()
    });
    round_trip(&accept());
    round_trip(&LogonReply {
        reply: Some(logon_reply::Reply::Accept(accept())),
    });
    let reject = Reject {
        code: RejectCode::VersionMismatch.into(),
        reason: "client speaks version 2, server version 1".into(),
    };
    round_trip(&reject);
    round_trip(&LogonReply {
        reply: Some(logon_reply::Reply::Reject(reject)),
    });
    round_trip(&PassedFd {
        kind: FdKind::SemaphoreRegion.into(),
        size: 4096,
        role: String::new(),
    });
    round_trip(&Count {
        name: "pool_handles".into(),
        value: 2,
    });
    round_trip(&accept().geometry.unwrap());
}

#[test]
fn monitor_client_messages_round_trip_with_every_variant() {
    let variants = [
        client_message::Msg::Init(Init {
            rank: Some(rank_info()),
            want_heartbeat_region: true,
        }),
        client_message::Msg::Heartbeat(Heartbeat { state: None }),
        client_message::Msg::Heartbeat(Heartbeat {
            state: Some(vec![]),
        }),
        client_message::Msg::Heartbeat(Heartbeat {
            state: Some(b"step 7".to_vec()),
        }),
        client_message::Msg::Section(Section {
            name: "checkpoint".into(),
            action: SectionAction::Open.into(),
        }),
        client_message::Msg::Section(Section {
            name: String::new(),
            action: SectionAction::CloseAll.into(),
        }),
        client_message::Msg::UpdateConfig(UpdateConfig {
            timeouts: Some(timeouts()),
        }),
        client_message::Msg::StatusQuery(StatusQuery {}),
    ];
    for msg in variants {
        round_trip(&ClientMessage { msg: Some(msg) });
    }
}

#[test]
fn monitor_server_messages_round_trip_with_every_variant() {
    let variants = [
        server_message::Msg::Ok(monitor::Ok {
            config: Some(effective_config()),
            heartbeat_region_attached: true,
            shm_heartbeat: Some(ShmHeartbeat {
                region_size: 4096,
                counter_offset: 64,
            }),
        }),
        server_message::Msg::Ok(monitor::Ok::default()),
        server_message::Msg::Error(monitor::Error {
            cause: "section \"step\" is not open".into(),
            code: ErrorCode::SectionNotOpen.into(),
        }),
        server_message::Msg::Error(monitor::Error::default()),
        server_message::Msg::Status(status()),
        server_message::Msg::Status(Status {
            state: MonitorState::Waiting.into(),
            ..Status::default()
        }),
    ];
    for msg in variants {
        round_trip(&ServerMessage { msg: Some(msg) });
    }
}

#[test]
fn monitor_inner_messages_round_trip_alone() {
    round_trip(&rank_info());
    round_trip(&timeouts());
    round_trip(&effective_config());
    round_trip(&status());
    round_trip(&OpenSection {
        name: "x".into(),
        ms_open: 1,
        timeout_ms: Some(0),
    });
    round_trip(&ShmHeartbeat {
        region_size: 8,
        counter_offset: 0,
    });
}

/// A proto3 `optional` field set to its default is still sent, so presence
/// survives the trip: "keep the current value" and "remove the timeout" are
/// different updates.
#[test]
fn optional_fields_keep_presence_when_set_to_zero() {
    let remove = Timeouts {
        heartbeat_ms: Some(0),
        ..Timeouts::default()
    };
    let keep = Timeouts::default();
    let remove_frame = encode_frame_to_vec(&remove).unwrap();
    assert_eq!(remove_frame, [2, 0, 0, 0, 0x10, 0x00]);
    assert_eq!(decode_frame::<Timeouts>(&remove_frame, 64).unwrap(), remove);
    assert_eq!(encode_frame_to_vec(&keep).unwrap(), [0, 0, 0, 0]);
}

/// A message whose fields all hold their defaults encodes to zero bytes: its
/// frame is the prefix alone, and that frame must round-trip.
macro_rules! empty_frames {
    ($($ty:ty),+ $(,)?) => {
        #[test]
        fn default_messages_are_prefix_only_frames() {
            $(
                let msg = <$ty>::default();
                assert_eq!(msg.encoded_len(), 0, "{}", stringify!($ty));
                let mut buf = [0xEE; LEN_PREFIX];
                assert_eq!(encode_frame(&msg, &mut buf).unwrap(), LEN_PREFIX);
                assert_eq!(buf, [0; LEN_PREFIX], "{}", stringify!($ty));
                assert_eq!(decode_frame::<$ty>(&buf, LEN_PREFIX).unwrap(), msg);
                round_trip(&msg);
            )+
        }
    };
}

nodeipc_proto::every_message!(empty_frames);

/// An empty message set in a oneof is not the same as no message: it costs
/// two bytes (tag and zero length) and comes back set.
#[test]
fn empty_oneof_member_is_not_absent() {
    let query = ClientMessage {
        msg: Some(client_message::Msg::StatusQuery(StatusQuery {})),
    };
    let frame = encode_frame_to_vec(&query).unwrap();
    assert_eq!(frame, [2, 0, 0, 0, 0x2A, 0x00]);
    assert_eq!(decode_frame::<ClientMessage>(&frame, 64).unwrap(), query);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The exact frames of a few messages, written out by hand from the field
/// numbers. Field numbers are stable forever: if one of these changes, the
/// contract broke for every peer already deployed.
#[test]
fn frames_are_pinned_to_the_field_numbers() {
    // execute_type = 2 (field 1), sequence = 42 (field 2), forward (field 11)
    // { request_ids = [1, 2, 300] packed (field 1), input (field 2) }.
    assert_eq!(
        hex(&encode_frame_to_vec(&forward_request()).unwrap()),
        concat!(
            "13000000", // 19 bytes follow
            "0802",     // field 1 varint: 2 (EXECUTE)
            "102a",     // field 2 varint: 42
            "5a0d",     // field 11 length-delimited: 13 bytes
            "0a04",
            "0102ac02", // field 1 packed: 1, 2, 300
            "1205",
            "00010203ff", // field 2 bytes
        )
    );

    // status 0 and empty error are not sent; msg_type = 3 (field 2),
    // sequence = 43 (field 3), pull_kv_response (field 12) { results
    // (field 1) { request_id (field 1), pd_error_code (field 2) } }.
    assert_eq!(
        hex(&encode_frame_to_vec(&pull_kv_response()).unwrap()),
        concat!(
            "10000000", // 16 bytes follow
            "1003",     // field 2 varint: 3 (PULL_KV)
            "182b",     // field 3 varint: 43
            "620a",     // field 12 length-delimited: 10 bytes
            "0a020807", // result { request_id 7, PD_SUCCESS not sent }
            "0a040808", "1003", // result { request_id 8, PD_TIMEOUT = 3 }
        )
    );

    let logon = Logon {
        protocol_version: 1,
        kind: ClientKind::Worker.into(),
        worker_rank: 3,
        workers: 4,
        request_capacity: 5,
        response_slot_size: 6,
        init_slot_size: 7,
        depth: 8,
        ..Logon::default()
    };
    assert_eq!(
        hex(&encode_frame_to_vec(&logon).unwrap()),
        concat!(
            "10000000", "0801", "1001", "1803", "2004", "2805", "3006", "3807", "4008"
        )
    );

    let reject = LogonReply {
        reply: Some(logon_reply::Reply::Reject(Reject {
            code: RejectCode::RankTaken.into(),
            reason: "x".into(),
        })),
    };
    assert_eq!(
        hex(&encode_frame_to_vec(&reject).unwrap()),
        concat!("07000000", "1205", "0804", "1201", "78")
    );

    let section = ClientMessage {
        msg: Some(client_message::Msg::Section(Section {
            name: "io".into(),
            action: SectionAction::Close.into(),
        })),
    };
    assert_eq!(
        hex(&encode_frame_to_vec(&section).unwrap()),
        concat!("08000000", "1a06", "0a02", "696f", "1002")
    );

    let heartbeat = ClientMessage {
        msg: Some(client_message::Msg::Heartbeat(Heartbeat {
            state: Some(vec![0xAB]),
        })),
    };
    assert_eq!(
        hex(&encode_frame_to_vec(&heartbeat).unwrap()),
        concat!("05000000", "1203", "0a01", "ab")
    );
}

/// `Error.code` is field 2 beside the cause: a reply of a server older than
/// the field (cause only) reads as `ERROR_CODE_UNSPECIFIED`, an old client
/// skips the new field, and a code this build does not know stays
/// distinguishable from every known one.
#[test]
fn monitor_error_code_is_field_2_and_old_peers_still_understand() {
    let error = ServerMessage {
        msg: Some(server_message::Msg::Error(monitor::Error {
            cause: "x".into(),
            code: ErrorCode::PidNotAllowed.into(),
        })),
    };
    // msg.error (field 2) { cause (field 1) "x", code (field 2) varint 9 }.
    let frame = encode_frame_to_vec(&error).unwrap();
    assert_eq!(hex(&frame), concat!("07000000", "1205", "0a0178", "1009"));

    // What an old server sent: only the cause.
    let old = [0x05, 0, 0, 0, 0x12, 0x03, 0x0a, 0x01, 0x78];
    let Some(server_message::Msg::Error(e)) = decode_frame::<ServerMessage>(&old, 64).unwrap().msg
    else {
        panic!("not an Error");
    };
    assert_eq!(e.cause, "x");
    assert_eq!(e.code(), ErrorCode::Unspecified);

    // What a newer server may send: a code unknown here.
    let newer = [0x07, 0, 0, 0, 0x12, 0x05, 0x0a, 0x01, 0x78, 0x10, 0x7f];
    let Some(server_message::Msg::Error(e)) =
        decode_frame::<ServerMessage>(&newer, 64).unwrap().msg
    else {
        panic!("not an Error");
    };
    assert_eq!(e.code, 127);
    assert!(ErrorCode::try_from(e.code).is_err());
    assert_eq!(
        e.code(),
        ErrorCode::Unspecified,
        "prost's accessor defaults"
    );

    // An old client's view of the new frame: a message without field 2
    // skips it and keeps the cause.
    #[derive(Clone, PartialEq, prost::Message)]
    struct OldError {
        #[prost(string, tag = "1")]
        cause: String,
    }
    let old_view = OldError::decode(&frame[LEN_PREFIX + 2..]).unwrap();
    assert_eq!(old_view.cause, "x");

    // Every value keeps its number: they are a contract.
    let pinned = [
        (ErrorCode::Unspecified, 0),
        (ErrorCode::Malformed, 1),
        (ErrorCode::FrameTooLarge, 2),
        (ErrorCode::UnknownMessage, 3),
        (ErrorCode::FieldTooLarge, 4),
        (ErrorCode::InvalidArgument, 5),
        (ErrorCode::NotInitialized, 6),
        (ErrorCode::AlreadyRegistered, 7),
        (ErrorCode::RankTimedOut, 8),
        (ErrorCode::PidNotAllowed, 9),
        (ErrorCode::PidNamespace, 10),
        (ErrorCode::ProcessGone, 11),
        (ErrorCode::SectionAlreadyOpen, 12),
        (ErrorCode::SectionNotOpen, 13),
        (ErrorCode::TooManySections, 14),
        (ErrorCode::FirstMessageDeadline, 15),
        (ErrorCode::ReplyDeadline, 16),
        (ErrorCode::RankSlotBusy, 17),
        (ErrorCode::ControlSlotsBusy, 18),
        (ErrorCode::PermissionDenied, 19),
        (ErrorCode::NoRankConnection, 20),
        (ErrorCode::Internal, 21),
    ];
    for (code, number) in pinned {
        assert_eq!(code as i32, number, "{code:?}");
    }
}

#[test]
fn the_file_descriptors_name_every_contract_and_decode() {
    use prost::Message;
    let names: Vec<&str> = nodeipc_proto::FILE_DESCRIPTORS
        .iter()
        .map(|(n, _)| *n)
        .collect();
    for file in ["execute.proto", "handshake.proto", "monitor.proto"] {
        assert!(names.contains(&file), "{file} missing from {names:?}");
    }
    for (name, bytes) in nodeipc_proto::FILE_DESCRIPTORS {
        let file = prost_types::FileDescriptorProto::decode(*bytes).unwrap();
        assert_eq!(file.name(), *name);
        assert!(!file.message_type.is_empty(), "{name} has no message");
        assert!(file.source_code_info.is_none(), "{name} carries comments");
    }
}
