//! The broadcast ring: reader and writer processes, kills, a stopped
//! reader, a 100 MiB object, and a process that writes the ring's words.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_channel::broadcast::{Broadcast, Error};
use nodeipc_shm::{OpenOptions, Region};
use nodeipc_testkit::{
    ChildGuard, Watchdog, shm_leftovers, spawn_child, this_test_in_a_child, unique_name,
};

const CHILD: &str = "NODEIPC_BCAST_CHILD";
const ENTRY: &str = "child_entry";
/// The larger messages of a stream: more than three 4 KiB chunks, so they stream.
const BIG: usize = 3 * 4096 + 100;

/// The `i`th message of a test stream: its length varies, every tenth is
/// larger than the tests' chunks.
fn message(i: u64, big: usize) -> Vec<u8> {
    let len = (i as usize * 7919) % 5000 + if i.is_multiple_of(10) { big } else { 0 };
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// A message of one chunk.
fn small(i: u64) -> Vec<u8> {
    format!("message {i}").into_bytes()
}

fn ring(name: &str, readers: u32, chunk_bytes: usize, chunks: u32) -> Broadcast {
    Broadcast::builder(name)
        .readers(readers)
        .chunk_bytes(chunk_bytes)
        .chunks(chunks)
        .join_wait(Duration::from_secs(20))
}

/// A child process running [`child_entry`] in `mode`.
fn child(mode: &str, name: &str, rank: u32, shape: (u32, usize, u32), count: u64) -> ChildGuard {
    let mut command: Command =
        this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), ENTRY));
    command.env(
        CHILD,
        format!(
            "{mode} {name} {rank} {} {} {} {count}",
            shape.0, shape.1, shape.2
        ),
    );
    spawn_child(&mut command)
}

/// What a child does: `read` checks `count` messages of the stream then
/// exits 0; `small` the same of [`small`] messages; `idle` joins and sleeps (to be stopped or killed); `big` reads
/// one message of `count` bytes and checks it; `write` sends `count`
/// messages then sleeps (to be killed).
#[test]
fn child_entry() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let (mode, name, rank) = (f[0], f[1], f[2].parse().unwrap());
    let shape = ring(
        name,
        f[3].parse().unwrap(),
        f[4].parse().unwrap(),
        f[5].parse().unwrap(),
    );
    let count: u64 = f[6].parse().unwrap();
    if mode == "write" {
        let mut writer = shape.create().unwrap();
        writer.wait_until_ready(Duration::from_secs(20)).unwrap();
        for i in 0..count {
            writer.send(&message(i, 0)).unwrap();
        }
        println!("sent");
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let mut reader = shape.join(rank).unwrap();
    reader.wait_until_ready(Duration::from_secs(20)).unwrap();
    match mode {
        "read" => {
            for i in 0..count {
                let got = reader.recv().unwrap();
                assert!(got == message(i, BIG), "message {i} differs");
            }
        }
        "small" => {
            for i in 0..count {
                assert_eq!(reader.recv().unwrap(), small(i), "message {i}");
            }
        }
        "big" => {
            let got = reader.recv().unwrap();
            assert_eq!(got.len() as u64, count);
            for (j, byte) in got.iter().enumerate() {
                assert_eq!(*byte, (j % 251) as u8, "byte {j} of the big message");
            }
        }
        "idle" => std::thread::sleep(Duration::from_secs(600)),
        other => panic!("unknown child mode {other}"),
    }
    println!("child {rank} done");
}

#[test]
fn three_reader_processes_get_every_message_in_order() {
    let _dog = Watchdog::new("three readers", Duration::from_secs(120));
    let name = unique_name("bcast-three");
    let shape = (3, 4096, 4);
    let count = 300;
    let mut writer = ring(&name, shape.0, shape.1, shape.2).create().unwrap();
    let children: Vec<ChildGuard> = (0..3)
        .map(|r| child("read", &name, r, shape, count))
        .collect();
    writer.wait_until_ready(Duration::from_secs(30)).unwrap();
    assert!(
        shm_leftovers(&name).is_empty(),
        "the name is removed once all joined"
    );
    for i in 0..count {
        writer.send(&message(i, BIG)).unwrap();
    }
    for c in children {
        let out = c.output_success(Duration::from_secs(60));
        assert!(String::from_utf8_lossy(&out.stdout).contains("done"));
    }
}

#[test]
fn an_object_of_100_mib_streams_through_a_4_mib_ring() {
    let _dog = Watchdog::new("100 MiB", Duration::from_secs(180));
    let name = unique_name("bcast-big");
    let shape = (1, 1 << 20, 4);
    let size: usize = 100 << 20;
    let mut writer = ring(&name, shape.0, shape.1, shape.2).create().unwrap();
    let reader = child("big", &name, 0, shape, size as u64);
    writer.wait_until_ready(Duration::from_secs(30)).unwrap();
    let object: Vec<u8> = (0..size).map(|j| (j % 251) as u8).collect();
    writer.send(&object).unwrap();
    reader.output_success(Duration::from_secs(120));
}

#[test]
fn a_full_ring_names_the_stopped_reader_and_how_far_behind() {
    let _dog = Watchdog::new("stopped reader", Duration::from_secs(60));
    let name = unique_name("bcast-stopped");
    let shape = (2, 256, 4);
    let mut writer = ring(&name, shape.0, shape.1, shape.2).create().unwrap();
    let fast = child("small", &name, 0, shape, 4);
    let slow = child("idle", &name, 1, shape, 0);
    writer.wait_until_ready(Duration::from_secs(30)).unwrap();
    // SAFETY: stops our own child, killed by its guard later.
    assert_eq!(unsafe { libc::kill(slow.id() as i32, libc::SIGSTOP) }, 0);
    for i in 0..4 {
        writer.send(&small(i)).expect("four messages fit the ring");
    }
    let err = writer
        .send_timeout(b"one more", Duration::from_millis(300))
        .unwrap_err();
    let Error::Full { behind, .. } = &err else {
        panic!("expected Full, got {err}");
    };
    assert_eq!(behind.len(), 1, "{err}");
    assert_eq!((behind[0].rank, behind[0].pid), (1, slow.id()), "{err}");
    assert_eq!(behind[0].messages, 4, "{err}");
    assert!(err.to_string().contains("reader 1"), "{err}");
    assert!(writer.try_send(b"x").unwrap_err().is_timeout());
    drop(fast);
    drop(slow);
}

#[test]
fn a_killed_reader_is_named_within_a_second_and_the_writer_goes_on_without_it() {
    let _dog = Watchdog::new("killed reader", Duration::from_secs(60));
    let name = unique_name("bcast-killed-r");
    let shape = (2, 256, 2);
    let mut writer = ring(&name, shape.0, shape.1, shape.2).create().unwrap();
    let alive = child("small", &name, 0, shape, 3);
    let mut doomed = child("idle", &name, 1, shape, 0);
    writer.wait_until_ready(Duration::from_secs(30)).unwrap();
    writer.send(&small(0)).unwrap();
    writer.send(&small(1)).unwrap();
    let pid = doomed.id();
    doomed.kill();
    let start = Instant::now();
    let err = writer.send(b"third").unwrap_err();
    let took = start.elapsed();
    let Error::ReaderDied {
        rank,
        pid: died,
        messages,
        ..
    } = err
    else {
        panic!("expected ReaderDied, got {err}");
    };
    assert_eq!((rank, died, messages), (1, pid, 2));
    assert!(took < Duration::from_secs(1), "named after {took:?}");
    writer.drop_reader(1).unwrap();
    writer.send(&small(2)).unwrap();
    alive.output_success(Duration::from_secs(30));
}

#[test]
fn a_reader_whose_writer_was_killed_is_told_within_a_second() {
    let _dog = Watchdog::new("killed writer", Duration::from_secs(60));
    let name = unique_name("bcast-killed-w");
    let shape = (1, 256, 4);
    let mut writer_process = child("write", &name, 0, shape, 2);
    let mut reader = ring(&name, shape.0, shape.1, shape.2).join(0).unwrap();
    reader.wait_until_ready(Duration::from_secs(30)).unwrap();
    assert_eq!(reader.recv().unwrap(), message(0, 0));
    assert_eq!(reader.recv().unwrap(), message(1, 0));
    assert_eq!(reader.writer_pid(), writer_process.id());
    writer_process.kill();
    let start = Instant::now();
    let err = reader.recv().unwrap_err();
    assert!(
        matches!(err, Error::WriterDied { pid, .. } if pid == writer_process.id()),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_closed_ring_hands_out_what_was_sent_then_says_closed() {
    let _dog = Watchdog::new("closed", Duration::from_secs(30));
    let name = unique_name("bcast-closed");
    let shape = ring(&name, 1, 128, 4);
    let mut writer = shape.create().unwrap();
    let mut reader = shape.join(0).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    reader.wait_until_ready(Duration::from_secs(5)).unwrap();
    writer.send(b"last words").unwrap();
    drop(writer);
    assert_eq!(reader.recv().unwrap(), b"last words");
    assert!(matches!(reader.recv(), Err(Error::WriterClosed { .. })));
}

#[test]
fn a_recycled_buffer_takes_the_next_message_and_one_larger_than_the_ring_is_not_kept() {
    let _dog = Watchdog::new("recycle", Duration::from_secs(30));
    let name = unique_name("bcast-recycle");
    // 4 chunks of 4 KiB: a ring of 16 KiB at once.
    let shape = ring(&name, 1, 4096, 4);
    let mut writer = shape.create().unwrap();
    let mut reader = shape.join(0).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    reader.wait_until_ready(Duration::from_secs(5)).unwrap();
    // Three chunks' worth, under what the ring holds (one thread writes
    // and reads: it must fit).
    let long: Vec<u8> = (0..12_000u32).map(|i| i as u8).collect();
    writer.send(&long).unwrap();
    let first = reader.recv().unwrap();
    assert_eq!(first, long);
    let at = first.as_ptr();
    reader.recycle(first);
    // A shorter message lands in the same memory, none of the old bytes left.
    writer.send(&small(2)).unwrap();
    let second = reader.recv().unwrap();
    assert_eq!(second, small(2));
    assert_eq!(second.as_ptr(), at, "the recycled buffer was not reused");
    // A buffer larger than the ring holds at once is dropped, not kept.
    let huge = Vec::with_capacity(64 * 1024);
    let huge_at = huge.as_ptr();
    reader.recycle(huge);
    writer.send(&small(3)).unwrap();
    let third = reader.recv().unwrap();
    assert_eq!(third, small(3));
    assert_ne!(
        third.as_ptr(),
        huge_at,
        "a buffer larger than the ring was kept"
    );
}

#[test]
fn try_and_timeout_forms_wait_as_they_say_and_a_timeout_resumes() {
    let _dog = Watchdog::new("forms", Duration::from_secs(30));
    let name = unique_name("bcast-forms");
    let shape = ring(&name, 1, 64, 2);
    let mut writer = shape.create().unwrap();
    let mut reader = shape.join(0).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    assert!(reader.try_recv().unwrap().is_none());
    let err = reader.recv_timeout(Duration::from_millis(50)).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    // A 100-byte message over 64-byte chunks: the reader gets it whole.
    let long: Vec<u8> = (0..100).collect();
    writer.send(&long).unwrap();
    assert_eq!(reader.try_recv().unwrap().unwrap(), long);
    writer.try_send(b"a").unwrap();
    writer.try_send(b"b").unwrap();
    let full = writer.try_send(b"c").unwrap_err();
    assert!(
        matches!(&full, Error::Full { behind, .. } if behind[0].messages == 2),
        "{full}"
    );
    assert_eq!(reader.recv().unwrap(), b"a");
    writer.send_timeout(b"c", Duration::from_secs(1)).unwrap();
    assert_eq!(reader.recv().unwrap(), b"b");
    assert_eq!(reader.recv().unwrap(), b"c");
    assert_eq!(reader.received(), 4);
}

#[test]
fn a_message_the_writer_abandons_part_way_is_dropped_and_the_next_one_read() {
    let _dog = Watchdog::new("abandoned", Duration::from_secs(30));
    let name = unique_name("bcast-abandon");
    let shape = ring(&name, 1, 64, 2);
    let mut writer = shape.create().unwrap();
    let mut reader = shape.join(0).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    // Ten chunks through a ring of two, nobody reading: stops after two.
    let err = writer
        .send_timeout(&[7; 640], Duration::from_millis(50))
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(
        reader
            .recv_timeout(Duration::from_millis(50))
            .unwrap_err()
            .is_timeout()
    );
    writer.send(b"next").unwrap();
    assert!(matches!(
        reader.recv(),
        Err(Error::Abandoned { msg: 0, .. })
    ));
    assert_eq!(reader.recv().unwrap(), b"next");
}

#[test]
fn loans_write_in_place_and_a_dropped_loan_sends_nothing() {
    let _dog = Watchdog::new("loans", Duration::from_secs(30));
    let name = unique_name("bcast-loan");
    let shape = ring(&name, 1, 64, 16);
    let mut writer = shape.create().unwrap();
    let mut reader = shape.join(0).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    writer
        .send_bytes_with(5, |b| b.copy_from_slice(b"hello"))
        .unwrap();
    writer.send_bytes_with(200, |b| b.fill(9)).unwrap();
    {
        let mut loan = writer.loan(3, None).unwrap();
        loan.bytes_mut().copy_from_slice(b"nop");
    }
    let mut loan = writer.loan(3, None).unwrap();
    loan.bytes_mut().copy_from_slice(b"yes");
    loan.commit().unwrap();
    assert!(writer.loan(65, None).is_err());
    writer.begin_loan(2, None).unwrap();
    assert!(matches!(writer.send(b"x"), Err(Error::Usage { .. })));
    writer.abort_loan();
    writer.send_parts(&[b"pa", b"", b"rts"], None).unwrap();
    assert_eq!(reader.recv().unwrap(), b"hello");
    assert_eq!(reader.recv().unwrap(), vec![9; 200]);
    assert_eq!(reader.recv().unwrap(), b"yes");
    assert_eq!(reader.recv().unwrap(), b"parts");
    assert!(reader.try_recv().unwrap().is_none());
}

#[test]
fn ready_is_bounded_and_names_the_missing_reader() {
    let _dog = Watchdog::new("ready", Duration::from_secs(30));
    let name = unique_name("bcast-ready");
    let shape = ring(&name, 2, 64, 2);
    let mut writer = shape.create().unwrap();
    let _r0 = shape.join(0).unwrap();
    let err = writer
        .wait_until_ready(Duration::from_millis(100))
        .unwrap_err();
    assert!(err.to_string().contains("[1]"), "{err}");
    assert!(matches!(
        shape.join(0),
        Err(Error::RankTaken { rank: 0, .. })
    ));
    assert!(matches!(
        shape.join(2),
        Err(Error::NoSuchRank { rank: 2, .. })
    ));
    let other = ring(&name, 2, 128, 2).join(1).unwrap_err();
    assert!(
        matches!(
            other,
            Error::Mismatch {
                what: "chunk bytes",
                ..
            }
        ),
        "{other}"
    );
    let _r1 = shape.join(1).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    assert!(shm_leftovers(&name).is_empty());
}

/// A process that opens the ring by its name (while it has one) and writes
/// what only the writer or another reader may write.
fn hostile(name: &str) -> Region {
    Region::open(name, OpenOptions::wait(4096, Duration::from_secs(5))).unwrap()
}

const SLOTS: usize = 3 * 128;

#[test]
fn a_hostile_reader_moving_another_readers_position_gets_the_writer_an_error() {
    let _dog = Watchdog::new("hostile tail", Duration::from_secs(30));
    let name = unique_name("bcast-hostile-tail");
    let shape = ring(&name, 2, 64, 2);
    let mut writer = shape.create().unwrap();
    let _r0 = shape.join(0).unwrap();
    let evil = hostile(&name);
    let _r1 = shape.join(1).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    writer.send(b"a").unwrap();
    writer.send(b"b").unwrap();
    // Reader 0's position (offset 16 of its slot) far past the head.
    let tail: &AtomicU64 = evil.view(SLOTS + 16).unwrap();
    tail.store(1 << 40, Ordering::Release);
    let err = writer
        .send_timeout(b"c", Duration::from_millis(200))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { what, .. } if what.contains("reader 0")),
        "{err}"
    );
}

#[test]
fn a_hostile_reader_rewriting_chunk_headers_gets_readers_errors_never_a_wrong_message() {
    let _dog = Watchdog::new("hostile headers", Duration::from_secs(60));
    // Each lie on a ring of its own: the chunk's sequence number, its
    // message, the message's total, its offset; on the message's first
    // chunk (0) or its second (1).
    let lies: [(usize, usize, u64); 6] = [
        (0, 0, 99),
        (0, 1, 5),
        (0, 2, 1 << 20),
        (0, 3, 8),
        (1, 2, 4000),
        (1, 3, 0),
    ];
    for (chunk, word, lie) in lies {
        let name = unique_name("bcast-hostile-hdr");
        let shape = ring(&name, 2, 64, 4);
        let mut writer = shape.create().unwrap();
        let mut honest = shape.join(0).unwrap();
        let evil = hostile(&name);
        let _other = shape.join(1).unwrap();
        writer.wait_until_ready(Duration::from_secs(5)).unwrap();
        // 100 bytes: two chunks.
        writer.send(&[3; 100]).unwrap();
        let header: &AtomicU64 = evil.view(SLOTS + 2 * 128 + chunk * 32 + word * 8).unwrap();
        header.store(lie, Ordering::Release);
        let what = format!("chunk {chunk}, word {word} = {lie}");
        let err = honest.recv_timeout(Duration::from_secs(2)).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{what}: {err}");
        // The handle stays failed: no later message is taken for another.
        writer.send(b"later").unwrap();
        let again = honest.recv_timeout(Duration::from_secs(2)).unwrap_err();
        assert!(matches!(again, Error::Corrupt { .. }), "{what}: {again}");
    }
}

#[test]
fn a_reader_that_left_is_named_when_the_writer_waits_for_it() {
    let _dog = Watchdog::new("left", Duration::from_secs(30));
    let name = unique_name("bcast-left");
    let shape = ring(&name, 1, 64, 1);
    let mut writer = shape.create().unwrap();
    let reader = shape.join(0).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    writer.send(b"unread").unwrap();
    drop(reader);
    let err = writer.send(b"more").unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReaderLeft {
                rank: 0,
                messages: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(writer.behind().unwrap()[0].messages, 1);
    writer.drop_reader(0).unwrap();
    writer.send(b"more").unwrap();
}

#[test]
fn a_stop_handle_ends_a_readers_wait_from_another_thread() {
    let _dog = Watchdog::new("stop", Duration::from_secs(30));
    let name = unique_name("bcast-stop");
    let shape = ring(&name, 1, 64, 2);
    let mut writer = shape.create().unwrap();
    let mut reader = shape.join(0).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    writer.send(b"before").unwrap();
    let stop = reader.stop_handle();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        stop.stop();
    });
    assert_eq!(reader.recv().unwrap(), b"before");
    let start = Instant::now();
    assert!(matches!(reader.recv(), Err(Error::Stopped { rank: 0, .. })));
    assert!(start.elapsed() < Duration::from_secs(5));
    stopper.join().unwrap();
}

#[test]
fn a_message_larger_than_a_readers_limit_is_skipped_and_the_next_one_read() {
    let _dog = Watchdog::new("too large", Duration::from_secs(30));
    let name = unique_name("bcast-too-large");
    let shape = ring(&name, 1, 64, 4);
    let mut writer = shape.create().unwrap();
    let mut reader = shape.clone().max_message(100).join(0).unwrap();
    writer.wait_until_ready(Duration::from_secs(5)).unwrap();
    writer.send(&[1; 101]).unwrap();
    writer.send(&[2; 100]).unwrap();
    let err = reader.recv().unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooLarge {
                msg: 0,
                size: 101,
                max: 100,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(reader.recv().unwrap(), vec![2; 100]);
}

#[test]
fn a_writer_and_reader_dropped_in_a_forked_child_leave_the_ring_to_the_parent() {
    let _dog = Watchdog::new("fork", Duration::from_secs(60));
    let name = unique_name("bcast-fork");
    let shape = ring(&name, 1, 64, 2);
    let mut writer = Some(shape.create().unwrap());
    let mut reader = Some(shape.join(0).unwrap());
    writer
        .as_mut()
        .unwrap()
        .wait_until_ready(Duration::from_secs(5))
        .unwrap();
    let code = nodeipc_testkit::fork_child("drop both in a child", Duration::from_secs(20), || {
        drop(writer.take());
        drop(reader.take());
        0
    });
    assert_eq!(code, 0);
    let (writer, reader) = (writer.as_mut().unwrap(), reader.as_mut().unwrap());
    // The ring is not closed and the reader has not left.
    writer.send(b"one").unwrap();
    writer.send(b"two").unwrap();
    assert_eq!(reader.recv().unwrap(), b"one");
    let behind = writer.behind().unwrap();
    assert_eq!(
        (behind[0].rank, behind[0].messages, behind[0].chunks),
        (0, 1, 1)
    );
    writer
        .send_timeout(b"three", Duration::from_secs(5))
        .unwrap();
    assert_eq!(reader.recv().unwrap(), b"two");
    assert_eq!(reader.recv().unwrap(), b"three");
}
