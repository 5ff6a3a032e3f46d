//! The fork generation, and a listener copied into a forked child: the
//! child's drop closes its descriptor and leaves the socket file.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use nodeipc_fdpass::{ForkGeneration, Listener};
use nodeipc_testkit::{TempDir, Watchdog, fork_child};

#[test]
fn a_forked_child_sees_its_parents_generation_as_forked() {
    let _dog = Watchdog::new("fork generation", Duration::from_secs(60));
    let born = ForkGeneration::current();
    assert!(!born.is_forked());
    assert_eq!(born.pid(), std::process::id());
    let code = fork_child("generation", Duration::from_secs(20), || {
        let here = ForkGeneration::current();
        // The parent's handle is forked; a handle made here is not, until
        // this child forks in turn.
        let grandchild = fork_child("grandchild", Duration::from_secs(10), || {
            i32::from(!(born.is_forked() && here.is_forked()))
        });
        let forked = born.check("the parent's region").unwrap_err();
        let named = forked.to_string().contains("the parent's region")
            && forked.parent == born.pid()
            && forked.child == std::process::id();
        i32::from(!(born.is_forked() && !here.is_forked() && grandchild == 0 && named))
    });
    assert_eq!(code, 0);
    assert!(!born.is_forked(), "the parent took itself for a child");
}

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
