//! An MPMC ring between processes that are killed at random: 3 producers
//! and 3 consumers at any time, one of them SIGKILLed every 50 to 250 ms
//! and replaced; seconds by default, minutes under `NODEIPC_CI_LONG=1`.
//! Every message a consumer gets is checked (its contents a function of its
//! source and number) and recorded in a ledger (a bitmap per source, in a
//! shared region of the test's own): none may arrive twice. At the end the
//! counts are reconciled against the ring's own:
//!
//! `published (tail − skipped) = consumed (recorded) + lost + unrecorded`,
//!
//! where *unrecorded* are messages a consumer killed between a pop's return
//! and its ledger write had (at most one per such kill: consumers wait
//! outside, then pop one message at a time with a mark in the ledger
//! around the pop and its recording, so the test knows which kills landed
//! there).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_queue::{
    Error, MpmcConsumer, MpmcProducer, MpmcQueue, Pod, Waitable, Zeroable, wait_any,
};
use nodeipc_shm::Region;
use nodeipc_testkit::{
    ChildGuard, Watchdog, shm_leftovers, spawn_child, this_test_in_a_child, unique_name,
};

const SCHEMA: u64 = 0x6d70_6d63_7374;
const CHILD: &str = "NODEIPC_MPMC_STRESS_CHILD";
const CAPACITY: u32 = 64;
const PLACES: u32 = 3;
/// Messages a source may number (bits of its ledger bitmap).
const BITS: u64 = 1 << 20;
/// Sources (producer incarnations) and consumer incarnations, at most.
const SOURCES: usize = 128;
const SENTINEL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Msg {
    source: u32,
    _pad: u32,
    seq: u64,
    check: u64,
}

fn check(source: u32, seq: u64) -> u64 {
    (u64::from(source) << 40 ^ seq).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The ledger's layout: a stop flag, counters, a flag per consumer
/// incarnation (1 while inside a pop and its recording), a bitmap per source.
mod ledger {
    pub(super) const STOP: usize = 0;
    pub(super) const DUPLICATES: usize = 8;
    pub(super) const CORRUPT: usize = 16;
    pub(super) const IN_POP: usize = 64;
    pub(super) const BITMAPS: usize = 4096;
    pub(super) fn len() -> usize {
        BITMAPS + super::SOURCES * (super::BITS as usize / 8)
    }
}

struct Ledger(Region);

impl Ledger {
    fn word32(&self, at: usize) -> &AtomicU32 {
        self.0.view(at).expect("ledger word")
    }
    fn word64(&self, at: usize) -> &AtomicU64 {
        self.0.view(at).expect("ledger word")
    }
    fn stopped(&self) -> bool {
        self.word32(ledger::STOP).load(Ordering::Acquire) != 0
    }
    fn in_pop(&self, consumer: usize) -> &AtomicU32 {
        self.word32(ledger::IN_POP + 4 * consumer)
    }
    /// Records a message: `false` when it was recorded before (a duplicate).
    fn record(&self, m: &Msg) -> bool {
        if m.source as usize >= SOURCES || m.seq >= BITS || m.check != check(m.source, m.seq) {
            self.word64(ledger::CORRUPT).fetch_add(1, Ordering::AcqRel);
            return true;
        }
        let bit = m.seq;
        let at =
            ledger::BITMAPS + m.source as usize * (BITS as usize / 8) + (bit / 64) as usize * 8;
        let mask = 1u64 << (bit % 64);
        if self.word64(at).fetch_or(mask, Ordering::AcqRel) & mask != 0 {
            self.word64(ledger::DUPLICATES)
                .fetch_add(1, Ordering::AcqRel);
            return false;
        }
        true
    }
    fn recorded(&self) -> u64 {
        (0..SOURCES * (BITS as usize / 64))
            .map(|w| {
                u64::from(
                    self.word64(ledger::BITMAPS + 8 * w)
                        .load(Ordering::Acquire)
                        .count_ones(),
                )
            })
            .sum()
    }
}

/// A child's part: `producer NAME LEDGER SOURCE` or `consumer NAME LEDGER N`.
#[test]
fn child_main() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let (role, name, ledger_name) = (parts[0], parts[1], parts[2]);
    let n: u32 = parts[3].parse().unwrap();
    let ledger = Ledger(
        Region::open(
            ledger_name,
            nodeipc_shm::OpenOptions::wait(ledger::len(), Duration::from_secs(5)),
        )
        .unwrap(),
    );
    let t = Duration::from_secs(5);
    match role {
        "producer" => {
            let mut tx = MpmcProducer::<Msg>::open(name, SCHEMA, t).unwrap();
            println!("ready");
            let mut seq = 0u64;
            while !ledger.stopped() && seq < BITS {
                let m = Msg {
                    source: n,
                    _pad: 0,
                    seq,
                    check: check(n, seq),
                };
                match tx.push_timeout(&m, Duration::from_millis(50)) {
                    Ok(()) => seq += 1,
                    // Full, or no consumer for a moment (being replaced).
                    Err(
                        Error::TimedOut { .. } | Error::PeerDied { .. } | Error::PeerLeft { .. },
                    ) => {}
                    Err(e) => panic!("producer {n}: {e}"),
                }
            }
        }
        "consumer" => {
            let mut rx = MpmcConsumer::<Msg>::open(name, SCHEMA, t).unwrap();
            println!("ready");
            let flag = ledger.in_pop(n as usize);
            loop {
                // Waiting is outside the flag; only a pop and its recording
                // are inside it, so the test knows a kill landed there.
                match wait_any(
                    &mut [&mut rx as &mut dyn Waitable],
                    Duration::from_millis(50),
                ) {
                    Ok(_) | Err(Error::TimedOut { .. }) => {}
                    Err(e) => panic!("consumer {n}: {e}"),
                }
                flag.store(1, Ordering::SeqCst);
                let got = rx.try_pop().unwrap_or_else(|e| panic!("consumer {n}: {e}"));
                if let Some(m) = &got {
                    ledger.record(m);
                }
                flag.store(0, Ordering::SeqCst);
                // Every producer gone and the ring drained: done.
                if got.is_none() && ledger.stopped() && rx.producers_gone() {
                    break;
                }
            }
        }
        other => panic!("unknown child role {other}"),
    }
}

fn spawn(role: &str, name: &str, ledger: &str, n: u32) -> ChildGuard {
    let mut command =
        this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), "child_main"));
    command.env(CHILD, format!("{role} {name} {ledger} {n}"));
    let mut child = spawn_child(&mut command);
    let stdout = child.child().stdout.take().expect("piped stdout");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.ends_with("ready"))),
        "the {role} child never said ready"
    );
    // Keep reading so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    child
}

/// xorshift64*: the kill schedule, from a seed the test prints.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % below
    }
}

#[test]
fn producers_and_consumers_killed_at_random_lose_and_skip_only_what_they_held() {
    let long = std::env::var("NODEIPC_CI_LONG").is_ok_and(|v| v == "1");
    let run = Duration::from_secs(if long { 180 } else { 3 });
    let _dog = Watchdog::new("mpmc stress", run + Duration::from_secs(240));
    let name = unique_name("mpmc-stress");
    let ledger_name = unique_name("mpmc-ledger");
    let queue = MpmcQueue::<Msg>::create(&name, CAPACITY, PLACES, PLACES, SCHEMA).unwrap();
    let ledger = Ledger(Region::create(&ledger_name, ledger::len()).unwrap());
    let seed = Instant::now().elapsed().as_nanos() as u64 ^ u64::from(std::process::id()) << 17 | 1;
    let mut rng = Rng(seed);
    let (mut sources, mut incarnations) = (0u32, 0u32);
    let mut producers: Vec<ChildGuard> = (0..PLACES)
        .map(|_| {
            sources += 1;
            spawn("producer", &name, &ledger_name, sources - 1)
        })
        .collect();
    let mut consumers: Vec<(u32, ChildGuard)> = (0..PLACES)
        .map(|_| {
            incarnations += 1;
            (
                incarnations - 1,
                spawn("consumer", &name, &ledger_name, incarnations - 1),
            )
        })
        .collect();
    let (mut producer_kills, mut consumer_kills, mut kills_in_pop) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    while started.elapsed() < run
        && (sources as usize) < SOURCES
        && (incarnations as usize) < SOURCES
    {
        std::thread::sleep(Duration::from_millis(50 + rng.next(200)));
        let victim = rng.next(2 * u64::from(PLACES)) as usize;
        if victim < PLACES as usize {
            producers[victim].kill();
            producer_kills += 1;
            sources += 1;
            producers[victim] = spawn("producer", &name, &ledger_name, sources - 1);
        } else {
            let slot = victim - PLACES as usize;
            let (n, guard) = &mut consumers[slot];
            guard.kill();
            consumer_kills += 1;
            kills_in_pop += u64::from(ledger.in_pop(*n as usize).load(Ordering::SeqCst));
            incarnations += 1;
            consumers[slot] = (
                incarnations - 1,
                spawn("consumer", &name, &ledger_name, incarnations - 1),
            );
        }
    }
    // Stop: the producers end, the consumers drain and end.
    ledger.word32(ledger::STOP).store(1, Ordering::Release);
    for p in &mut producers {
        assert!(
            p.wait_timeout(Duration::from_secs(60)).success(),
            "a producer failed"
        );
    }
    for (_, c) in &mut consumers {
        assert!(
            c.wait_timeout(Duration::from_secs(60)).success(),
            "a consumer failed"
        );
    }
    // Claims the dead still hold are resolved by whoever they hold up: a
    // producer that needs every slot once more (sentinels), a consumer
    // that drains them (recording any real message left).
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut sentinels = 0u64;
    for i in 0..2 * u64::from(CAPACITY) {
        let s = Msg {
            source: SENTINEL,
            _pad: 0,
            seq: i,
            check: 0,
        };
        tx.push_timeout(&s, Duration::from_secs(10))
            .expect("a sentinel");
        while let Some(m) = rx.try_pop().unwrap() {
            if m.source == SENTINEL {
                sentinels += 1;
            } else {
                ledger.record(&m);
            }
        }
    }
    drop(tx);
    loop {
        match rx.pop_timeout(Duration::from_secs(5)) {
            Ok(m) if m.source == SENTINEL => sentinels += 1,
            Ok(m) => {
                ledger.record(&m);
            }
            Err(Error::PeerLeft { .. } | Error::PeerDied { .. }) => break,
            Err(e) => panic!("the final drain: {e}"),
        }
    }
    assert_eq!(
        sentinels,
        2 * u64::from(CAPACITY),
        "every sentinel came through"
    );
    let tail = u64::from(
        queue
            .region()
            .view::<AtomicU32>(128)
            .unwrap()
            .load(Ordering::SeqCst),
    );
    let (skipped, lost) = rx.skipped_and_lost();
    let recorded = ledger.recorded();
    let duplicates = ledger.word64(ledger::DUPLICATES).load(Ordering::SeqCst);
    let corrupt = ledger.word64(ledger::CORRUPT).load(Ordering::SeqCst);
    let published = tail - skipped - sentinels;
    let unrecorded = published as i64 - (recorded + lost) as i64;
    println!(
        "mpmc stress ({:?}, seed {seed:#x}): {producer_kills} producer and {consumer_kills} consumer kills \
         ({kills_in_pop} inside a pop); published {published} = consumed {recorded} + lost {lost} \
         + unrecorded {unrecorded}; skipped {skipped}; duplicates {duplicates}; corrupt {corrupt}",
        started.elapsed()
    );
    assert_eq!(duplicates, 0, "a message was delivered twice");
    assert_eq!(corrupt, 0, "a message arrived with wrong contents");
    assert!(
        (0..=kills_in_pop as i64).contains(&unrecorded),
        "published {published} ≠ consumed {recorded} + lost {lost} (+ at most {kills_in_pop} \
         popped by consumers killed before their ledger write)"
    );
    assert!(producer_kills + consumer_kills > 0);
    drop((rx, queue, ledger));
    assert!(shm_leftovers("mpmc-stress").is_empty());
    assert!(shm_leftovers("mpmc-ledger").is_empty());
}
