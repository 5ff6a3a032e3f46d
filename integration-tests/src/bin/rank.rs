//! One rank of a group, for the barrier tests: `rank MODE NAME RANK WORLD
//! TRANSPORT [ARGS]`. Prints one line on stdout — `ok`, or the error's
//! variant and message — and exits 0 on success, 2 on a group error.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_barrier::{Error, Group, GroupOptions, TransportChoice};
use nodeipc_shm::{OpenOptions, Region};

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
    let options = GroupOptions::new(name.as_str(), rank.parse().unwrap(), world.parse().unwrap())
        .timeout(Duration::from_secs(60))
        .transport(transport);
    let result = Group::join(options).and_then(|group| match mode.as_str() {
        "soak" => soak(group, rest),
        "hang-after" => hang_after(group, rest),
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
/// after), then all-gathers, broadcasts and descriptor exchanges checked by content.
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
        }
    }
    println!("transport {:?}", group.transport());
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
