//! Every cap on what a peer may make the server keep or echo, and the proof
//! that together they fit in one frame: a status with every field at its
//! cap is at most [`MAX_STATUS_FRAME`] bytes, checked against [`MAX_FRAME`]
//! at compile time.
//!
//! Each field is checked when it arrives and refused with an `Error` naming
//! the field, its size and its cap; nothing a peer sends is cut silently.

use nodeipc_proto::LEN_PREFIX;

/// The largest frame either side accepts, length prefix included.
pub const MAX_FRAME: usize = 64 * 1024;

/// Longest a section name may be, in bytes.
pub const MAX_SECTION_NAME: usize = 256;

/// Most sections that may be open, or carry a timeout, at once (so that a
/// status always fits in one frame).
pub const MAX_SECTIONS: usize = 64;

/// Most bytes of application state a heartbeat may carry.
pub const MAX_STATE: usize = 16 * 1024;

/// Longest host name an `Init` may carry, in bytes (a DNS name is at most
/// 253; Linux's own host name at most 64).
pub const MAX_HOST: usize = 256;

/// Longest text the server sends or keeps for people, in bytes: an
/// `Error`'s cause, the last timeout's description (which quotes a section
/// name or a health check's reason). Longer texts are cut, marked with `…`.
pub(crate) const MAX_CAUSE: usize = 4096;

/// Bytes of a varint holding `v`.
const fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// A length-delimited field (string, bytes, message, map entry) of at most
/// `body` bytes: its tag (one byte, every field number here is below 16),
/// its length, its body.
const fn field(body: usize) -> usize {
    1 + varint_len(body as u64) + body
}

/// A `uint64` field at its longest (tag and a 10-byte varint).
const U64: usize = 1 + 10;
/// A `uint32` field at its longest.
const U32: usize = 1 + 5;
/// An `int32` field at its longest: negative values take 10 bytes.
const I32: usize = 1 + 10;
/// A `bool` field, or an enum below 128.
const SMALL: usize = 2;

/// `RankInfo`: three `uint32`s and the host name.
const RANK_INFO: usize = 3 * U32 + field(MAX_HOST);
/// `OpenSection`: name, `ms_open`, `timeout_ms`.
const OPEN_SECTION: usize = field(MAX_SECTION_NAME) + 2 * U64;
/// One `section_timeouts_ms` map entry: key and value.
const TIMEOUT_ENTRY: usize = field(MAX_SECTION_NAME) + U64;
/// `Timeouts`: three `uint64`s and the section map.
const TIMEOUTS: usize = 3 * U64 + MAX_SECTIONS * field(TIMEOUT_ENTRY);
/// `EffectiveConfig`: timeouts, signal, `kill_after_ms`, `skip_section_replies`.
const EFFECTIVE_CONFIG: usize = field(TIMEOUTS) + I32 + U64 + SMALL;
/// `Status`, field by field in `monitor.proto`'s order.
const STATUS: usize = SMALL // state
    + field(RANK_INFO)
    + U64 // heartbeats
    + MAX_SECTIONS * field(OPEN_SECTION)
    + U64 // ms_since_last_heartbeat
    + field(MAX_CAUSE) // last_timeout
    + U64 // ms_since_init
    + U64 // ms_out_of_section
    + field(EFFECTIVE_CONFIG)
    + field(MAX_STATE) // last_state
    + U64 // ms_restarting
    + field(SMALL + field(MAX_CAUSE)); // workload_request

/// The longest status reply, as a frame: `ServerMessage { status }` with
/// every field at its cap, length prefix included.
pub(crate) const MAX_STATUS_FRAME: usize = LEN_PREFIX + field(STATUS);

// The caps add up to one frame: a status can always be sent.
const _: () = assert!(MAX_STATUS_FRAME <= MAX_FRAME);
// Every other reply is smaller: an `Ok` carries at most the effective
// configuration, an `Error` at most a cause.
const _: () = assert!(LEN_PREFIX + field(field(EFFECTIVE_CONFIG) + 64) <= MAX_FRAME);
const _: () = assert!(LEN_PREFIX + field(field(MAX_CAUSE)) <= MAX_FRAME);

/// `text` cut to at most `max` bytes on a character boundary, ending in `…`
/// when it was cut.
pub(crate) fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max.saturating_sub('…'.len_utf8());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use nodeipc_proto::monitor as pb;
    use prost::Message;

    use super::*;

    /// A status with every field at its cap and every number at its
    /// longest encoding is exactly the computed bound: the bound holds,
    /// and it is tight.
    #[test]
    fn a_status_at_every_cap_fits_the_computed_bound() {
        let name = |i: usize| format!("{i:0>width$}", width = MAX_SECTION_NAME);
        let status = pb::Status {
            state: pb::MonitorState::Restarting.into(),
            rank: Some(pb::RankInfo {
                global_rank: u32::MAX,
                local_rank: u32::MAX,
                pid: u32::MAX,
                host: "h".repeat(MAX_HOST),
            }),
            heartbeats: u64::MAX,
            open_sections: (0..MAX_SECTIONS)
                .map(|i| pb::OpenSection {
                    name: name(i),
                    ms_open: u64::MAX,
                    timeout_ms: Some(u64::MAX),
                })
                .collect(),
            ms_since_last_heartbeat: Some(u64::MAX),
            last_timeout: "c".repeat(MAX_CAUSE),
            ms_since_init: Some(u64::MAX),
            ms_out_of_section: Some(u64::MAX),
            config: Some(pb::EffectiveConfig {
                timeouts: Some(pb::Timeouts {
                    initial_heartbeat_ms: Some(u64::MAX),
                    heartbeat_ms: Some(u64::MAX),
                    out_of_section_ms: Some(u64::MAX),
                    section_timeouts_ms: (0..MAX_SECTIONS).map(|i| (name(i), u64::MAX)).collect(),
                }),
                termination_signal: -1,
                kill_after_ms: Some(u64::MAX),
                skip_section_replies: true,
                check_interval_ms: None,
            }),
            last_state: Some(vec![0xff; MAX_STATE]),
            ms_restarting: Some(u64::MAX),
            workload_request: Some(pb::WorkloadControl {
                action: 2,
                description: "d".repeat(MAX_CAUSE),
            }),
        };
        let message = pb::ServerMessage {
            msg: Some(pb::server_message::Msg::Status(status)),
        };
        let frame = LEN_PREFIX + message.encoded_len();
        assert!(
            frame <= MAX_STATUS_FRAME,
            "{frame} > bound {MAX_STATUS_FRAME}"
        );
        assert!(
            frame + 16 >= MAX_STATUS_FRAME,
            "{frame} far below the bound {MAX_STATUS_FRAME}"
        );
    }
}
