//! A peer killed with SIGKILL is seen gone through the session, within 1 s,
//! on either side.

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nodeipc_handshake::{FdKind, HandshakeOptions, HandshakeServer, Offer, logon};
use nodeipc_testkit::{ChildGuard, TempDir, Watchdog, spawn_child, this_test_in_a_child};

const CLIENT: &str = "NODEIPC_HS_DEATH_CLIENT";
const SERVER: &str = "NODEIPC_HS_DEATH_SERVER";

fn offer() -> Offer {
    Offer::new().fd(
        FdKind::Other,
        "pipe",
        0,
        std::io::pipe().expect("pipe").0.into(),
    )
}

/// Waits until the child prints `word` on a line of its own.
fn wait_for_line(child: &mut ChildGuard, word: &str) {
    let stdout = child.child().stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let found = lines.any(|l| l.map(|l| l.contains(word)).unwrap_or(false));
    assert!(found, "the child never said {word}");
    // Keep reading so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
}

fn kill9(child: &ChildGuard) -> Instant {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill -9");
    Instant::now()
}

#[test]
fn a_client_killed_with_sigkill_is_seen_gone_by_the_server_within_a_second() {
    if let Ok(path) = std::env::var(CLIENT) {
        let session =
            nodeipc_handshake::connect(&path, &logon(&[], Vec::new()), Duration::from_secs(5))
                .expect("logon");
        println!("LOGGED-ON {}", session.fds.len());
        std::thread::sleep(Duration::from_secs(30));
        return;
    }
    let _dog = Watchdog::new("client killed", Duration::from_secs(60));
    let dir = TempDir::new("hs-kill-client");
    let (sent, sessions) = mpsc::channel();
    let server = HandshakeServer::bind_sessions(
        dir.join("logon.sock"),
        HandshakeOptions::default(),
        |_, _| Ok(offer()),
        move |s| {
            let _ = sent.send(s);
        },
    )
    .unwrap();
    let mut command = this_test_in_a_child(&nodeipc_testkit::test_path(
        module_path!(),
        "a_client_killed_with_sigkill_is_seen_gone_by_the_server_within_a_second",
    ));
    command.env(CLIENT, server.path());
    let mut child = spawn_child(&mut command);
    wait_for_line(&mut child, "LOGGED-ON 1");
    let session = sessions.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(session.peer.pid, child.id());
    assert!(session.link.is_alive());
    let killed = kill9(&child);
    let gone = session.link.wait_gone(Duration::from_secs(1));
    let took = killed.elapsed();
    assert!(gone.is_some(), "the server did not see its client die");
    assert!(took < Duration::from_secs(1), "{took:?}");
    println!("server saw the killed client gone ({gone:?}) after {took:?}");
}

#[test]
fn a_server_killed_with_sigkill_is_seen_gone_by_the_client_within_a_second() {
    if let Ok(path) = std::env::var(SERVER) {
        let (sent, sessions) = mpsc::channel();
        let _server = HandshakeServer::bind_sessions(
            &path,
            HandshakeOptions::default(),
            |_, _| Ok(offer()),
            move |s| {
                let _ = sent.send(s);
            },
        )
        .expect("bind");
        println!("SERVING");
        let _held = sessions.recv_timeout(Duration::from_secs(30));
        std::thread::sleep(Duration::from_secs(30));
        return;
    }
    let _dog = Watchdog::new("server killed", Duration::from_secs(60));
    let dir = TempDir::new("hs-kill-server");
    let path = dir.join("logon.sock");
    let mut command = this_test_in_a_child(&nodeipc_testkit::test_path(
        module_path!(),
        "a_server_killed_with_sigkill_is_seen_gone_by_the_client_within_a_second",
    ));
    command.env(SERVER, &path);
    let mut child = spawn_child(&mut command);
    wait_for_line(&mut child, "SERVING");
    let session =
        nodeipc_handshake::connect(&path, &logon(&[], Vec::new()), Duration::from_secs(5)).unwrap();
    assert_eq!(session.server.pid, child.id());
    // The server holds the session: it is alive for a while.
    assert_eq!(session.wait_server_gone(Duration::from_millis(100)), None);
    let killed = kill9(&child);
    let gone = session.wait_server_gone(Duration::from_secs(1));
    let took = killed.elapsed();
    assert!(gone.is_some(), "the client did not see its server die");
    assert!(took < Duration::from_secs(1), "{took:?}");
    println!("client saw the killed server gone ({gone:?}) after {took:?}");
}
