//! One group of C++ ranks (tests/c/group_rank.cpp, through nodeipc.hpp and
//! the C ABI) and Rust ranks (nodeipc_barrier directly): barrier,
//! all_gather, exchange_fds, broadcast_fd and a barrier of the first two
//! ranks, every rank checking what it got from the others.

use crate::common;

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child, unique_name};

fn memfd_saying(text: &str) -> OwnedFd {
    let fd = rustix::fs::memfd_create("mixed-group", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let mut file = std::fs::File::from(fd);
    file.write_all(text.as_bytes()).unwrap();
    file.into()
}

fn contents(fd: OwnedFd) -> String {
    let mut buf = [0u8; 64];
    let n = std::fs::File::from(fd).read_at(&mut buf, 0).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// What group_rank.cpp does, in Rust.
fn rust_rank(name: &str, rank: u32, world: u32) -> nodeipc_barrier::Result<()> {
    let options = GroupOptions::new(name, rank, world).timeout(Duration::from_secs(20));
    let mut group = Group::join(options)?;
    group.barrier()?;
    let all = group.all_gather(format!("rank {rank:03}").as_bytes())?;
    for (r, theirs) in all.iter().enumerate() {
        assert_eq!(theirs, format!("rank {r:03}").as_bytes(), "rank {rank}");
    }
    let mine = memfd_saying(&format!("memfd of rank {rank}"));
    for (r, fd) in group.exchange_fds(mine.as_fd())?.into_iter().enumerate() {
        match fd {
            None => assert_eq!(r as u32, rank),
            Some(fd) => assert_eq!(contents(fd), format!("memfd of rank {r}")),
        }
    }
    for root in [1, 0] {
        let data = (rank == root).then(|| memfd_saying(&format!("broadcast from {root}")));
        let got = group.broadcast_fd(root, data.as_ref().map(AsFd::as_fd))?;
        assert_eq!(
            contents(got),
            format!("broadcast from {root}"),
            "rank {rank}"
        );
    }
    if rank < 2 {
        group.barrier_subset(2)?;
    }
    group.barrier()
}

#[test]
fn cpp_and_rust_ranks_share_one_group() {
    let _dog = Watchdog::new(
        "cpp_and_rust_ranks_share_one_group",
        Duration::from_secs(90),
    );
    let dir = TempDir::new("capi-mixed");
    let Some(program) = common::compile("group_rank.cpp", &dir) else {
        return;
    };
    let name = unique_name("mixed");
    let world = 4;
    // Ranks 0 and 2 are Rust (rank 0 creates the group), 1 and 3 C++.
    let cpp: Vec<_> = [1u32, 3]
        .iter()
        .map(|rank| {
            let mut command = Command::new(&program);
            command
                .args([name.clone(), rank.to_string(), world.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            (*rank, spawn_child(&mut command))
        })
        .collect();
    let rust: Vec<_> = [0u32, 2]
        .iter()
        .map(|&rank| {
            let name = name.clone();
            std::thread::spawn(move || rust_rank(&name, rank, world))
        })
        .collect();
    for (rank, child) in cpp {
        let out = child.output_timeout(Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("rank {rank} ok")),
            "C++ rank {rank}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for thread in rust {
        thread
            .join()
            .expect("Rust rank panicked")
            .expect("Rust rank");
    }
    assert!(shm_leftovers(&name).is_empty());
}
