//! A client that sends without ever reading its replies: the monitor stops
//! reading from it (no spinning on a socket that stays readable), closes it
//! once a reply has waited past the reply timeout, and serves everyone else
//! throughout. Measured on a monitor process of its own, against its own
//! idle baseline in the same test.

use std::io::{ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{Served, config, raw};
use nodeipc_monitor::{MonitorClient, RankInfo};
use nodeipc_proto::monitor as pb;
use nodeipc_testkit::Watchdog;

const REPLY_TIMEOUT: Duration = Duration::from_millis(2500);

/// Writes `frame` over and over on `stream` and never reads; stops when
/// told or when the server closes the connection.
fn flood(mut stream: UnixStream, frame: Vec<u8>, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    stream.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            match stream.write(&frame) {
                Ok(n) => sent += n as u64,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(_) => break,
            }
        }
        // Kept open (unread) until told to stop.
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
        sent
    })
}

/// Floods the monitor through `stream`, then checks its CPU time, the
/// flooder's closing and a fresh client being served.
fn flooding_costs_nothing_and_ends_in_a_close(
    served: &Served,
    connect: impl FnOnce() -> UnixStream,
    frame: Vec<u8>,
    fresh: impl Fn(&Path),
) {
    let pid = served.monitor.pid();
    let hz = raw::ticks_per_second();
    let window = Duration::from_secs(1);
    let idle = raw::cpu_over(pid, window);
    // Connected after the baseline: an idle connection would be closed
    // for not sending its first message in time.
    let stream = connect();
    let watched = stream.try_clone().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let flooder = flood(stream, frame, Arc::clone(&stop));
    // Past the moment the buffers fill, within the reply timeout.
    std::thread::sleep(Duration::from_millis(300));
    let busy = raw::cpu_over(pid, window);
    // Before the fix the loop spun at 100 % (500 ticks in 5 s): allow 30 %
    // of the window above the idle baseline.
    let allowed = idle + hz * 30 / 100;
    assert!(
        busy <= allowed,
        "the monitor used {busy} ticks in {window:?} of flooding (idle: {idle}; allowed {allowed}; {hz} ticks/s)"
    );
    // Closed once a reply waited past the reply timeout, not before.
    let left = REPLY_TIMEOUT + Duration::from_secs(5);
    raw::wait_hang_up(&watched, left)
        .unwrap_or_else(|| panic!("the flooder was not closed within {left:?}"));
    let closed_after = started.elapsed();
    assert!(
        closed_after >= REPLY_TIMEOUT,
        "closed after {closed_after:?}, before the {REPLY_TIMEOUT:?} reply timeout"
    );
    stop.store(true, Ordering::Relaxed);
    let sent = flooder.join().unwrap();
    assert!(sent > 0);
    assert!(served.log().contains("a reply waited"), "{}", served.log());
    // Everyone else is served.
    fresh(&served.socket);
}

#[test]
fn regression_a_control_client_that_never_reads_neither_spins_the_monitor_nor_stays() {
    let _dog = Watchdog::new("control_flood", Duration::from_secs(60));
    let served = Served::spawn(
        "mon-flood-control",
        &config(&format!(
            r#"{{"reply_timeout_ms": {}}}"#,
            REPLY_TIMEOUT.as_millis()
        )),
    );
    let control = nodeipc_monitor::control_socket_path(&served.socket);
    flooding_costs_nothing_and_ends_in_a_close(
        &served,
        || raw::connect(&control),
        raw::control_status_frame(),
        |socket| {
            let status = nodeipc_monitor::ControlClient::connect(socket, Duration::from_secs(5))
                .unwrap()
                .status()
                .unwrap();
            assert!(status.rank.is_none());
        },
    );
}

#[test]
fn regression_a_rank_that_never_reads_neither_spins_the_monitor_nor_stays() {
    let _dog = Watchdog::new("rank_flood", Duration::from_secs(60));
    // No timeouts: the rank is this test process.
    let served = Served::spawn(
        "mon-flood-rank",
        &config(&format!(
            r#"{{"reply_timeout_ms": {}}}"#,
            REPLY_TIMEOUT.as_millis()
        )),
    );
    let mut stream = raw::connect(&served.socket);
    stream
        .write_all(&raw::client_frame(pb::client_message::Msg::Init(
            pb::Init {
                rank: Some(pb::RankInfo::default()),
                want_heartbeat_region: false,
            },
        )))
        .unwrap();
    assert!(matches!(
        raw::reply(&mut stream),
        pb::server_message::Msg::Ok(_)
    ));
    // Registered (settled) before the idle baseline is taken.
    flooding_costs_nothing_and_ends_in_a_close(
        &served,
        move || stream,
        raw::client_frame(pb::client_message::Msg::StatusQuery(pb::StatusQuery {})),
        |socket| {
            let mut rank = MonitorClient::connect(socket, Duration::from_secs(10)).unwrap();
            rank.init(&RankInfo::this_process(0, 0)).unwrap();
            rank.heartbeat().unwrap();
        },
    );
}
