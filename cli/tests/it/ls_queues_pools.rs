//! `nodeipc ls` shows named queues (capacity, length, producer and consumer
//! pids) and pools (occupancy per handle); `clean` keeps them while in use.

use std::process::Command;
use std::time::Duration;

use nodeipc_testkit::{Watchdog, unique_name};

#[test]
fn ls_shows_queues_and_pools_with_their_holders() {
    let _dog = Watchdog::new(
        "ls_shows_queues_and_pools_with_their_holders",
        Duration::from_secs(60),
    );
    let prefix = unique_name("ls-qp");
    let queue =
        nodeipc_queue::Queue::<[u64; 2]>::create(&format!("{prefix}-queue"), 16, 7).unwrap();
    let mut tx = queue.producer().unwrap();
    for i in 0..3 {
        assert!(tx.try_push(&[i, i]).unwrap());
    }
    let pool = nodeipc_pool::Pool::create(
        &format!("{prefix}-pool"),
        &nodeipc_pool::PoolConfig::new(2, 2),
    )
    .unwrap();
    let mut h = pool.handle().unwrap();
    let _blocks: Vec<_> = (0..3).map(|_| h.alloc(256).unwrap()).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeipc"))
        .args(["ls", "--prefix", &prefix])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let me = std::process::id();
    assert!(
        text.contains(&format!(
            "capacity 16, length 3, 16-byte messages, producer {me}, consumer -"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("2 handles; handle 0 pid {me} blocks 3")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("queue ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("pool ")), "{text}");
}
