//! Measurements for the closing note, not run by default (`--ignored`; use
//! `--release` for figures worth quoting): heartbeats per second over the
//! socket and the shared-memory fast path, the monitor's resident memory
//! with one rank connected, its CPU use while idle, and how late a hung and
//! a crashed rank are detected. Each figure is checked against its target.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::raw::{cpu_ticks, ticks_per_second};
use crate::common::{Proc, Served, config};
use nodeipc_monitor::{MonitorClient, MonitorConfig, MonitorServer, RankInfo};
use nodeipc_testkit::{TempDir, Watchdog};

fn proc_field(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture (and --release)"]
fn heartbeat_rates_memory_and_idle_cpu() {
    let _dog = Watchdog::new("measure", Duration::from_secs(300));
    let served = Served::spawn("mon-measure", &config(r#"{"check_interval_ms": 100}"#));
    let mut client = MonitorClient::connect(&served.socket, Duration::from_secs(10)).unwrap();
    client
        .init_with_heartbeat_region(&RankInfo::this_process(0, 0))
        .unwrap();

    let socket_beats = 20_000u64;
    let start = Instant::now();
    for _ in 0..socket_beats {
        client.heartbeat().unwrap();
    }
    let socket_rate = socket_beats as f64 / start.elapsed().as_secs_f64();

    let fast_beats = 20_000_000u64;
    let start = Instant::now();
    for _ in 0..fast_beats {
        client.heartbeat_fast().unwrap();
    }
    let fast_rate = fast_beats as f64 / start.elapsed().as_secs_f64();
    let seen = client.status().unwrap().heartbeats;
    assert_eq!(seen, socket_beats + fast_beats);

    // Context: the floor, a bare round trip of the same sizes between two
    // threads over a socket pair, in the same run.
    let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    let echo = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut buf = [0u8; 6];
        while b.read_exact(&mut buf).is_ok() {
            b.write_all(&buf).unwrap();
        }
    });
    let start = Instant::now();
    for _ in 0..socket_beats {
        use std::io::{Read, Write};
        let mut buf = [0u8; 6];
        a.write_all(&buf).unwrap();
        a.read_exact(&mut buf).unwrap();
    }
    let floor_rate = socket_beats as f64 / start.elapsed().as_secs_f64();
    drop(a);
    echo.join().unwrap();

    let pid = served.monitor.pid();
    let rss_kib = proc_field(pid, "VmRSS:");
    let hwm_kib = proc_field(pid, "VmHWM:");

    // Idle with the rank connected: only the 100 ms checks run.
    let ticks_per_s = ticks_per_second() as f64;
    let window = Duration::from_secs(10);
    let before = cpu_ticks(pid);
    std::thread::sleep(window);
    let idle_cpu = (cpu_ticks(pid) - before) as f64 / ticks_per_s / window.as_secs_f64() * 100.0;

    println!("socket heartbeats:   {socket_rate:>14.0} /s");
    println!("fast-path heartbeats:{fast_rate:>14.0} /s");
    println!("ratio:               {:>14.0} x", fast_rate / socket_rate);
    println!("bare socketpair round trips (floor): {floor_rate:.0} /s");
    println!("monitor RSS:         {rss_kib} KiB (peak {hwm_kib} KiB)");
    println!("idle CPU:            {idle_cpu:.3} % over {window:?} (check every 100 ms)");
    assert!(fast_rate >= 100.0 * socket_rate, "fast path under 100x");
    assert!(rss_kib < 8 * 1024, "RSS {rss_kib} KiB");
    assert!(idle_cpu < 1.0, "idle CPU {idle_cpu} %");
}

/// A server on a thread whose log lines carry the instant they were written.
type TimedLog = Arc<Mutex<Vec<(Instant, String)>>>;

fn timed_server(
    config: MonitorConfig,
) -> (
    TempDir,
    std::path::PathBuf,
    TimedLog,
    nodeipc_monitor::StopHandle,
    std::thread::JoinHandle<()>,
) {
    let dir = TempDir::new("mon-latency");
    let socket = dir.join("rank.sock");
    let mut server = MonitorServer::bind(&socket, config).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    server.on_log(move |_, line| sink.lock().unwrap().push((Instant::now(), line.to_owned())));
    let stop = server.stop_handle();
    let thread = std::thread::spawn(move || {
        server.run().unwrap();
    });
    (dir, socket, log, stop, thread)
}

fn logged_at(
    log: &Mutex<Vec<(Instant, String)>>,
    fragment: &str,
    limit: Duration,
) -> (Instant, String) {
    let start = Instant::now();
    loop {
        if let Some(hit) = log
            .lock()
            .unwrap()
            .iter()
            .find(|(_, l)| l.contains(fragment))
        {
            return hit.clone();
        }
        assert!(start.elapsed() < limit, "no {fragment:?} logged");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture (and --release)"]
fn detection_latency_of_hung_and_crashed_ranks() {
    let _dog = Watchdog::new("latency", Duration::from_secs(300));
    let runs = 10;

    // Hung: heartbeat timeout 300 ms, check every 100 ms. The server's own
    // report says how far past the limit it fired; the rank's exit follows.
    let mut late = Vec::new();
    let mut to_exit = Vec::new();
    for _ in 0..runs {
        let mut config = MonitorConfig {
            check_interval: Duration::from_millis(100),
            ..MonitorConfig::default()
        };
        config.timeouts.heartbeat = Some(Duration::from_millis(300));
        let (_dir, socket, log, stop, thread) = timed_server(config);
        let mut rank = Proc::spawn(
            common::helper_command()
                .arg("rank")
                .arg("--socket")
                .arg(&socket)
                .args(["--beats", "3", "--then", "hang"]),
        );
        rank.expect_line("registered", Duration::from_secs(20));
        let (fired, line) = logged_at(&log, "heartbeat timeout:", Duration::from_secs(10));
        let elapsed: u64 = line
            .split("timeout: ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        late.push(elapsed.saturating_sub(300));
        let (exited, _) = logged_at(&log, "exited", Duration::from_secs(10));
        to_exit.push(exited.duration_since(fired));
        rank.wait_exit(Duration::from_secs(10));
        stop.stop();
        thread.join().unwrap();
    }
    late.sort_unstable();
    println!(
        "hung rank: fired {:?} ms past the 300 ms limit (min/median/max {} / {} / {}), exit seen {:?} after the signal (max)",
        late,
        late[0],
        late[runs / 2],
        late[runs - 1],
        to_exit.iter().max().unwrap()
    );
    assert!(
        late[runs - 1] <= 100 + 50,
        "fired more than one interval late"
    );

    // Crashed: SIGKILL from here; the check interval is 30 s, so only the
    // socket or the pidfd can tell.
    let mut crash = Vec::new();
    for _ in 0..runs {
        let config = MonitorConfig {
            check_interval: Duration::from_secs(30),
            ..MonitorConfig::default()
        };
        let (_dir, socket, log, stop, thread) = timed_server(config);
        let mut rank = Proc::spawn(
            common::helper_command()
                .arg("rank")
                .arg("--socket")
                .arg(&socket)
                .args(["--beats", "0", "--then", "beat-forever"]),
        );
        rank.expect_line("registered", Duration::from_secs(20));
        rank.expect_line("beating", Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(50));
        let killed = Instant::now();
        rank.guard.kill();
        let (seen, _) = logged_at(&log, "now Restarting", Duration::from_secs(10));
        crash.push(seen.duration_since(killed));
        stop.stop();
        thread.join().unwrap();
    }
    crash.sort_unstable();
    println!(
        "crashed rank: detected {:?} / {:?} / {:?} (min/median/max) after SIGKILL was sent",
        crash[0],
        crash[runs / 2],
        crash[runs - 1]
    );
    assert!(crash[runs - 1] < Duration::from_secs(1));
}
