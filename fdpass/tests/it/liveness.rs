//! The one liveness policy: a killed process its parent has not reaped yet
//! (a zombie, whose pid and start time are unchanged) is dead on the first
//! look, by `peer_alive`, by a fresh `PeerWatch` and by a record's take-over.

use std::process::Command;
use std::time::Duration;

use nodeipc_fdpass::{Identity, PeerRecord, PeerWatch, Taken, peer_alive, process_start_time};
use nodeipc_testkit::{Watchdog, spawn_child};

#[test]
fn a_killed_process_not_yet_reaped_is_dead_on_the_first_look() {
    let _dog = Watchdog::new(
        "a_killed_process_not_yet_reaped_is_dead_on_the_first_look",
        Duration::from_secs(30),
    );
    let mut child = spawn_child(Command::new("sleep").arg("30"));
    let pid = child.id();
    let zombie = Identity {
        pid,
        start_time: process_start_time(pid).unwrap(),
    };
    let mut watched = PeerWatch::new();
    assert!(watched.alive(zombie).unwrap(), "alive before the kill");
    child.kill_unreaped(Duration::from_secs(10));
    // Its stat file still names it, with the same start time.
    assert_eq!(process_start_time(pid).unwrap(), zombie.start_time);
    assert!(!peer_alive(pid, zombie.start_time).unwrap());
    assert!(!peer_alive(pid, 0).unwrap(), "joining: the pid alone");
    assert!(!PeerWatch::new().alive(zombie).unwrap(), "a fresh watch");
    assert!(!watched.alive(zombie).unwrap(), "the pidfd held since");
    // A place it held is taken over before its parent reaps it.
    let record = PeerRecord::default();
    assert_eq!(record.take(zombie, false).unwrap(), Taken::Vacant);
    let me = Identity::current().unwrap();
    assert_eq!(record.take(me, true).unwrap(), Taken::FromDead(pid));
    assert_eq!(record.holder(), Some(me));
}
