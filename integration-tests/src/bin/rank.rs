//! One rank of a group, for the barrier tests: `rank MODE NAME RANK WORLD
//! TRANSPORT [ARGS]`. Prints one last line on stdout — `ok`, or the error's
//! variant and message — and exits 0 on success, 2 on a group error.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_barrier::{Error, Group, GroupOptions, TransportChoice};
use nodeipc_fdpass::{ForeignFd, Pidfd, pidfd_getfd_available};
use nodeipc_shm::{OpenOptions, Region};
use rustix::process::{DumpableBehavior, dumpable_behavior, set_dumpable_behavior};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, name, rank, world, transport, rest @ ..] = args.as_slice() else {
        eprintln!("usage: rank MODE NAME RANK WORLD TRANSPORT [ARGS]");
        return ExitCode::from(1);
    };
    let transport = match transport.as_str() {
        "pidfd" => TransportChoice::Pidfd,
        "scm" => TransportChoice::ScmRights,
        _ => TransportChoice::Auto,
    };
    let rank: u32 = rank.parse().unwrap();
    if mode == "exchange" && rest.first().and_then(|r| r.parse::<u32>().ok()) == Some(rank) {
        // Before joining, so every peer's probe already meets it: a
        // non-dumpable process refuses pidfd_getfd (and ptrace) to peers of
        // its own uid that lack CAP_SYS_PTRACE.
        set_dumpable_behavior(DumpableBehavior::NotDumpable).expect("PR_SET_DUMPABLE 0");
    }
    let options = GroupOptions::new(name.as_str(), rank, world.parse().unwrap())
        .timeout(Duration::from_secs(60))
        .transport(transport);
    let result = Group::join(options).and_then(|group| match mode.as_str() {
        "soak" => soak(group, rest),
        "hang-after" => hang_after(group, rest),
        "subset" => subset(group, rest),
        "exchange" => exchange(group),
        "launched" => launched(group, name),
        _ => panic!("unknown mode {mode}"),
    });
    match result {
        Ok(()) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let variant = format!("{e:?}");
            let variant = variant.split([' ', '{', '(']).next().unwrap_or("?");
            println!("{variant}: {e}");
            ExitCode::from(2)
        }
    }
}

/// `soak COUNTER ITERS`: ITERS barriers with a check that no rank passes
/// early (each adds one to a shared counter before the barrier and checks it
/// after), then all-gathers, broadcasts, descriptor exchanges and descriptor
/// broadcasts (from every rank in turn) checked by content.
fn soak(mut group: Group, args: &[String]) -> Result<(), Error> {
    let [counter_name, iters] = args else {
        panic!("soak COUNTER ITERS")
    };
    let iters: u64 = iters.parse().unwrap();
    let counter_region =
        Region::open(counter_name, OpenOptions::wait(8, Duration::from_secs(10))).unwrap();
    let counter = counter_region.view::<AtomicU64>(0).unwrap();
    let (rank, world) = (group.rank(), u64::from(group.world_size()));
    for i in 0..iters {
        counter.fetch_add(1, Ordering::SeqCst);
        group.barrier()?;
        let seen = counter.load(Ordering::SeqCst);
        assert!(
            seen >= (i + 1) * world,
            "rank {rank} passed barrier {i} early: counter {seen}"
        );
        assert!(
            seen <= (i + 2) * world,
            "rank {rank} saw a rank two barriers ahead: counter {seen}"
        );
    }
    for round in 0..20u32 {
        let mine = format!("rank {rank} round {round}");
        let all = group.all_gather(mine.as_bytes())?;
        for (r, got) in all.iter().enumerate() {
            assert_eq!(got, format!("rank {r} round {round}").as_bytes());
        }
        let root = round % group.world_size();
        let said = group.broadcast(root, format!("from {root} at {round}").as_bytes())?;
        assert_eq!(said, format!("from {root} at {round}").as_bytes());
    }
    descriptor_rounds(&mut group)?;
    println!("transport {:?}", group.transport());
    Ok(())
}

/// `launched`, for a rank of `nodeipc launch` beside ranks in other
/// languages (NAME its `NODEIPC_GROUP`, as it is): all-gathers `rust rank
/// <r> pid <pid>` in 32 bytes (NUL-padded, as the C, C++ and Python ranks
/// of python/tests/test_launched.py pass theirs) and prints `rank <r> pid
/// <pid> in NAME gathered: <each rank's>|...`.
fn launched(mut group: Group, name: &str) -> Result<(), Error> {
    let rank = group.rank();
    let pid = std::process::id();
    let mut mine = [0u8; 32];
    let tag = format!("rust rank {rank} pid {pid}");
    mine[..tag.len()].copy_from_slice(tag.as_bytes());
    let all: Vec<String> = group
        .all_gather(&mine)?
        .iter()
        .map(|slot| {
            let text = slot.split(|&b| b == 0).next().unwrap_or_default();
            String::from_utf8_lossy(text).into_owned()
        })
        .collect();
    println!(
        "rank {rank} pid {pid} in {name} gathered: {}",
        all.join("|")
    );
    Ok(())
}

/// `exchange [UNDUMPABLE]` (the rank numbered UNDUMPABLE made itself
/// non-dumpable before joining, see `main`): prints who this process runs as
/// (`uid U dumpable BOOL`), what a `pidfd_getfd` probe of each peer says now
/// (`probe R yes`, or `probe R no (ERROR)` with the error a real call gets),
/// then runs the descriptor rounds of `soak`, checked by content, and prints
/// `verified N descriptors` and `transport T`.
fn exchange(mut group: Group) -> Result<(), Error> {
    let dumpable = dumpable_behavior().expect("PR_GET_DUMPABLE");
    println!(
        "uid {} dumpable {}",
        rustix::process::geteuid().as_raw(),
        dumpable == DumpableBehavior::Dumpable
    );
    for (r, pid) in group.pids().into_iter().enumerate() {
        if r as u32 == group.rank() {
            continue;
        }
        if pidfd_getfd_available(pid) {
            println!("probe {r} yes");
        } else {
            // What the kernel says to a real call, for the test to check
            // that the refusal is the permission check (EPERM).
            let why = match Pidfd::open(pid).and_then(|p| p.get_fd(ForeignFd::new(i32::MAX))) {
                Ok(_) => "a descriptor came back".to_owned(),
                Err(e) => format!("{e:?}"),
            };
            println!("probe {r} no ({why})");
        }
    }
    let verified = descriptor_rounds(&mut group)?;
    println!("verified {verified} descriptors");
    println!("transport {:?}", group.transport());
    Ok(())
}

/// Descriptor exchanges (three rounds) and descriptor broadcasts (from every
/// rank in turn, twice), every descriptor checked by content; returns how
/// many descriptors this rank received and checked.
fn descriptor_rounds(group: &mut Group) -> Result<u32, Error> {
    let rank = group.rank();
    let mut verified = 0;
    for round in 0..3u8 {
        let region = Region::anonymous(4096).unwrap();
        region.write_at(0, &[rank as u8, round, 0xEE]).unwrap();
        let fds = group.exchange_fds(region.as_fd())?;
        for (r, fd) in fds.into_iter().enumerate() {
            if r as u32 == rank {
                assert!(fd.is_none());
                continue;
            }
            let mut bytes = [0u8; 3];
            Region::from_fd(fd.expect("peer fd"))
                .unwrap()
                .read_at(0, &mut bytes)
                .unwrap();
            assert_eq!(
                bytes,
                [r as u8, round, 0xEE],
                "rank {rank} got rank {r}'s file wrong"
            );
            verified += 1;
        }
    }
    for round in 0..2 * group.world_size() {
        broadcast_fd_round(group, round)?;
        verified += 1;
    }
    Ok(verified)
}

/// One `broadcast_fd` from rank `round % world`, checked by content and by
/// identity: the root broadcasts the (device, inode) of the file it sends,
/// and every rank's descriptor must name that very file, not a copy.
fn broadcast_fd_round(group: &mut Group, round: u32) -> Result<(), Error> {
    let (rank, root) = (group.rank(), round % group.world_size());
    let text = format!("fd from {root} at {round}");
    let mine = (rank == root).then(|| {
        let region = Region::anonymous(4096).unwrap();
        region.write_at(0, text.as_bytes()).unwrap();
        region
    });
    let fd = group.broadcast_fd(root, mine.as_ref().map(Region::as_fd))?;
    let got = file_identity(fd.as_fd());
    let sent = group.broadcast(root, &identity_bytes(got))?;
    assert_eq!(
        sent,
        identity_bytes(got),
        "rank {rank}'s descriptor from root {root} (round {round}) names another file than the root's"
    );
    if let Some(original) = &mine {
        assert_ne!(
            fd.as_raw_fd(),
            original.as_fd().as_raw_fd(),
            "root {root} got its own descriptor back, not a duplicate"
        );
        assert_eq!(
            got,
            file_identity(original.as_fd()),
            "root {root} got back another file than the one it broadcast"
        );
    }
    let region = Region::from_fd(fd).unwrap();
    let mut bytes = vec![0u8; text.len()];
    region.read_at(0, &mut bytes).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        text,
        "rank {rank} read the wrong content from root {root}'s descriptor"
    );
    Ok(())
}

/// Which file a descriptor refers to: (device, inode).
fn file_identity(fd: BorrowedFd<'_>) -> (u64, u64) {
    let metadata = std::fs::File::from(fd.try_clone_to_owned().expect("dup"))
        .metadata()
        .expect("fstat");
    (metadata.dev(), metadata.ino())
}

fn identity_bytes((dev, ino): (u64, u64)) -> Vec<u8> {
    [dev.to_le_bytes(), ino.to_le_bytes()].concat()
}

/// `subset COUNTER N ITERS`: ranks below N do ITERS `barrier_subset(N)`,
/// each adding one to the counter at offset 0 before and checking it after
/// (no rank passes early, none runs two ahead); the other ranks check that
/// `barrier_subset(N)` refuses them and go straight to the full barrier,
/// where they wait while the subset works. Then every rank adds one to the
/// counter at offset 64 and meets the others in a full barrier, after which
/// both counters must be complete. Prints `subset COUNT full COUNT`.
fn subset(group: Group, args: &[String]) -> Result<(), Error> {
    let [counter_name, n, iters] = args else {
        panic!("subset COUNTER N ITERS")
    };
    let (n, iters): (u32, u64) = (n.parse().unwrap(), iters.parse().unwrap());
    let counter_region = Region::open(
        counter_name,
        OpenOptions::wait(128, Duration::from_secs(10)),
    )
    .unwrap();
    let in_subset = counter_region.view::<AtomicU64>(0).unwrap();
    let at_full = counter_region.view::<AtomicU64>(64).unwrap();
    let rank = group.rank();
    let parties = u64::from(n);
    if rank < n {
        for i in 0..iters {
            in_subset.fetch_add(1, Ordering::SeqCst);
            group.barrier_subset(n)?;
            let seen = in_subset.load(Ordering::SeqCst);
            assert!(
                seen >= (i + 1) * parties,
                "rank {rank} passed subset barrier {i} of {n} early: counter {seen}"
            );
            assert!(
                seen <= (i + 2) * parties,
                "rank {rank} saw a rank two subset barriers ahead: counter {seen}"
            );
        }
    } else {
        match group.barrier_subset(n) {
            Err(Error::SubsetOutOfRange { .. }) => {}
            other => panic!("rank {rank} outside the subset of {n} was let in: {other:?}"),
        }
    }
    at_full.fetch_add(1, Ordering::SeqCst);
    group.barrier()?;
    let (subset_count, full_count) = (
        in_subset.load(Ordering::SeqCst),
        at_full.load(Ordering::SeqCst),
    );
    assert_eq!(
        subset_count,
        parties * iters,
        "rank {rank} passed the full barrier before the subset of {n} finished"
    );
    assert_eq!(
        full_count,
        u64::from(group.world_size()),
        "rank {rank} passed the full barrier before every rank arrived"
    );
    println!("subset {subset_count} full {full_count}");
    Ok(())
}

/// `hang-after N`: N barriers, then a barrier the victim never reaches (the
/// victim is the last rank: it sleeps instead, to be killed). Survivors
/// print how long they waited after the victim died.
fn hang_after(group: Group, args: &[String]) -> Result<(), Error> {
    let n: u32 = args[0].parse().unwrap();
    for _ in 0..n {
        group.barrier()?;
    }
    if group.rank() == group.world_size() - 1 {
        std::thread::sleep(Duration::from_secs(120));
        return Ok(());
    }
    let start = Instant::now();
    let result = group.barrier();
    eprintln!("waited {:?}", start.elapsed());
    result
}
