//! The `SCM_RIGHTS` transport's socket directory is private from the moment
//! it exists: made 0700 by the `mkdir` itself, never `mkdir` then `chmod`
//! (a window, under a loose umask, in which anyone could plant a socket or
//! a link in it).
//!
//! Proven in a child process under umask 000 with every `chmod` denied
//! (`deny_chmod`): code that loosens then tightens fails there, code that
//! creates with the right mode does not.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nodeipc_barrier::{Group, GroupOptions, Transport, TransportChoice};
use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, deny_chmod, shm_leftovers, spawn_child, unique_name};

/// Set in the child: the group name it runs under umask 000 and `deny_chmod`.
const CHILD: &str = "NODEIPC_BARRIER_TEST_NO_CHMOD";
const TEST: &str = "regression_the_socket_directory_is_0700_from_its_mkdir_under_umask_000";

#[test]
fn regression_the_socket_directory_is_0700_from_its_mkdir_under_umask_000() {
    if let Ok(name) = std::env::var(CHILD) {
        println!();
        rustix::process::umask(rustix::fs::Mode::empty());
        deny_chmod();
        two_ranks_exchange_descriptors_over_scm_rights(&name);
        println!("child: descriptors exchanged");
        return;
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let name = unique_name("bar-nochmod");
    let out = spawn_child(
        nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), TEST))
            .env(CHILD, &name),
    )
    .output_timeout(Duration::from_secs(30));
    let context = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed: {context}");
    assert!(
        context.contains("child: descriptors exchanged"),
        "the child did not run: {context}"
    );
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

/// Two ranks as threads, `SCM_RIGHTS` forced: each sends a memfd holding
/// its rank and reads the other's.
fn two_ranks_exchange_descriptors_over_scm_rights(name: &str) {
    let name: Arc<str> = name.into();
    let ranks: Vec<_> = (0..2u32)
        .map(|rank| {
            let name = Arc::clone(&name);
            thread::spawn(move || {
                let options = GroupOptions::new(&*name, rank, 2)
                    .timeout(Duration::from_secs(20))
                    .transport(TransportChoice::ScmRights);
                let mut group = Group::join(options).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                assert_eq!(group.transport(), Transport::ScmRights);
                let mine = Region::anonymous(4096).unwrap();
                mine.write_at(0, &[rank as u8 + 1]).unwrap();
                let fds = group
                    .exchange_fds(mine.as_fd())
                    .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                let other = 1 - rank;
                let fd = fds.into_iter().nth(other as usize).flatten();
                let theirs = Region::from_fd(fd.expect("the other rank's memfd")).unwrap();
                let mut byte = [0u8];
                theirs.read_at(0, &mut byte).unwrap();
                assert_eq!(byte[0], other as u8 + 1, "rank {rank} got another's memfd");
            })
        })
        .collect();
    for rank in ranks {
        rank.join().expect("rank thread");
    }
}
