//! Queues and pools on huge pages, where the system has them: this test
//! reserves a few (`/proc/sys/vm/nr_hugepages`, restored by a guard, even
//! on a panic), so it runs in a binary of its own; where that file is not
//! writable (not root, a read-only `/proc/sys`) or the kernel cannot find
//! the memory, it skips saying so. The fallback to normal pages, where
//! none are reserved, is tested in `queue/tests/it/local.rs` and
//! `pool/tests/it/local.rs`.

use std::os::fd::AsFd;
use std::time::Duration;

use nodeipc_pool::{Pool, PoolConfig};
use nodeipc_queue::{Consumer, Pages, Producer, Queue};
use nodeipc_testkit::{Watchdog, skip};

const NR: &str = "/proc/sys/vm/nr_hugepages";
/// Pages asked for: a queue and a pool of 2 MiB pages each, and room.
const WANT: u64 = 8;

fn read_nr() -> Option<u64> {
    std::fs::read_to_string(NR).ok()?.trim().parse().ok()
}

fn huge_pages_free() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Puts `nr_hugepages` back as it found it.
struct Restore(u64);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(NR, self.0.to_string());
    }
}

#[test]
fn a_queue_and_a_pool_get_huge_pages_where_some_are_reserved() {
    let _dog = Watchdog::new("huge pages", Duration::from_secs(60));
    let Some(before) = read_nr() else {
        skip("huge pages", "no /proc/sys/vm/nr_hugepages on this kernel");
        return;
    };
    if let Err(e) = std::fs::write(NR, (before + WANT).to_string()) {
        skip(
            "huge pages",
            &format!("{NR} is not writable here ({e}): the reserved case needs root"),
        );
        return;
    }
    let _restore = Restore(before);
    if huge_pages_free() < 2 {
        skip(
            "huge pages",
            &format!("the kernel found no memory for {WANT} more huge pages (fragmented)"),
        );
        return;
    }

    let queue = Queue::<[u64; 8]>::anonymous_pages(1024, 7, Pages::Huge).expect("huge queue");
    assert!(queue.huge_pages());
    let also = Queue::<[u64; 8]>::anonymous_pages(16, 7, Pages::HugeOrNormal).unwrap();
    assert!(also.huge_pages(), "preferred and available: huge");
    // The peer's end, from the descriptor, sees the same pages.
    let mut tx =
        Producer::<[u64; 8]>::from_fd(queue.as_fd().try_clone_to_owned().unwrap(), 7).unwrap();
    assert!(tx.region().is_huge());
    let mut rx =
        Consumer::<[u64; 8]>::from_fd(queue.as_fd().try_clone_to_owned().unwrap(), 7).unwrap();
    for i in 0..3000u64 {
        assert!(tx.try_push(&[i; 8]).unwrap());
        assert_eq!(rx.try_pop().unwrap(), Some([i; 8]));
    }

    let pool = Pool::anonymous_pages(&PoolConfig::new(16, 2), Pages::Huge).expect("huge pool");
    assert!(pool.huge_pages());
    let mut owner = pool.handle().unwrap();
    let block = owner.alloc(1232).unwrap();
    owner.write_at(block, 0, &[0x5a; 1232]).unwrap();
    let received = Pool::from_fd(pool.region().as_fd().try_clone_to_owned().unwrap()).unwrap();
    assert!(received.huge_pages());
    let reader = received.free_only().unwrap();
    let view = reader.view(block).unwrap();
    assert!(
        view.words()
            .take(1232 / 8)
            .all(|w| w == 0x5a5a_5a5a_5a5a_5a5a)
    );
}
