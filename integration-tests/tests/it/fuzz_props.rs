//! Property tests over every decoder that reads what another process wrote:
//! frames of every protobuf message, descriptor handles, the barrier's vault,
//! the channel's headers and slots, the handshake's logon and reply, the
//! monitor's socket. Arbitrary bytes in, never a panic, never a read outside
//! the buffer, always an error that says what was wrong.
//!
//! The drivers (this package's library, `src/fuzz_drivers/`) are shared
//! with the cargo-fuzz targets in `fuzz/`, which run the same code for
//! minutes instead of cases.

use std::time::Duration;

use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_integration_tests::fuzz_drivers as drivers;
use nodeipc_shm::{OpenOptions, Region};
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};
use proptest::collection::vec;
use proptest::prelude::*;

/// Arbitrary bytes, or arbitrary bytes after a fixed prefix (the flag bytes
/// that let a driver past the checks it would otherwise stop at).
fn bytes_after(prefixes: Vec<Vec<u8>>, max: usize) -> impl Strategy<Value = Vec<u8>> {
    let prefixed = (proptest::sample::select(prefixes), vec(any::<u8>(), 0..max)).prop_map(
        |(mut prefix, rest)| {
            prefix.extend(rest);
            prefix
        },
    );
    prop_oneof![vec(any::<u8>(), 0..max), prefixed]
}

/// Protobuf varint encoding.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Input for `drivers::frame`: any message type, no limit, and one frame
/// whose bytes are well-formed protobuf at the top level — fields 1 to 12 of
/// any wire type with values of any content — so that a message refusing
/// them finds the fault inside one of its fields and must say which.
fn frames_of_well_formed_fields() -> impl Strategy<Value = Vec<u8>> {
    let field = (1u64..=12, 0usize..4, any::<u64>(), vec(any::<u8>(), 0..24));
    (any::<u8>(), vec(field, 0..6)).prop_map(|(which, fields)| {
        let mut body = Vec::new();
        for (number, wire, value, bytes) in fields {
            let wire_type = [0u64, 2, 1, 5][wire];
            put_varint(&mut body, number << 3 | wire_type);
            match wire_type {
                0 => put_varint(&mut body, value),
                2 => {
                    put_varint(&mut body, bytes.len() as u64);
                    body.extend(bytes);
                }
                1 => body.extend(value.to_le_bytes()),
                _ => body.extend((value as u32).to_le_bytes()),
            }
        }
        // The message type, then a limit selector meaning "no limit".
        let mut data = vec![which, 64];
        data.extend((body.len() as u32).to_le_bytes());
        data.extend(body);
        data
    })
}

/// Inputs the fuzzers found that once broke a contract, one file each under
/// `fuzz/regressions/<target>/` (where `cargo fuzz run <target> <file>`
/// replays them too); every one must pass its driver for good.
#[test]
fn regression_inputs_the_fuzzers_found_pass_their_drivers() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    let mut ran = 0;
    for target in std::fs::read_dir(&root).expect("fuzz/regressions") {
        let target = target.unwrap().path();
        let name = target.file_name().unwrap().to_string_lossy().into_owned();
        let driver: fn(&[u8]) = match name.as_str() {
            "frame" => drivers::frame,
            "fd_handle" => drivers::fd_handle,
            "vault" => drivers::vault,
            "channel_headers" => drivers::channel_headers,
            "channel_slots" => drivers::channel_slots,
            "logon" => drivers::logon,
            other => panic!("no driver runs regressions of target {other} here yet"),
        };
        for input in std::fs::read_dir(&target).unwrap() {
            let input = input.unwrap().path();
            let data = std::fs::read(&input).unwrap();
            eprintln!("{}: {data:02x?}", input.display());
            driver(&data);
            ran += 1;
        }
    }
    assert!(ran > 0, "no regression input under {}", root.display());
}

/// Nothing a driver created under `tag` is left in `/dev/shm`.
fn nothing_left(tag: &str) {
    let ours = format!("{tag}-{}-", std::process::id());
    assert!(
        shm_leftovers(&ours).is_empty(),
        "{:?}",
        shm_leftovers(&ours)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frames_of_every_message_type_decode_or_say_why(
        data in prop_oneof![vec(any::<u8>(), 0..160), frames_of_well_formed_fields()]
    ) {
        drivers::frame(&data);
    }

    #[test]
    fn fd_handles_from_any_bytes_round_trip_or_name_the_field(
        data in prop_oneof![
            vec(any::<u8>(), 0..40),
            vec(any::<u8>(), 24..=24),
            bytes_after(vec![b"NIFH\x01\x00\x00\x00".to_vec()], 17),
        ]
    ) {
        drivers::fd_handle(&data);
    }

    #[test]
    fn logons_from_any_bytes_are_decided_or_refused_with_a_reason(
        data in bytes_after(vec![vec![0x08, 0x01, 0x10, 0x01]], 64)
    ) {
        drivers::logon(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn a_hostile_vault_is_joined_or_refused_naming_the_field(
        data in bytes_after(
            vec![vec![0xff, 0x01], vec![0xff, 0xff], vec![0xef, 0x01], vec![0xfe, 0x01], vec![0xfb, 0x01]],
            600,
        )
    ) {
        let _dog = Watchdog::new("hostile vault", Duration::from_secs(120));
        drivers::vault(&data);
    }

    #[test]
    fn hostile_channel_headers_are_refused_naming_the_field(
        data in bytes_after(
            (0..13).map(|i: u32| {
                let keep = !(1u16 << i);
                vec![0x01, 0x40, 0x40, 0x10, keep as u8, (keep >> 8) as u8, 0xff]
            }).collect(),
            300,
        )
    ) {
        let _dog = Watchdog::new("hostile channel headers", Duration::from_secs(120));
        drivers::channel_headers(&data);
    }

    #[test]
    fn hostile_slots_frames_and_entries_give_errors_not_panics(data in vec(any::<u8>(), 0..400)) {
        let _dog = Watchdog::new("hostile channel slots", Duration::from_secs(120));
        drivers::channel_slots(&data);
    }
}

#[test]
fn a_hostile_handshake_server_gives_clients_errors_not_panics() {
    let _dog = Watchdog::new("hostile handshake server", Duration::from_secs(300));
    let server = drivers::FakeServer::start();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(128));
    let strategy = bytes_after(
        vec![
            // A LogonReply frame's prefix, then an Accept.
            vec![0x00, 0x40, 0x00, 0x00, 0x00],
            vec![0x02, 0x00, 0x80, 0x00, 0x01, 0x00, 0x00, 0x00, 0x0a],
        ],
        200,
    );
    runner
        .run(&strategy, |data| {
            drivers::logon_reply(&server, &data);
            Ok(())
        })
        .unwrap();
    drop(server);
    nothing_left("fuzz-hs");
}

/// An accept whose descriptors are described as `described` (kind, size),
/// sent with `regions`, framed as the handshake frames a reply.
fn accept_frame(described: &[(i32, u64)]) -> Vec<u8> {
    use nodeipc_proto::handshake::{Accept, LogonReply, PROTOCOL_VERSION, PassedFd, logon_reply};
    use prost::Message;
    let reply = LogonReply {
        reply: Some(logon_reply::Reply::Accept(Accept {
            protocol_version: PROTOCOL_VERSION,
            fds: described
                .iter()
                .map(|&(kind, size)| PassedFd {
                    kind,
                    size,
                    ..PassedFd::default()
                })
                .collect(),
            ..Accept::default()
        })),
    };
    let body = reply.encode_to_vec();
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend(body);
    frame
}

#[test]
fn a_server_that_misdescribes_its_descriptors_is_refused_naming_which() {
    use nodeipc_proto::handshake::FdKind;
    let _dog = Watchdog::new("misdescribed descriptors", Duration::from_secs(60));
    let server = drivers::FakeServer::start();
    let logon = || {
        nodeipc_channel::connect(
            server.path(),
            &nodeipc_channel::worker_logon(0),
            Duration::from_secs(5),
        )
    };
    // How the accept describes the descriptors, the size of each region
    // sent, and what the refusal must say.
    type Case<'a> = (&'a [(i32, u64)], usize, &'a str);
    let cases: [Case; 3] = [
        // A role the protocol does not define, and one left unset.
        (
            &[(99, 4096)],
            4096,
            "descriptor 0 of the accept has no known role (kind 99)",
        ),
        (
            &[(FdKind::RequestRegion as i32, 4096), (0, 4096)],
            4096,
            "descriptor 1 of the accept has no known role (kind 0)",
        ),
        // A region smaller than the size the client would map.
        (
            &[(FdKind::RequestRegion as i32, 1 << 20)],
            4096,
            "descriptor 0 (FD_KIND_REQUEST_REGION) holds 4096 bytes, the accept says 1048576",
        ),
    ];
    for (described, size, expected) in cases {
        let regions = described
            .iter()
            .map(|_| Region::anonymous(size).expect("memfd"))
            .collect();
        server.answer(accept_frame(described), regions);
        match logon() {
            Err(nodeipc_channel::Error::Handshake(
                nodeipc_channel::HandshakeError::Handshake { reason, .. },
            )) => assert!(
                reason.contains(expected),
                "refused for another reason: {reason} (expected {expected})"
            ),
            Err(other) => panic!("expected a handshake error saying {expected:?}, got {other}"),
            Ok(_) => panic!("accepted descriptors described as {described:?}"),
        }
    }
    drop(server);
}

/// The frames of a well-behaved rank's messages, one after the other.
fn client_frames(messages: &[nodeipc_proto::monitor::ClientMessage]) -> Vec<u8> {
    messages
        .iter()
        .flat_map(|m| nodeipc_proto::encode_frame_to_vec(m).expect("encode"))
        .collect()
}

fn client(
    msg: nodeipc_proto::monitor::client_message::Msg,
) -> nodeipc_proto::monitor::ClientMessage {
    nodeipc_proto::monitor::ClientMessage { msg: Some(msg) }
}

/// Registers the connecting process (pid 0).
fn init() -> nodeipc_proto::monitor::ClientMessage {
    use nodeipc_proto::monitor::{Init, RankInfo, client_message::Msg};
    client(Msg::Init(Init {
        rank: Some(RankInfo::default()),
        want_heartbeat_region: false,
    }))
}

fn heartbeat() -> nodeipc_proto::monitor::ClientMessage {
    use nodeipc_proto::monitor::{Heartbeat, client_message::Msg};
    client(Msg::Heartbeat(Heartbeat { state: None }))
}

fn section(name: &str, action: i32) -> nodeipc_proto::monitor::ClientMessage {
    use nodeipc_proto::monitor::{Section, client_message::Msg};
    client(Msg::Section(Section {
        name: name.to_owned(),
        action,
    }))
}

fn status_query() -> nodeipc_proto::monitor::ClientMessage {
    use nodeipc_proto::monitor::{StatusQuery, client_message::Msg};
    client(Msg::StatusQuery(StatusQuery {}))
}

#[test]
fn any_bytes_on_the_monitor_socket_get_frames_back_and_the_server_keeps_serving() {
    let _dog = Watchdog::new("hostile monitor client", Duration::from_secs(300));
    let fixture = drivers::MonitorFixture::start();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(256));
    let strategy = bytes_after(
        vec![
            // Well-formed frame prefixes, so the decoder sees the bodies.
            vec![0x02, 0x00, 0x00, 0x00],
            vec![0x10, 0x00, 0x00, 0x00, 0x0a],
            // An oversize prefix.
            vec![0xff, 0xff, 0xff, 0x7f],
            // An UpdateConfig whose section_timeouts_ms map comes on wire
            // type 1 (fixed64), whose 8 bytes prost alone reads as an entry.
            vec![
                0x0d, 0x00, 0x00, 0x00, 0x22, 0x0b, 0x0a, 0x09, 0x21, 0x07, 0x0a, 0x01, b'x', 0x10,
                0x05, 0x10, 0x05,
            ],
            // A rank that registers, beats, opens a section and asks for the
            // status, so the answers that depend on the connection's state
            // (heartbeats counted, sections open) are checked too.
            client_frames(&[init(), heartbeat(), heartbeat(), status_query()]),
            client_frames(&[init(), section("step", 1), heartbeat(), status_query()]),
            client_frames(&[heartbeat(), status_query(), init(), status_query()]),
        ],
        300,
    );
    runner
        .run(&strategy, |data| {
            drivers::monitor_stream(&fixture, &data);
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_drivers_leave_nothing_in_dev_shm() {
    let _dog = Watchdog::new("drivers leave nothing", Duration::from_secs(120));
    for seed in 0..64u8 {
        let data: Vec<u8> = (0..200u32)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect();
        drivers::vault(&data);
        drivers::channel_headers(&data);
        drivers::channel_slots(&data);
    }
    nothing_left("fuzz-vault");
    nothing_left("fuzz-chh");
    nothing_left("fuzz-chs");
}

/// The vault offsets the drivers fix up are where a real rank 0 writes.
#[test]
fn the_vault_offsets_the_drivers_use_are_the_real_ones() {
    use drivers::vault_layout as v;
    let _dog = Watchdog::new("vault offsets", Duration::from_secs(60));
    let name = unique_name("vault-offsets");
    let rank0 = {
        let name = name.clone();
        std::thread::spawn(move || {
            let mut group =
                Group::join(GroupOptions::new(name, 0, 2).timeout(Duration::from_secs(20)))?;
            group.barrier()?;
            group.all_gather(b"zero")
        })
    };
    // Before rank 1 joins, the vault has its name: look at it as rank 0 wrote it.
    let region = Region::open(&name, OpenOptions::wait(1024, Duration::from_secs(20))).unwrap();
    let word = |at: usize| {
        let mut b = [0u8; 4];
        region.read_at(at, &mut b).unwrap();
        u32::from_le_bytes(b)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while word(v::RANKS + 12) & 1 == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "rank 0 never registered"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut magic = [0u8; 8];
    region.read_at(v::MAGIC, &mut magic).unwrap();
    assert_eq!(&magic, v::MAGIC_VALUE);
    assert_eq!(word(v::VERSION), 1);
    assert_eq!(word(v::WORLD), 2);
    assert_eq!(word(v::SLOT), 64);
    assert_eq!(word(v::INIT), 1);
    assert_eq!(word(v::JOINED), 1);
    assert_eq!(word(v::POISON), 0);
    assert_eq!(word(v::RANKS + 8), std::process::id());
    assert_eq!(region.len(), v::size(2, 64));
    let mut group =
        Group::join(GroupOptions::new(&name, 1, 2).timeout(Duration::from_secs(20))).unwrap();
    group.barrier().unwrap();
    group.all_gather(b"one").unwrap();
    rank0.join().unwrap().unwrap();
}

/// The channel header offsets the drivers rewrite are where a coordinator
/// writes (`channel/README.md`, "The layout").
#[test]
fn the_channel_header_offsets_the_drivers_use_are_the_real_ones() {
    use nodeipc_channel::Channel;
    let config = Channel::anonymous(unique_name("header-offsets"))
        .workers(3)
        .depth(2)
        .request_capacity(300)
        .response_slot_size(200)
        .init_slot_size(100);
    let coordinator = config.create().unwrap();
    let map = |fd: std::os::fd::BorrowedFd<'_>| {
        Region::from_fd(fd.try_clone_to_owned().unwrap()).unwrap()
    };
    let (request, response) = (
        map(coordinator.request_fd()),
        map(coordinator.response_fd()),
    );
    let read = |region: &Region, (at, width): (usize, usize)| {
        let mut b = [0u8; 8];
        region.read_at(at, &mut b[..width]).unwrap();
        u64::from_le_bytes(b)
    };
    let r: Vec<u64> = drivers::REQUEST_FIELDS
        .iter()
        .map(|&f| read(&request, f))
        .collect();
    let pid = u64::from(std::process::id());
    let start = nodeipc_fdpass::process_start_time(std::process::id()).unwrap();
    let magic = u64::from_le_bytes(*b"NIPCREQ1");
    assert_eq!(r, [magic, 2, 3, 2, 2, 300, 200, 100, pid, 0, 1, start, 0]);
    let s: Vec<u64> = drivers::RESPONSE_FIELDS
        .iter()
        .map(|&f| read(&response, f))
        .collect();
    assert_eq!(s, [u64::from_le_bytes(*b"NIPCRSP1"), 2, 3, 200, 100, 1]);
    // Requests sent moves with each send; closed is set on drop.
    let send = std::thread::spawn(move || {
        coordinator
            .send(&nodeipc_proto::execute::ExecuteRequest::default())
            .unwrap();
        drop(coordinator);
    });
    send.join().unwrap();
    assert_eq!(read(&request, drivers::REQUEST_FIELDS[12]), 1);
    assert_eq!(read(&request, drivers::REQUEST_FIELDS[9]), 1);
}
