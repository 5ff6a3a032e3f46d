//! Clients that log on wrongly, many times over: each gets its answer, and
//! the server's counts already include it when the client has it (they
//! used to be bumped after the answer went, so a caller reading them right
//! after a client's answer could miss it).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use nodeipc_channel::{
    Channel, ChannelServer, Error, HandshakeError, HandshakeOptions, connect, worker_logon,
};
use nodeipc_testkit::{TempDir, Watchdog, unique_name};

#[test]
fn regression_stats_count_each_answer_before_its_client_has_it() {
    let _dog = Watchdog::new("logon counts", Duration::from_secs(120));
    let dir = TempDir::new("hs-counts");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    let coordinator = Channel::anonymous(unique_name("hs-counts"))
        .workers(1)
        .create()
        .unwrap();
    let offer = coordinator.offer().unwrap();
    let server =
        ChannelServer::bind(dir.join("logon.sock"), HandshakeOptions::default(), offer).unwrap();
    for i in 1..=200u64 {
        match connect(server.path(), &worker_logon(5), Duration::from_secs(5)) {
            Err(Error::Handshake(HandshakeError::Rejected { code, .. })) => {
                assert_eq!(code, "REJECT_CODE_RANK_OUT_OF_RANGE")
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        assert_eq!(server.stats().rejected, i, "logon {i}");
    }
    let session = connect(server.path(), &worker_logon(0), Duration::from_secs(5)).unwrap();
    assert_eq!(server.stats().accepted, 1);
    drop(session);
}

#[test]
fn a_logon_frame_over_the_limit_or_of_garbage_is_refused_as_malformed() {
    let _dog = Watchdog::new("malformed logons", Duration::from_secs(60));
    let dir = TempDir::new("hs-malformed");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    let coordinator = Channel::anonymous(unique_name("hs-malformed"))
        .workers(1)
        .create()
        .unwrap();
    let offer = coordinator.offer().unwrap();
    let server =
        ChannelServer::bind(dir.join("logon.sock"), HandshakeOptions::default(), offer).unwrap();
    // 1 MiB announced (the limit is 4 KiB); a frame whose body is no Logon.
    for bytes in [
        &(1u32 << 20).to_le_bytes()[..],
        &[2, 0, 0, 0, 0x0f, 0x00][..],
    ] {
        let mut stream = std::os::unix::net::UnixStream::connect(server.path()).unwrap();
        stream.write_all(bytes).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut scratch = Vec::new();
        let reply: nodeipc_proto::handshake::LogonReply =
            nodeipc_proto::read_frame(&mut stream, 64 << 10, &mut scratch).unwrap();
        match reply.reply {
            Some(nodeipc_proto::handshake::logon_reply::Reply::Reject(reject)) => {
                assert_eq!(
                    reject.code,
                    nodeipc_proto::handshake::RejectCode::Malformed as i32
                );
                assert!(!reject.reason.is_empty());
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert_eq!(server.stats().rejected, 2);
    assert_eq!(server.stats().accepted, 0);
}
