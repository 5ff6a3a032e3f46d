//! Every field a rank sends that the monitor keeps or echoes has a cap,
//! checked on arrival with an error naming the field, its size and the cap;
//! and the caps add up to less than a frame: a status with every field at
//! its cap (host, state, 64 open sections and 64 section timeouts with the
//! longest names, the longest last-timeout text, every number at its
//! longest varint) is measured on the wire against the computed bound.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{InProcess, raw};
use nodeipc_monitor::{
    ControlClient, HealthCheck, MAX_FRAME, MAX_HOST, MAX_SECTION_NAME, MAX_SECTIONS, MAX_STATE,
    MonitorConfig, RankContext, RankState, Signal,
};
use nodeipc_proto::monitor::{self as pb, client_message::Msg, server_message};
use nodeipc_testkit::{Watchdog, spawn_child};

/// Fails, once armed, with a reason far longer than any cap.
struct FailOnDemand(Arc<AtomicBool>);

impl HealthCheck for FailOnDemand {
    fn name(&self) -> &str {
        "on-demand"
    }

    fn check(&mut self, _rank: &RankContext<'_>) -> Result<(), String> {
        if self.0.load(Ordering::Relaxed) {
            Err("r".repeat(100_000))
        } else {
            Ok(())
        }
    }
}

fn call(stream: &mut UnixStream, msg: Msg) -> server_message::Msg {
    stream.write_all(&raw::client_frame(msg)).unwrap();
    raw::reply(stream)
}

fn expect_error(stream: &mut UnixStream, msg: Msg, fragment: &str) {
    match call(stream, msg) {
        server_message::Msg::Error(e) => assert!(e.cause.contains(fragment), "{}", e.cause),
        other => panic!("expected an Error with {fragment:?}, got {other:?}"),
    }
}

fn expect_ok(stream: &mut UnixStream, msg: Msg) {
    match call(stream, msg) {
        server_message::Msg::Ok(_) => {}
        other => panic!("expected Ok, got {other:?}"),
    }
}

fn init(pid: u32, host: String) -> Msg {
    Msg::Init(pb::Init {
        rank: Some(pb::RankInfo {
            global_rank: u32::MAX,
            local_rank: u32::MAX,
            pid,
            host,
        }),
        want_heartbeat_region: false,
    })
}

/// The `i`th section name, `MAX_SECTION_NAME` bytes long.
fn section_name(i: usize) -> String {
    let head = format!("section-{i:03}-");
    format!("{head}{}", "s".repeat(MAX_SECTION_NAME - head.len()))
}

fn timeouts(sections: impl Iterator<Item = String>) -> Msg {
    Msg::UpdateConfig(pb::UpdateConfig {
        timeouts: Some(pb::Timeouts {
            initial_heartbeat_ms: Some(u64::MAX),
            heartbeat_ms: Some(u64::MAX),
            out_of_section_ms: Some(u64::MAX),
            section_timeouts_ms: sections.map(|s| (s, u64::MAX)).collect(),
        }),
    })
}

fn section(name: String) -> Msg {
    Msg::Section(pb::Section {
        name,
        action: pb::SectionAction::Open as i32,
    })
}

#[test]
fn regression_every_field_at_its_cap_still_gives_a_status_under_the_frame_limit() {
    let _dog = Watchdog::new("field_caps", Duration::from_secs(60));
    let fail = Arc::new(AtomicBool::new(false));
    let check = FailOnDemand(Arc::clone(&fail));
    // The rank is a child that ignores SIGTERM: the fired check leaves it
    // registered, so the status carries the rank, its sections and state
    // and the last timeout all at once.
    let config = MonitorConfig {
        check_interval: Duration::from_millis(20),
        termination_signal: Signal::TERM,
        kill_after: Some(Duration::from_millis(u64::MAX)),
        ..MonitorConfig::default()
    };
    let server = InProcess::start_with("mon-caps", config, move |s| s.add_health_check(check));
    let mut rank = spawn_child(Command::new("sh").args(["-c", "trap '' TERM; exec sleep 30"]));
    // Let the shell set its trap before it can be signalled.
    std::thread::sleep(Duration::from_millis(200));
    let mut stream = raw::connect(&server.socket);

    // Each over-cap field is refused on arrival, naming field, size and cap.
    // Before the fix a 65,000-byte host name was kept, and every status
    // after it failed ("frame of 81426 bytes exceeds the limit").
    for size in [MAX_HOST + 1, 65_000] {
        expect_error(
            &mut stream,
            init(rank.id(), "h".repeat(size)),
            &format!(
                "host name (RankInfo.host) of {size} bytes exceeds the cap of {MAX_HOST} bytes"
            ),
        );
    }
    expect_ok(&mut stream, init(rank.id(), "h".repeat(MAX_HOST)));
    expect_error(
        &mut stream,
        Msg::Heartbeat(pb::Heartbeat {
            state: Some(vec![1; MAX_STATE + 1]),
        }),
        &format!(
            "heartbeat state of {} bytes exceeds the cap of {MAX_STATE} bytes",
            MAX_STATE + 1
        ),
    );
    expect_ok(
        &mut stream,
        Msg::Heartbeat(pb::Heartbeat {
            state: Some(vec![0xff; MAX_STATE]),
        }),
    );
    expect_error(
        &mut stream,
        section("n".repeat(MAX_SECTION_NAME + 1)),
        &format!(
            "section name of {} bytes exceeds the cap of {MAX_SECTION_NAME} bytes",
            MAX_SECTION_NAME + 1
        ),
    );
    expect_error(
        &mut stream,
        timeouts((0..=MAX_SECTIONS).map(section_name)),
        &format!(
            "{} section timeouts; at most {MAX_SECTIONS}",
            MAX_SECTIONS + 1
        ),
    );
    expect_ok(&mut stream, timeouts((0..MAX_SECTIONS).map(section_name)));
    for i in 0..MAX_SECTIONS {
        expect_ok(&mut stream, section(section_name(i)));
    }
    expect_error(
        &mut stream,
        section("one-too-many".to_owned()),
        &format!("{MAX_SECTIONS} sections are open already, the cap"),
    );

    // The longest last-timeout text: a health check's 100,000-byte reason.
    fail.store(true, Ordering::Relaxed);
    server.wait_status(Duration::from_secs(10), |s| s.state == RankState::TimedOut);

    // The status on the wire, as the control socket sends it.
    let control = nodeipc_monitor::control_socket_path(&server.socket);
    let mut raw_control = raw::connect(&control);
    raw_control.write_all(&raw::control_status_frame()).unwrap();
    let mut prefix = [0u8; 4];
    std::io::Read::read_exact(&mut raw_control, &mut prefix).unwrap();
    let frame = 4 + u32::from_le_bytes(prefix) as usize;
    // (The computed bound this stays under, and how tight it is: the unit
    // test `limits::tests::a_status_at_every_cap_fits_the_computed_bound`.)
    eprintln!("worst-case status: {frame} bytes on the wire; frame limit {MAX_FRAME}");
    assert!(frame <= MAX_FRAME, "{frame} > frame limit {MAX_FRAME}");

    // And it decodes with every field at its cap.
    let status = ControlClient::connect(&server.socket, Duration::from_secs(5))
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(status.state, RankState::TimedOut);
    assert_eq!(status.rank.as_ref().unwrap().host.len(), MAX_HOST);
    assert_eq!(status.last_state.as_ref().unwrap().len(), MAX_STATE);
    assert_eq!(status.open_sections.len(), MAX_SECTIONS);
    assert!(
        status
            .open_sections
            .iter()
            .all(|s| s.name.len() == MAX_SECTION_NAME && s.timeout_ms == Some(u64::MAX))
    );
    assert_eq!(status.timeouts.sections_ms.len(), MAX_SECTIONS);
    let last = status.last_timeout.unwrap();
    // The README's cap on a text for people (a cause, the last timeout).
    const MAX_CAUSE: usize = 4096;
    assert!(
        last.len() <= MAX_CAUSE && last.len() > MAX_CAUSE - 8,
        "{}",
        last.len()
    );
    assert!(last.ends_with('…'));
    drop(stream);
    rank.kill();
    server.finish();
}
