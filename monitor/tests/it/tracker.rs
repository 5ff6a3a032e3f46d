//! The monitor's state machine alone: every transition of `monitor.proto`'s
//! `MonitorState` and every timeout, driven by a [`RankTracker`] with an
//! injected clock (`base + Duration`). No socket, no process, no sleep.

use std::time::{Duration, Instant};

use nodeipc_monitor::tracker::{Action, Handled, Note, RankTracker, Registration};
use nodeipc_monitor::{LogLevel, RankInfo, RankState, Signal};
use nodeipc_monitor_host::MonitorConfigFile;
use nodeipc_proto::monitor as pb;
use pb::client_message::Msg;

const PID: u32 = 4242;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn tracker(json: &str) -> RankTracker {
    let config = nodeipc_monitor::MonitorConfig::from_json(json).expect("test config");
    RankTracker::new(config)
}

fn message(msg: Msg) -> pb::ClientMessage {
    pb::ClientMessage { msg: Some(msg) }
}

fn init_message(host: &str) -> pb::ClientMessage {
    message(Msg::Init(pb::Init {
        rank: Some(pb::RankInfo {
            global_rank: 3,
            local_rank: 1,
            pid: 0,
            host: host.to_owned(),
        }),
        want_heartbeat_region: true,
    }))
}

/// What the server does for an `Init` whose process passed its check.
fn register(t: &mut RankTracker, now: Instant) -> pb::Ok {
    let Handled::Register(Registration {
        rank,
        want_heartbeat_region,
    }) = t.handle(init_message("node7"), now)
    else {
        panic!("Init not passed on for registration");
    };
    assert!(want_heartbeat_region);
    assert_eq!((rank.global_rank, rank.local_rank, rank.pid), (3, 1, 0));
    t.register(RankInfo { pid: PID, ..rank }, 77, false, now)
}

fn reply(handled: Handled) -> pb::server_message::Msg {
    match handled {
        Handled::Reply(reply) => reply.msg.expect("a message"),
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn assert_ok(handled: Handled) {
    match reply(handled) {
        pb::server_message::Msg::Ok(_) => {}
        other => panic!("expected Ok, got {other:?}"),
    }
}

/// The refusal's code, its cause checked to contain `fragment`.
fn assert_refused(handled: Handled, code: pb::ErrorCode, fragment: &str) {
    match reply(handled) {
        pb::server_message::Msg::Error(e) => {
            assert_eq!(e.code(), code, "{e:?}");
            assert!(
                e.cause.contains(fragment),
                "{:?} lacks {fragment:?}",
                e.cause
            );
        }
        other => panic!("expected an Error, got {other:?}"),
    }
}

fn heartbeat() -> pb::ClientMessage {
    message(Msg::Heartbeat(pb::Heartbeat { state: None }))
}

fn section(name: &str, action: pb::SectionAction) -> pb::ClientMessage {
    message(Msg::Section(pb::Section {
        name: name.to_owned(),
        action: action.into(),
    }))
}

fn open(name: &str) -> pb::ClientMessage {
    section(name, pb::SectionAction::Open)
}

fn close(name: &str) -> pb::ClientMessage {
    section(name, pb::SectionAction::Close)
}

/// The cause of the termination `action` must be.
fn terminated(action: Option<Action>, fragment: &str) -> String {
    match action {
        Some(Action::Terminate { cause, .. }) => {
            assert!(cause.contains(fragment), "{cause:?} lacks {fragment:?}");
            cause
        }
        other => panic!("expected a termination for {fragment:?}, got {other:?}"),
    }
}

fn notes_text(t: &mut RankTracker) -> String {
    t.take_notes()
        .into_iter()
        .map(|n| n.line)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn waiting_then_initialized_then_running() {
    let base = Instant::now();
    let mut t = tracker("{}");
    assert_eq!(t.state(), RankState::Waiting);
    assert!(!t.is_watching());
    let reply = register(&mut t, base);
    assert!(
        reply.config.is_some(),
        "Init's Ok carries the configuration"
    );
    assert_eq!(t.state(), RankState::Initialized);
    assert_eq!(t.rank().map(|r| r.pid), Some(PID));
    assert!(t.is_watching());
    assert!(notes_text(&mut t).contains("registered global rank 3 (local 1) pid 4242"));

    assert_ok(t.handle(heartbeat(), base + ms(250)));
    assert_eq!(t.state(), RankState::Running);
    let status = t.status(base + ms(1000));
    assert_eq!(status.heartbeats, 1);
    assert_eq!(status.ms_since_init, Some(1000));
    assert_eq!(status.ms_since_last_heartbeat, Some(750));
    assert_eq!(status.ms_out_of_section, Some(1000));
    assert_eq!(status.rank.unwrap().host, "node7");
}

#[test]
fn shared_memory_beats_count_and_start_running() {
    let base = Instant::now();
    let mut t = tracker(r#"{"initial_heartbeat_timeout_ms": 100}"#);
    register(&mut t, base);
    t.beats(0, base + ms(50));
    assert_eq!(t.state(), RankState::Initialized, "no beat, no change");
    t.beats(5, base + ms(60));
    assert_eq!(t.state(), RankState::Running);
    let status = t.status(base + ms(100));
    assert_eq!(status.heartbeats, 5);
    assert_eq!(status.ms_since_last_heartbeat, Some(40));
    // The first beat ended the initial heartbeat timeout.
    assert_eq!(t.check(base + ms(10_000)), None);
}

#[test]
fn the_initial_heartbeat_timeout_fires_after_its_limit_not_at_it() {
    let base = Instant::now();
    // The short heartbeat timeout does not apply before the first beat.
    let mut t = tracker(r#"{"initial_heartbeat_timeout_ms": 400, "heartbeat_timeout_ms": 100}"#);
    register(&mut t, base);
    assert_eq!(t.check(base + ms(400)), None);
    let cause = terminated(t.check(base + ms(401)), "initial heartbeat timeout");
    assert_eq!(
        cause,
        "initial heartbeat timeout: 401 ms elapsed, limit 400 ms"
    );
    assert_eq!(t.state(), RankState::TimedOut);
    assert_eq!(t.last_timeout(), Some(cause.as_str()));
    let log = notes_text(&mut t);
    assert!(
        log.contains(
            "terminating global rank 3 (local 1) pid 4242 (start time 77) with SIGCONT then SIGKILL"
        ),
        "{log}"
    );
}

#[test]
fn the_heartbeat_timeout_runs_from_the_last_beat() {
    let base = Instant::now();
    let mut t = tracker(r#"{"heartbeat_timeout_ms": 300}"#);
    register(&mut t, base);
    for i in 1..=5 {
        assert_ok(t.handle(heartbeat(), base + ms(200 * i)));
        assert_eq!(t.check(base + ms(200 * i + 250)), None);
    }
    assert_eq!(t.check(base + ms(1300)), None);
    terminated(
        t.check(base + ms(1301)),
        "heartbeat timeout: 301 ms elapsed",
    );
    assert_eq!(t.status(base + ms(1301)).heartbeats, 5);
}

#[test]
fn each_section_has_its_own_timeout_while_heartbeats_go_on() {
    let base = Instant::now();
    let mut t = tracker(
        r#"{"heartbeat_timeout_ms": 2000, "section_timeouts_ms": {"step": 300, "other": 50}}"#,
    );
    register(&mut t, base);
    // A section without a timeout is unlimited.
    assert_ok(t.handle(open("free"), base));
    assert_ok(t.handle(open("step"), base + ms(100)));
    for i in 1..=4 {
        assert_ok(t.handle(heartbeat(), base + ms(100 * i)));
    }
    // Closed in time: no timeout; open again: it starts over.
    assert_ok(t.handle(close("step"), base + ms(350)));
    assert_ok(t.handle(open("step"), base + ms(400)));
    assert_eq!(t.check(base + ms(700)), None);
    let status = t.status(base + ms(700));
    let names: Vec<_> = status.open_sections.iter().map(|s| &s.name).collect();
    assert_eq!(names, ["free", "step"]);
    assert_eq!(status.open_sections[1].open_ms, 300);
    assert_eq!(status.open_sections[1].timeout_ms, Some(300));
    assert_eq!(status.open_sections[0].timeout_ms, None);
    assert_eq!(status.ms_out_of_section, None);
    terminated(
        t.check(base + ms(701)),
        "section \"step\" timeout: 301 ms elapsed, limit 300 ms",
    );
    assert!(notes_text(&mut t).contains("open sections: \"free\" (701 ms), \"step\" (301 ms)"));

    // The other section's own, shorter limit.
    let mut t = tracker(r#"{"section_timeouts_ms": {"step": 300, "other": 50}}"#);
    register(&mut t, base);
    assert_ok(t.handle(open("other"), base));
    assert_eq!(t.check(base + ms(50)), None);
    terminated(t.check(base + ms(51)), "section \"other\" timeout");
}

#[test]
fn the_out_of_section_timeout_runs_while_no_section_is_open() {
    let base = Instant::now();
    let mut t = tracker(r#"{"out_of_section_timeout_ms": 300}"#);
    register(&mut t, base);
    // From Init; a section stops it.
    assert_ok(t.handle(open("a"), base + ms(200)));
    assert_ok(t.handle(open("b"), base + ms(250)));
    assert_eq!(t.check(base + ms(5000)), None);
    // Closing one of two: still in a section.
    assert_ok(t.handle(close("a"), base + ms(5000)));
    assert_eq!(t.check(base + ms(9000)), None);
    // The last close starts it again, from then.
    assert_ok(t.handle(close("b"), base + ms(9000)));
    assert_eq!(t.status(base + ms(9100)).ms_out_of_section, Some(100));
    assert_eq!(t.check(base + ms(9300)), None);
    terminated(
        t.check(base + ms(9301)),
        "out-of-section timeout: 301 ms elapsed",
    );

    // CLOSE_ALL starts it too.
    let mut t = tracker(r#"{"out_of_section_timeout_ms": 300}"#);
    register(&mut t, base);
    assert_ok(t.handle(open("a"), base));
    assert_ok(t.handle(section("", pb::SectionAction::CloseAll), base + ms(1000)));
    assert_eq!(t.check(base + ms(1300)), None);
    terminated(t.check(base + ms(1301)), "out-of-section timeout");
}

#[test]
fn the_termination_signal_escalates_to_sigkill_after_the_grace_period() {
    let base = Instant::now();
    let mut t = tracker(
        r#"{"heartbeat_timeout_ms": 200, "termination_signal": "SIGTERM", "kill_after_ms": 400}"#,
    );
    register(&mut t, base);
    assert_ok(t.handle(heartbeat(), base));
    let fired = base + ms(250);
    match t.check(fired) {
        Some(Action::Terminate { signal, .. }) => assert_eq!(signal, Signal::TERM),
        other => panic!("expected a termination, got {other:?}"),
    }
    assert!(notes_text(&mut t).contains("with SIGCONT then SIGTERM, SIGKILL after 400 ms"));
    assert_eq!(t.next_due(), Some(fired + ms(400)));
    assert!(t.escalation_pending());
    assert_eq!(t.check(fired + ms(399)), None);
    assert_eq!(
        t.check(fired + ms(450)),
        Some(Action::Escalate { waited: ms(450) })
    );
    // Once.
    assert_eq!(t.next_due(), None);
    assert_eq!(t.check(fired + ms(10_000)), None);
    assert_eq!(t.state(), RankState::TimedOut);
}

#[test]
fn no_escalation_after_sigkill_or_without_a_grace_period() {
    let base = Instant::now();
    for json in [
        r#"{"heartbeat_timeout_ms": 10, "termination_signal": "SIGKILL", "kill_after_ms": 400}"#,
        r#"{"heartbeat_timeout_ms": 10, "termination_signal": "SIGTERM"}"#,
    ] {
        let mut t = tracker(json);
        register(&mut t, base);
        assert_ok(t.handle(heartbeat(), base));
        terminated(t.check(base + ms(11)), "heartbeat timeout");
        assert_eq!(t.next_due(), None, "{json}");
        assert!(!t.escalation_pending());
        assert_eq!(t.check(base + ms(100_000)), None, "{json}");
    }
}

#[test]
fn a_failed_health_check_terminates_like_a_timeout_only_while_watched() {
    let base = Instant::now();
    let mut t = tracker("{}");
    assert_eq!(
        t.fail("gpu gone".into(), base),
        None,
        "nothing to terminate"
    );
    register(&mut t, base);
    let cause = terminated(
        t.fail("health check \"gpu\" failed: gone".into(), base),
        "gpu",
    );
    assert_eq!(t.status(base).last_timeout, Some(cause));
    assert_eq!(t.fail("again".into(), base), None, "already timed out");
}

#[test]
fn timed_out_refuses_the_rank_until_it_exits_then_terminated_takes_a_new_init() {
    let base = Instant::now();
    let mut t = tracker(r#"{"initial_heartbeat_timeout_ms": 100}"#);
    register(&mut t, base);
    terminated(t.check(base + ms(101)), "initial heartbeat");
    let code = pb::ErrorCode::RankTimedOut;
    assert_refused(
        t.handle(heartbeat(), base + ms(102)),
        code,
        "Heartbeat refused",
    );
    assert_refused(t.handle(open("x"), base + ms(102)), code, "Section refused");
    assert_refused(
        t.handle(init_message("n"), base + ms(102)),
        code,
        "is being terminated",
    );
    // Its connection going changes nothing: the rank is kept until it exits.
    t.connection_lost("the rank closed its connection", PID, base + ms(103));
    assert_eq!(t.state(), RankState::TimedOut);
    assert!(t.rank().is_some());
    t.take_notes();

    t.rank_exited(None, base + ms(150));
    assert_eq!(t.state(), RankState::Terminated);
    assert!(t.rank().is_none());
    assert!(notes_text(&mut t).contains("exited 49 ms after it was signalled"));
    assert_eq!(
        t.status(base + ms(150))
            .last_timeout
            .as_deref()
            .map(|s| s.contains("initial")),
        Some(true)
    );

    register(&mut t, base + ms(200));
    assert_eq!(t.state(), RankState::Initialized);
    assert_eq!(
        t.check(base + ms(300)),
        None,
        "the new rank's clock starts at its Init"
    );
}

#[test]
fn a_rank_exit_with_its_connection_open_closes_it_and_says_so() {
    let base = Instant::now();
    let mut t = tracker(r#"{"heartbeat_timeout_ms": 10}"#);
    register(&mut t, base);
    assert_ok(t.handle(heartbeat(), base));
    terminated(t.check(base + ms(20)), "heartbeat");
    t.take_notes();
    t.rank_exited(Some(PID), base + ms(30));
    let log = notes_text(&mut t);
    assert!(log.contains("rank terminated (pid 4242)"), "{log}");
}

#[test]
fn a_lost_connection_leaves_restarting_when_a_restart_is_expected() {
    let base = Instant::now();
    for (json, next) in [
        ("{}", RankState::Restarting),
        (r#"{"restart_expected": false}"#, RankState::Waiting),
    ] {
        for heartbeats in [0, 1] {
            let mut t = tracker(json);
            register(&mut t, base);
            if heartbeats > 0 {
                assert_ok(t.handle(heartbeat(), base));
            }
            assert_ok(t.handle(open("save"), base + ms(100)));
            t.take_notes();
            t.connection_lost("the rank closed its connection", 99, base + ms(1300));
            assert_eq!(t.state(), next, "{json}");
            assert!(t.rank().is_none());
            let notes = t.take_notes();
            assert!(
                matches!(&notes[..], [Note { level: LogLevel::Warn, kind: Some(_), line }]
                    if line.contains("(pid 99) with sections still open: \"save\" (1200 ms)")),
                "{notes:?}"
            );
            // Nothing is watched any more.
            assert_eq!(t.check(base + ms(1_000_000)), None);
            assert_eq!(t.status(base).heartbeats, 0);
            // The next rank registers.
            register(&mut t, base + ms(2000));
            assert_eq!(t.state(), RankState::Initialized);
        }
    }
}

#[test]
fn a_rank_that_exits_on_its_own_leaves_restarting_or_waiting() {
    let base = Instant::now();
    for (json, next) in [
        ("{}", RankState::Restarting),
        (r#"{"restart_expected": false}"#, RankState::Waiting),
    ] {
        for holder in [Some(PID), None] {
            let mut t = tracker(json);
            register(&mut t, base);
            assert_ok(t.handle(open("step"), base));
            t.take_notes();
            t.rank_exited(holder, base + ms(5));
            assert_eq!(t.state(), next, "{json} {holder:?}");
            assert!(t.rank().is_none());
            let log = notes_text(&mut t);
            assert!(
                log.contains("rank pid 4242 exited without a timeout with sections still open: \"step\" (5 ms)"),
                "{log}"
            );
        }
    }
}

#[test]
fn a_connection_lost_while_nothing_is_registered_changes_nothing() {
    let base = Instant::now();
    let mut t = tracker("{}");
    t.connection_lost("the monitor closed the rank connection", 7, base);
    assert_eq!(t.state(), RankState::Waiting);
    assert!(notes_text(&mut t).contains("(pid 7)"));
    t.rank_exited(None, base);
    assert_eq!(t.state(), RankState::Waiting, "no rank, no exit");
}

#[test]
fn closed_is_the_end_and_reports_open_sections() {
    let base = Instant::now();
    let mut t =
        tracker(r#"{"heartbeat_timeout_ms": 10, "termination_signal": 15, "kill_after_ms": 1000}"#);
    register(&mut t, base);
    assert_ok(t.handle(heartbeat(), base));
    assert_ok(t.handle(open("save"), base));
    terminated(t.check(base + ms(11)), "heartbeat");
    // The server sends the pending SIGKILL at once when it shuts down.
    assert!(t.escalation_pending());
    t.take_notes();
    t.close(base + ms(20));
    assert_eq!(t.state(), RankState::Closed);
    assert!(t.rank().is_none());
    assert!(!t.escalation_pending());
    assert_eq!(t.check(base + ms(5000)), None);
    assert!(
        notes_text(&mut t).contains("shutting down with sections still open: \"save\" (20 ms)")
    );
}

#[test]
fn refusals_carry_their_code_and_change_nothing() {
    use pb::ErrorCode as C;
    let base = Instant::now();
    let mut t = tracker("{}");
    assert_refused(
        t.handle(heartbeat(), base),
        C::NotInitialized,
        "before Init",
    );
    assert_refused(t.handle(open("x"), base), C::NotInitialized, "before Init");
    assert_refused(
        t.handle(message(Msg::Init(pb::Init::default())), base),
        C::InvalidArgument,
        "without rank info",
    );
    assert_refused(
        t.handle(init_message(&"h".repeat(257)), base),
        C::FieldTooLarge,
        "host name (RankInfo.host) of 257 bytes exceeds the cap of 256 bytes",
    );
    assert_refused(
        t.handle(pb::ClientMessage { msg: None }, base),
        C::UnknownMessage,
        "empty ClientMessage",
    );
    assert_eq!(t.state(), RankState::Waiting);

    register(&mut t, base);
    assert_refused(
        t.handle(init_message("n"), base),
        C::AlreadyRegistered,
        "already registered as global rank 3 (pid 4242)",
    );
    let big = message(Msg::Heartbeat(pb::Heartbeat {
        state: Some(vec![0; 16 * 1024 + 1]),
    }));
    assert_refused(t.handle(big, base), C::FieldTooLarge, "heartbeat state");
    assert_eq!(
        t.state(),
        RankState::Initialized,
        "a refused beat is no beat"
    );
    assert_refused(
        t.handle(open(""), base),
        C::InvalidArgument,
        "non-empty name",
    );
    assert_refused(
        t.handle(open(&"s".repeat(257)), base),
        C::FieldTooLarge,
        "section name",
    );
    assert_refused(
        t.handle(section("x", pb::SectionAction::Unspecified), base),
        C::InvalidArgument,
        "is not OPEN (1), CLOSE (2) or CLOSE_ALL (3)",
    );
    assert_ok(t.handle(open("a"), base));
    assert_refused(
        t.handle(open("a"), base + ms(5)),
        C::SectionAlreadyOpen,
        "\"a\" is already open (for 5 ms)",
    );
    assert_refused(t.handle(close("b"), base), C::SectionNotOpen, "(open: [a])");
    for i in 1..64 {
        assert_ok(t.handle(open(&format!("s{i}")), base));
    }
    assert_refused(
        t.handle(open("one-more"), base),
        C::TooManySections,
        "64 sections",
    );
    let update = |n: usize| {
        message(Msg::UpdateConfig(pb::UpdateConfig {
            timeouts: Some(pb::Timeouts {
                section_timeouts_ms: (0..n).map(|i| (format!("s{i}"), 1000)).collect(),
                ..pb::Timeouts::default()
            }),
        }))
    };
    assert_refused(
        t.handle(update(65), base),
        C::TooManySections,
        "65 section timeouts",
    );
    assert!(
        t.config().timeouts.sections.is_empty(),
        "refused: nothing changed"
    );
    assert_ok(t.handle(update(64), base));
    assert_eq!(t.config().timeouts.sections.len(), 64);
}

#[test]
fn skipped_section_replies_are_silent_and_a_refusal_is_only_logged() {
    let base = Instant::now();
    let mut t = tracker(r#"{"skip_section_replies": true}"#);
    register(&mut t, base);
    t.take_notes();
    assert!(matches!(t.handle(open("a"), base), Handled::NoReply));
    assert!(matches!(t.handle(open("a"), base), Handled::NoReply));
    let log = notes_text(&mut t);
    assert!(
        log.contains("section message refused (no reply sent): section \"a\" is already open"),
        "{log}"
    );
    assert_eq!(t.status(base).open_sections.len(), 1);
}

#[test]
fn an_update_changes_the_timeouts_at_the_next_check() {
    let base = Instant::now();
    let mut t = tracker(r#"{"heartbeat_timeout_ms": 100}"#);
    register(&mut t, base);
    assert_ok(t.handle(heartbeat(), base));
    let update = |heartbeat_ms| {
        message(Msg::UpdateConfig(pb::UpdateConfig {
            timeouts: Some(pb::Timeouts {
                heartbeat_ms: Some(heartbeat_ms),
                ..pb::Timeouts::default()
            }),
        }))
    };
    // 0 removes the timeout.
    match reply(t.handle(update(0), base)) {
        pb::server_message::Msg::Ok(ok) => {
            let timeouts = ok.config.unwrap().timeouts.unwrap();
            assert_eq!(timeouts.heartbeat_ms, None);
        }
        other => panic!("expected Ok, got {other:?}"),
    }
    assert_eq!(t.check(base + ms(10_000)), None);
    // A new limit counts from the last beat, as the old one did.
    assert_ok(t.handle(update(500), base + ms(10_000)));
    assert!(notes_text(&mut t).contains("timeouts updated"));
    terminated(
        t.check(base + ms(10_000)),
        "heartbeat timeout: 10000 ms elapsed, limit 500 ms",
    );
}

#[test]
fn a_status_query_is_answered_from_the_tracker_in_every_state() {
    let base = Instant::now();
    let mut t = tracker("{}");
    let query = || message(Msg::StatusQuery(pb::StatusQuery {}));
    match reply(t.handle(query(), base)) {
        pb::server_message::Msg::Status(s) => {
            assert_eq!(s.state(), pb::MonitorState::Waiting);
            assert_eq!(s.rank, None);
        }
        other => panic!("expected Status, got {other:?}"),
    }
    register(&mut t, base);
    let state = message(Msg::Heartbeat(pb::Heartbeat {
        state: Some(b"step 7".to_vec()),
    }));
    assert_ok(t.handle(state, base + ms(1)));
    match reply(t.handle(query(), base + ms(3))) {
        pb::server_message::Msg::Status(s) => {
            assert_eq!(s.state(), pb::MonitorState::Running);
            assert_eq!(s.ms_since_last_heartbeat, Some(2));
            assert_eq!(s.last_state.as_deref(), Some(&b"step 7"[..]));
        }
        other => panic!("expected Status, got {other:?}"),
    }
}
