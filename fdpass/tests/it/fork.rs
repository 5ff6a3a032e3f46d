//! A listener copied into a forked child: the child's drop closes its
//! descriptor and leaves the socket file.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use nodeipc_fdpass::Listener;
use nodeipc_testkit::{TempDir, Watchdog, fork_child};

#[test]
fn regression_a_listener_dropped_in_a_forked_child_leaves_the_socket() {
    let _dog = Watchdog::new(
        "listener dropped in a forked child",
        Duration::from_secs(60),
    );
    let dir = TempDir::new("fork-listener");
    let path = dir.join("sock");
    let mut listener = Some(Listener::bind(&path).unwrap());
    let code = fork_child("listener", Duration::from_secs(20), || {
        drop(listener.take());
        0
    });
    assert_eq!(code, 0);
    let listener = listener.unwrap();
    assert!(
        path.exists(),
        "the child's drop removed the parent's socket"
    );
    let _client = UnixStream::connect(&path).expect("the parent's socket still listens");
    assert!(listener.accept().unwrap().is_some());
    drop(listener);
    assert!(!path.exists(), "the parent's drop removes it");
}
