//! The handshake between processes: workers log on, receive the regions as
//! descriptors and serve; a client of another uid is refused on both sides.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_channel::{All, Channel, ChannelServer, HandshakeOptions};
use nodeipc_proto::execute::ExecuteRequest;
use nodeipc_testkit::{
    NOBODY, TempDir, Watchdog, is_root, shm_leftovers, skip, spawn_child, unique_name,
};

fn private_dir() -> TempDir {
    let dir = TempDir::new("hsproc");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

#[test]
fn four_worker_processes_log_on_and_serve_1000_requests() {
    let _dog = Watchdog::new("handshake workers", Duration::from_secs(120));
    let dir = private_dir();
    let name = unique_name("hsw");
    let coordinator = Channel::anonymous(&name)
        .workers(4)
        .depth(2)
        .timeout(Duration::from_secs(20))
        .create()
        .unwrap();
    let offer = coordinator.offer().unwrap();
    let server =
        ChannelServer::bind(dir.join("logon.sock"), HandshakeOptions::default(), offer).unwrap();
    let path = server.path().to_str().unwrap().to_owned();
    let workers: Vec<_> = (0..4)
        .map(|rank| {
            spawn_child(
                Command::new(env!("CARGO_BIN_EXE_worker"))
                    .args(["handshake", &path, &rank.to_string(), "1000"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped()),
            )
        })
        .collect();
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    assert_eq!(server.stats().accepted, 4);
    for sequence in 0..1000 {
        coordinator
            .send(&ExecuteRequest {
                sequence,
                execute_type: 2,
                ..Default::default()
            })
            .unwrap();
        let responses = coordinator.recv(All).unwrap();
        assert!(responses.iter().all(|r| r.sequence == sequence));
    }
    for (rank, worker) in workers.into_iter().enumerate() {
        let out = worker.output_timeout(Duration::from_secs(20));
        assert!(
            out.status.success(),
            "worker {rank}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    drop(server);
    assert!(
        !dir.join("logon.sock").exists(),
        "the socket file outlived the server"
    );
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_client_of_another_uid_is_refused() {
    let _dog = Watchdog::new("handshake other uid", Duration::from_secs(60));
    if !is_root() {
        skip(
            "a_client_of_another_uid_is_refused",
            "needs root to drop privileges",
        );
        return;
    }
    let dir = private_dir();
    let coordinator = Channel::anonymous(unique_name("hsu"))
        .workers(1)
        .create()
        .unwrap();
    let offer = coordinator.offer().unwrap();
    let server =
        ChannelServer::bind(dir.join("logon.sock"), HandshakeOptions::default(), offer).unwrap();
    let path = server.path().to_str().unwrap().to_owned();
    let as_nobody = || {
        spawn_child(
            Command::new(env!("CARGO_BIN_EXE_worker"))
                .args(["handshake", &path, "0", "1"])
                .uid(NOBODY.0)
                .gid(NOBODY.1)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .output_timeout(Duration::from_secs(20))
    };
    // As set up (socket 0600 in a 0700 directory), the stranger cannot even reach it.
    let out = as_nobody();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ermission denied"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Opened up by mistake, the server still refuses the stranger's uid, and
    // the stranger refuses a server of another uid.
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o711)).unwrap();
    std::fs::set_permissions(server.path(), PermissionsExt::from_mode(0o777)).unwrap();
    let out = as_nobody();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        stdout.contains("refusing peer") && stdout.contains("uid 0"),
        "{stdout}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.stats().rejected == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        server.stats().rejected,
        1,
        "the server did not refuse uid {}",
        NOBODY.0
    );
    assert_eq!(server.stats().accepted, 0);
}
