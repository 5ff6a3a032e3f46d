//! `nodeipc monitor status` for a person: the monitor's state in a few
//! labelled lines, times in words (`--json` prints the status as it is).

use std::time::Duration;

use nodeipc_monitor::{MonitorStatus, RankState};
use nodeipc_text::{duration, printable, signal_name};

/// The status as labelled lines, one fact each.
pub(crate) fn render(socket: &str, status: &MonitorStatus) -> String {
    let ms = |ms: u64| duration(Duration::from_millis(ms));
    let limit = |limit: Option<u64>| limit.map_or_else(|| "none".to_owned(), ms);
    let mut lines = vec![
        ("monitor", socket.to_owned()),
        ("state", state(status.state).to_owned()),
    ];
    lines.push((
        "rank",
        status.rank.as_ref().map_or_else(
            || "none registered".to_owned(),
            |rank| {
                format!(
                    "global {}, local {}, pid {} on {}",
                    rank.global_rank,
                    rank.local_rank,
                    rank.pid,
                    printable(&rank.host)
                )
            },
        ),
    ));
    let mut beats = status.heartbeats.to_string();
    if let Some(last) = status.ms_since_last_heartbeat {
        beats.push_str(&format!(", the last {} ago", ms(last)));
    }
    lines.push(("heartbeats", beats));
    if let Some(since) = status.ms_since_init {
        lines.push(("since init", ms(since)));
    }
    let sections = if status.open_sections.is_empty() {
        match status.ms_out_of_section {
            Some(out) => format!("none open (for {})", ms(out)),
            None => "none open".to_owned(),
        }
    } else {
        let open: Vec<String> = status
            .open_sections
            .iter()
            .map(|s| {
                format!(
                    "{} (open {}, limit {})",
                    printable(&s.name),
                    ms(s.open_ms),
                    limit(s.timeout_ms)
                )
            })
            .collect();
        open.join(", ")
    };
    lines.push(("sections", sections));
    let t = &status.timeouts;
    let mut timeouts = format!(
        "initial heartbeat {}, heartbeat {}, out of section {}",
        limit(t.initial_heartbeat_ms),
        limit(t.heartbeat_ms),
        limit(t.out_of_section_ms)
    );
    for (name, limit_ms) in &t.sections_ms {
        timeouts.push_str(&format!(", section {} {}", printable(name), ms(*limit_ms)));
    }
    lines.push(("timeouts", timeouts));
    let mut on_timeout = signal_name(status.termination_signal);
    if let Some(kill) = status.kill_after_ms {
        on_timeout.push_str(&format!(", then SIGKILL after {}", ms(kill)));
    }
    lines.push(("on timeout", on_timeout));
    if let Some(last) = &status.last_timeout {
        lines.push(("last timeout", printable(last).into_owned()));
    }
    if let Some(state) = &status.last_state {
        lines.push(("rank state", format!("{} bytes", state.len())));
    }
    let width = lines
        .iter()
        .map(|(label, _)| label.len())
        .max()
        .unwrap_or(0);
    lines
        .iter()
        .map(|(label, value)| format!("{label:<width$}  {value}\n"))
        .collect()
}

/// The state as the JSON form and the README spell it.
fn state(state: RankState) -> &'static str {
    match state {
        RankState::Waiting => "waiting (no rank registered)",
        RankState::Initialized => "initialized (no heartbeat yet)",
        RankState::Running => "running",
        RankState::TimedOut => "timed_out (the rank is being terminated)",
        RankState::Terminated => "terminated",
        RankState::Restarting => "restarting",
        RankState::Closed => "closed",
    }
}
