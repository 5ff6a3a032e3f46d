//! Names with control characters are refused by every layer that takes a
//! name, before any system call: they would become files under `/dev/shm`
//! and words in logs and `nodeipc ls`, where a newline forges a line and an
//! escape sequence rewrites a terminal.

use std::time::Duration;

use nodeipc_barrier::{Error as GroupError, Group, GroupOptions};
use nodeipc_sem::{Error as SemError, NamedSemaphore};
use nodeipc_testkit::{shm_leftovers, unique_name};

const BAD: [&str; 5] = ["\n", "\r", "\x1b[2J", "\x7f", "\u{9b}"];

#[test]
fn regression_semaphore_names_with_control_characters_are_refused() {
    let base = unique_name("sem-ctl");
    for bad in BAD {
        let name = format!("{base}{bad}x");
        for result in [
            NamedSemaphore::create(&name, 0).map(drop),
            NamedSemaphore::open(&name).map(drop),
            NamedSemaphore::open_wait(&name, Duration::from_secs(5)).map(drop),
        ] {
            match result {
                Err(SemError::InvalidName { reason, .. }) => {
                    assert!(reason.contains("control character"), "{name:?}: {reason}")
                }
                other => panic!("{name:?}: expected InvalidName, got {other:?}"),
            }
        }
    }
    assert!(
        shm_leftovers(&base).is_empty(),
        "{:?}",
        shm_leftovers(&base)
    );
}

#[test]
fn regression_group_names_with_control_characters_are_refused() {
    let base = unique_name("group-ctl");
    for bad in BAD {
        let name = format!("{base}{bad}x");
        let options = GroupOptions::new(&name, 0, 1).timeout(Duration::from_secs(5));
        match Group::join(options) {
            Err(error @ GroupError::InvalidOptions { .. }) => {
                assert!(error.to_string().contains("control character"), "{error}")
            }
            other => panic!("{name:?}: expected InvalidOptions, got {other:?}"),
        }
    }
    assert!(
        shm_leftovers(&base).is_empty(),
        "{:?}",
        shm_leftovers(&base)
    );
}
