//! A handshake server copied into a forked child: dropping it there joins
//! no thread (the parent's accept and logon threads do not exist in the
//! child) and leaves the socket to the parent, which keeps serving — even
//! when the fork comes in the middle of a logon.

use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use nodeipc_handshake::{FdKind, HandshakeOptions, HandshakeServer, Offer, connect, logon};
use nodeipc_testkit::{TempDir, Watchdog, fork_child};
use rustix::event::{EventfdFlags, eventfd};

#[test]
fn regression_a_server_dropped_in_a_forked_child_joins_nothing_and_keeps_serving() {
    let _dog = Watchdog::new("server dropped in a forked child", Duration::from_secs(60));
    let dir = TempDir::new("fork-handshake");
    let path = dir.join("logon.sock");
    // The first logon's decision waits until the test lets it go: the
    // fork happens while a logon thread of the parent is in the middle.
    let (go, gate) = mpsc::channel::<()>();
    let gate = Arc::new(Mutex::new(gate));
    let (entered, in_decide) = mpsc::channel::<()>();
    let entered = Mutex::new(entered);
    let mut server = Some(
        HandshakeServer::bind(&path, HandshakeOptions::default(), move |_, _| {
            let _ = entered.lock().unwrap().send(());
            let _ = gate.lock().unwrap().recv_timeout(Duration::from_secs(20));
            let fd = eventfd(1, EventfdFlags::CLOEXEC).expect("eventfd");
            Ok(Offer::new().fd(FdKind::Pool, "pool", 0, fd))
        })
        .unwrap(),
    );
    let first = {
        let path = path.clone();
        thread::spawn(move || connect(&path, &logon(&[], []), Duration::from_secs(20)))
    };
    in_decide.recv_timeout(Duration::from_secs(20)).unwrap();

    let code = fork_child("handshake server", Duration::from_secs(20), || {
        drop(server.take());
        0
    });
    assert_eq!(code, 0, "the child's drop failed");

    go.send(()).unwrap();
    let mut session = first.join().unwrap().expect("the logon in progress");
    assert!(session.take(FdKind::Pool).is_some());
    assert!(
        path.exists(),
        "the child's drop removed the parent's socket"
    );
    go.send(()).unwrap();
    let mut again = connect(&path, &logon(&[], []), Duration::from_secs(20))
        .expect("the parent's server stopped serving");
    assert!(again.take(FdKind::Pool).is_some());
    drop(server);
    assert!(!path.exists());
}
