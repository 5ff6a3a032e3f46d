//! Two real processes per pool: blocks allocated in one and freed in the
//! other go back to their owner; a SIGKILLed handle's slabs are adopted,
//! its live blocks kept until freed.

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::thread;
use std::time::Duration;

use nodeipc_pool::{BlockRef, Error, Handle, Pool, PoolConfig};
use nodeipc_testkit::{
    ChildGuard, Watchdog, shm_leftovers, spawn_child, this_test_in_a_child, unique_name,
};

const CHILD: &str = "NODEIPC_POOL_CHILD";
const T: Duration = Duration::from_secs(5);
/// How long a child at the lowest priority may take to start working.
const STARTUP: Duration = Duration::from_secs(60);

fn pattern(block: BlockRef) -> Vec<u8> {
    (0..256u32)
        .map(|i| (block.to_bits() as u32 ^ i.wrapping_mul(31)) as u8)
        .collect()
}

/// What a child does, told by `NODEIPC_POOL_CHILD="<action> <name> <refs…>"`.
#[test]
fn child_main() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let (action, name) = (parts[0], parts[1]);
    match action {
        "check-and-free" => {
            let mut h = Handle::open_free_only(name, T).unwrap();
            let blocks: Vec<BlockRef> = parts[2..]
                .iter()
                .map(|b| BlockRef::from_bits(b.parse().unwrap()))
                .collect();
            for &b in &blocks {
                let mut buf = [0u8; 256];
                h.read_at(b, 0, &mut buf).unwrap();
                assert_eq!(buf.to_vec(), pattern(b));
            }
            h.free_batch(&blocks).unwrap();
            println!("ready");
        }
        "alloc-then-hang" => {
            let mut h = Handle::open(name, T).unwrap();
            let blocks: Vec<BlockRef> = (0..20).map(|_| h.alloc(256).unwrap()).collect();
            for &b in &blocks[5..] {
                h.write_at(b, 0, &pattern(b)).unwrap();
            }
            for &b in &blocks[..5] {
                h.free(b).unwrap();
            }
            let live: Vec<String> = blocks[5..]
                .iter()
                .map(|b| b.to_bits().to_string())
                .collect();
            println!("live {}", live.join(" "));
            println!("ready");
            thread::sleep(Duration::from_secs(60));
        }
        "mixed-then-hang" => {
            // One slab of 256-byte blocks kept live, one of 4 KiB freed whole.
            let mut h = Handle::open(name, T).unwrap();
            let live: Vec<BlockRef> = (0..20).map(|_| h.alloc(256).unwrap()).collect();
            let page = h.alloc(4096).unwrap();
            let kept = h.alloc(4096).unwrap();
            h.free(page).unwrap();
            let live: Vec<String> = live.iter().map(|b| b.to_bits().to_string()).collect();
            println!("live {}", live.join(" "));
            // Handed to the parent, which frees it after our death.
            println!("kept {}", kept.to_bits());
            println!("ready");
            thread::sleep(Duration::from_secs(60));
        }
        "free-batch" => {
            // One batch, at once: the parent kills us while it is marking.
            // The parent's blocks: COUNT fresh 256-byte blocks from DATA_AT
            // (generation 1), as the README's layout and reference say.
            let mut h = Handle::open_free_only(name, T).unwrap();
            let (data_at, count): (u64, u64) =
                (parts[2].parse().unwrap(), parts[3].parse().unwrap());
            let blocks: Vec<BlockRef> = (0..count)
                .map(|i| BlockRef::from_bits(1 << 40 | (data_at + 256 * i)))
                .collect();
            h.free_batch(&blocks).unwrap();
            println!("freed");
            thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown child action {other}"),
    }
}

fn child(spec: String) -> ChildGuard {
    let mut command =
        this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), "child_main"));
    command.env(CHILD, spec);
    spawn_child(&mut command)
}

/// The child's lines up to "ready".
fn lines_until_ready(child: &mut ChildGuard) -> Vec<String> {
    let stdout = child.child().stdout.take().expect("piped stdout");
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("child stdout");
        if line.ends_with("ready") {
            return lines;
        }
        lines.push(line);
    }
    panic!("child ended without saying ready: {lines:?}");
}

#[test]
fn blocks_freed_in_another_process_return_to_their_owner() {
    let _dog = Watchdog::new(
        "blocks_freed_in_another_process_return_to_their_owner",
        Duration::from_secs(60),
    );
    let name = unique_name("pool-remote");
    let pool = Pool::create(&name, &PoolConfig::new(8, 2)).unwrap();
    let mut owner = pool.handle().unwrap();
    let blocks: Vec<BlockRef> = (0..100).map(|_| owner.alloc(256).unwrap()).collect();
    for &b in &blocks {
        owner.write_at(b, 0, &pattern(b)).unwrap();
    }
    let refs: Vec<String> = blocks.iter().map(|b| b.to_bits().to_string()).collect();
    let mut freer = child(format!("check-and-free {name} {}", refs.join(" ")));
    assert!(freer.wait_timeout(T).success());
    assert_eq!(owner.occupancy().unwrap(), 100, "freed, not yet cleaned up");
    assert_eq!(owner.clean_remote_frees().unwrap(), 100);
    assert_eq!(owner.occupancy().unwrap(), 0);
    // The stale references are refused now.
    assert!(owner.free(blocks[0]).is_err());
    drop((owner, pool));
    assert!(shm_leftovers("pool-remote").is_empty());
}

/// The blocks a child reported still holding, on its `live ...` line.
fn live_blocks(lines: &[String]) -> Vec<BlockRef> {
    lines
        .iter()
        .find_map(|l| l.split_once("live ").map(|(_, refs)| refs))
        .expect("the child's live blocks")
        .split(' ')
        .map(|b| BlockRef::from_bits(b.parse().unwrap()))
        .collect()
}

#[test]
fn a_killed_handles_slabs_are_adopted_and_its_live_blocks_kept() {
    let _dog = Watchdog::new(
        "a_killed_handles_slabs_are_adopted_and_its_live_blocks_kept",
        Duration::from_secs(60),
    );
    let name = unique_name("pool-reclaim");
    let pool = Pool::create(&name, &PoolConfig::new(8, 2)).unwrap();
    let mut survivor = pool.handle().unwrap();
    let mut doomed = child(format!("alloc-then-hang {name}"));
    let lines = lines_until_ready(&mut doomed);
    let live = live_blocks(&lines);
    assert_eq!(live.len(), 15);
    let pid = doomed.id();
    let before = survivor.occupancy_all().unwrap();
    assert_eq!(before[1].pid, pid);
    assert_eq!(before[1].blocks, 15);
    // Alive: nothing to reclaim.
    assert_eq!(survivor.reclaim_dead().unwrap().handles, 0);
    doomed.kill();
    let reclaimed = survivor.reclaim_dead().unwrap();
    assert_eq!(reclaimed.handles, 1);
    assert_eq!(reclaimed.slabs, 1);
    assert_eq!(reclaimed.blocks, 256 - 15, "its free blocks are ours now");
    // The dead handle's live blocks are still live (and ours): their data intact.
    assert_eq!(survivor.occupancy().unwrap(), 15);
    for &b in &live {
        let mut buf = [0u8; 256];
        survivor.read_at(b, 0, &mut buf).unwrap();
        assert_eq!(buf.to_vec(), pattern(b));
        survivor.free(b).unwrap();
    }
    let after = survivor.occupancy_all().unwrap();
    assert!(after.iter().all(|o| o.blocks == 0), "{after:?}");
    assert_eq!(after[1].pid, 0, "the dead handle's slot is free again");
    // And a new process can take it.
    let _next = pool.handle().unwrap();
}

/// A dead handle's slab with no live block (its last one freed remotely
/// after the death) goes back to the pool rather
/// than to the reclaimer, so handles that die and are replaced do not use
/// the slabs up; it keeps its class (a stale reference into it must still
/// be told by its generation), while a slab never allocated from takes any.
#[test]
fn a_dead_handles_empty_slabs_go_back_to_the_pool_keeping_their_class() {
    let _dog = Watchdog::new(
        "a_dead_handles_empty_slabs_go_back_to_the_pool_keeping_their_class",
        Duration::from_secs(60),
    );
    let name = unique_name("pool-release");
    let pool = Pool::create(&name, &PoolConfig::new(3, 2)).unwrap();
    let mut survivor = pool.handle().unwrap();
    let mut doomed = child(format!("mixed-then-hang {name}"));
    let lines = lines_until_ready(&mut doomed);
    let live = live_blocks(&lines);
    let kept = lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("kept ")
                .or_else(|| l.split_once("kept ").map(|(_, b)| b))
        })
        .map(|b| BlockRef::from_bits(b.parse().unwrap()))
        .expect("the child's kept block");
    doomed.kill();
    // Freed after its owner's death: a remote free nobody cleans up but the
    // reclaim, which takes it back, finds the slab empty and hands it back.
    survivor.free(kept).unwrap();
    let reclaimed = survivor.reclaim_dead().unwrap();
    assert_eq!(
        (reclaimed.handles, reclaimed.slabs, reclaimed.released),
        (1, 1, 1),
        "{reclaimed:?}"
    );
    assert_eq!(reclaimed.blocks, 256 - 20);
    assert_eq!(survivor.occupancy().unwrap(), 20);
    // The third slab was never used: it takes any class.
    let kib = survivor.alloc(1024).unwrap();
    // The released one was a slab of 4 KiB blocks: not for 2 KiB ones…
    assert!(matches!(
        survivor.alloc(2048),
        Err(Error::Full { class: 2048, .. })
    ));
    // …but for 4 KiB ones again.
    let page = survivor.alloc(4096).unwrap();
    for b in live.into_iter().chain([kib, page]) {
        survivor.free(b).unwrap();
    }
    assert_eq!(survivor.occupancy().unwrap(), 0);
}

/// A handle's holder killed and not yet reaped (a zombie: its pid and
/// start time unchanged) is dead on the first look: a joiner takes its
/// slot over and `reclaim_dead` releases it before its parent reaps it
/// (the pool once took it for alive until then, so a replacement found no
/// handle free and nothing was reclaimed).
#[test]
fn regression_a_killed_holder_not_yet_reaped_is_dead_on_the_first_look() {
    let _dog = Watchdog::new(
        "regression_a_killed_holder_not_yet_reaped_is_dead_on_the_first_look",
        Duration::from_secs(60),
    );
    let name = unique_name("pool-zombie");
    let pool = Pool::create(&name, &PoolConfig::new(8, 3)).unwrap();
    let mut survivor = pool.handle().unwrap();
    let mut doomed: Vec<ChildGuard> = (0..2)
        .map(|_| {
            let mut doomed = child(format!("alloc-then-hang {name}"));
            lines_until_ready(&mut doomed);
            doomed
        })
        .collect();
    let pids: Vec<u32> = doomed.iter().map(ChildGuard::id).collect();
    let held =
        |h: &Handle| -> Vec<u32> { h.occupancy_all().unwrap().iter().map(|o| o.pid).collect() };
    assert_eq!(held(&survivor)[1..], pids[..]);
    for zombie in &mut doomed {
        zombie.kill_unreaped(T);
    }
    // A replacement takes a zombie's slot, adopting its 15 live blocks.
    let replacement = Handle::open(&name, T).unwrap();
    let taken = replacement.index().unwrap();
    assert!(taken >= 1);
    assert_eq!(replacement.occupancy().unwrap(), 15);
    // The reclaim releases the other one.
    let reclaimed = survivor.reclaim_dead().unwrap();
    assert_eq!(reclaimed.handles, 1, "{reclaimed:?}");
    assert_eq!(held(&survivor)[(3 - taken) as usize], 0);
    drop(doomed);
    drop((replacement, survivor, pool));
    assert!(shm_leftovers(&name).is_empty());
}

/// A freer SIGKILLed in the middle of a batch of remote frees leaves no
/// block that the owner's clean-up cannot find: each block is either freed
/// (its bit set, the owner takes it back) or still allocated (the holder,
/// or the owner, can free it again). The bits once came after the marks:
/// a kill in between left blocks marked freed that no bit pointed to, held
/// for good, as the scheduler session's TPU handle once found ("blocks
/// still held", its own handle, after a scheduler was killed mid-batch).
#[test]
fn regression_a_freer_killed_mid_batch_leaves_no_block_stranded() {
    let _dog = Watchdog::new(
        "regression_a_freer_killed_mid_batch_leaves_no_block_stranded",
        Duration::from_secs(300),
    );
    // Slabs × 256 blocks of 256 bytes, all allocated by the owner (handle
    // 0 of 1), freed by the child in one batch in allocation order.
    const SLABS: u32 = 256;
    let descriptors_at = 128 + 64 + 64 * SLABS as usize;
    for attempt in 1..=20 {
        let name = unique_name("pool-midbatch");
        let pool = Pool::create(&name, &PoolConfig::new(SLABS, 1)).unwrap();
        let mut owner = pool.handle().unwrap();
        let blocks: Vec<BlockRef> = (0..SLABS * 256)
            .map(|_| owner.alloc(256).unwrap())
            .collect();
        let state = |i: usize| {
            pool.region()
                .view::<std::sync::atomic::AtomicU32>(descriptors_at + 4 * i)
                .unwrap()
                .load(std::sync::atomic::Ordering::Acquire)
                & 0xff
        };
        let data_at = blocks[0].offset();
        for (i, b) in blocks.iter().enumerate() {
            assert_eq!(b.to_bits(), 1 << 40 | (data_at + 256 * i as u64));
        }
        // At the lowest priority, so this process's SIGKILL lands while
        // the batch is still marking, even on a loaded machine.
        let mut freer = spawn_child(
            Command::new("nice")
                .args(["-n", "19"])
                .arg(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    &nodeipc_testkit::test_path(module_path!(), "child_main"),
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(
                    CHILD,
                    format!("free-batch {name} {data_at} {}", blocks.len()),
                )
                .stdout(std::process::Stdio::null()),
        );
        // The first block marked: the batch is under way; kill it now. A
        // child at nice 19 on a machine busy with builds may take many
        // seconds to start: how long is not what this test measures.
        let deadline = std::time::Instant::now() + STARTUP;
        while state(0) == 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never freed"
            );
            std::hint::spin_loop();
        }
        freer.kill();
        let marked = (0..blocks.len()).filter(|&i| state(i) == 2).count();
        if marked == blocks.len() {
            eprintln!("attempt {attempt}: the batch finished before the kill; again");
            continue;
        }
        // What the owner does after a holder's death: take back what was
        // freed, free again what was not (refused if it was), take back again.
        owner.clean_remote_frees().unwrap();
        let mut freed_again = 0;
        for &b in &blocks {
            match owner.free(b) {
                Ok(()) => freed_again += 1,
                Err(Error::NotAllocated { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        owner.clean_remote_frees().unwrap();
        let held = owner.occupancy().unwrap();
        assert_eq!(
            held,
            0,
            "killed after marking {marked} of {} blocks: {held} blocks stranded, \
             marked freed with no bit for the owner's clean-up ({freed_again} freed again)",
            blocks.len()
        );
        // All of them can be allocated again.
        for _ in 0..blocks.len() {
            owner.alloc(256).unwrap();
        }
        eprintln!("attempt {attempt}: killed after {marked} marks, nothing stranded");
        drop((owner, pool));
        assert!(shm_leftovers(&name).is_empty());
        return;
    }
    panic!("20 batches of 65536 frees each finished before a SIGKILL sent at their first mark");
}
