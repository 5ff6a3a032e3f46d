//! Why the server refuses something: a [`RefusalCode`] for programs and a
//! cause for people, sent together as one `Error` frame.

use nodeipc_proto::monitor as pb;

use crate::limits::{MAX_CAUSE, truncate};

/// Why the monitor refused a request or a connection: the `code` of its
/// `Error` reply (`ErrorCode` in `monitor.proto`). Stable, like the
/// protocol's numbers; new codes may come, so match with a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalCode {
    /// No code: a monitor older than the field, or a code this build does
    /// not know (a newer monitor's).
    Unspecified,
    /// The frame's bytes are not a message.
    Malformed,
    /// The frame is above the size limit; the connection was closed.
    FrameTooLarge,
    /// No message set, or one the monitor does not know.
    UnknownMessage,
    /// A field is over its cap (host name, heartbeat state, section name).
    FieldTooLarge,
    /// A value is not acceptable (no rank info, an empty section name, an
    /// unknown section action).
    InvalidArgument,
    /// A heartbeat or section before `Init`.
    NotInitialized,
    /// A second `Init` while a rank is registered.
    AlreadyRegistered,
    /// The monitor timed the rank out and is terminating it.
    RankTimedOut,
    /// `Init` named a pid that is neither the client nor its descendant.
    PidNotAllowed,
    /// The client lives in a pid namespace the monitor cannot see.
    PidNamespace,
    /// The process named, or the one that connected, is gone.
    ProcessGone,
    /// The section is open already.
    SectionAlreadyOpen,
    /// The section is not open.
    SectionNotOpen,
    /// Too many sections open, or too many section timeouts.
    TooManySections,
    /// The connection did not prove itself within the first-message timeout.
    FirstMessageDeadline,
    /// A reply waited too long to be read.
    ReplyDeadline,
    /// Another client holds the rank connection.
    RankSlotBusy,
    /// Every control connection is busy (or this idle one gave its slot up).
    ControlSlotsBusy,
    /// The client runs as another uid.
    PermissionDenied,
    /// `close_connection` while no rank is connected.
    NoRankConnection,
    /// A failure on the monitor's side.
    Internal,
}

impl RefusalCode {
    /// The protocol's value.
    pub(crate) fn to_proto(self) -> pb::ErrorCode {
        use pb::ErrorCode as P;
        match self {
            RefusalCode::Unspecified => P::Unspecified,
            RefusalCode::Malformed => P::Malformed,
            RefusalCode::FrameTooLarge => P::FrameTooLarge,
            RefusalCode::UnknownMessage => P::UnknownMessage,
            RefusalCode::FieldTooLarge => P::FieldTooLarge,
            RefusalCode::InvalidArgument => P::InvalidArgument,
            RefusalCode::NotInitialized => P::NotInitialized,
            RefusalCode::AlreadyRegistered => P::AlreadyRegistered,
            RefusalCode::RankTimedOut => P::RankTimedOut,
            RefusalCode::PidNotAllowed => P::PidNotAllowed,
            RefusalCode::PidNamespace => P::PidNamespace,
            RefusalCode::ProcessGone => P::ProcessGone,
            RefusalCode::SectionAlreadyOpen => P::SectionAlreadyOpen,
            RefusalCode::SectionNotOpen => P::SectionNotOpen,
            RefusalCode::TooManySections => P::TooManySections,
            RefusalCode::FirstMessageDeadline => P::FirstMessageDeadline,
            RefusalCode::ReplyDeadline => P::ReplyDeadline,
            RefusalCode::RankSlotBusy => P::RankSlotBusy,
            RefusalCode::ControlSlotsBusy => P::ControlSlotsBusy,
            RefusalCode::PermissionDenied => P::PermissionDenied,
            RefusalCode::NoRankConnection => P::NoRankConnection,
            RefusalCode::Internal => P::Internal,
        }
    }

    /// From the protocol's number; an unknown one is [`RefusalCode::Unspecified`].
    pub(crate) fn from_proto(code: i32) -> RefusalCode {
        use pb::ErrorCode as P;
        match P::try_from(code).unwrap_or(P::Unspecified) {
            P::Unspecified => RefusalCode::Unspecified,
            P::Malformed => RefusalCode::Malformed,
            P::FrameTooLarge => RefusalCode::FrameTooLarge,
            P::UnknownMessage => RefusalCode::UnknownMessage,
            P::FieldTooLarge => RefusalCode::FieldTooLarge,
            P::InvalidArgument => RefusalCode::InvalidArgument,
            P::NotInitialized => RefusalCode::NotInitialized,
            P::AlreadyRegistered => RefusalCode::AlreadyRegistered,
            P::RankTimedOut => RefusalCode::RankTimedOut,
            P::PidNotAllowed => RefusalCode::PidNotAllowed,
            P::PidNamespace => RefusalCode::PidNamespace,
            P::ProcessGone => RefusalCode::ProcessGone,
            P::SectionAlreadyOpen => RefusalCode::SectionAlreadyOpen,
            P::SectionNotOpen => RefusalCode::SectionNotOpen,
            P::TooManySections => RefusalCode::TooManySections,
            P::FirstMessageDeadline => RefusalCode::FirstMessageDeadline,
            P::ReplyDeadline => RefusalCode::ReplyDeadline,
            P::RankSlotBusy => RefusalCode::RankSlotBusy,
            P::ControlSlotsBusy => RefusalCode::ControlSlotsBusy,
            P::PermissionDenied => RefusalCode::PermissionDenied,
            P::NoRankConnection => RefusalCode::NoRankConnection,
            P::Internal => RefusalCode::Internal,
        }
    }
}

/// A refusal on its way out: what the `Error` frame will say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// For programs.
    pub code: RefusalCode,
    /// For people: names the field, value, size or limit at fault.
    pub cause: String,
}

impl Refusal {
    /// A refusal with this code and cause.
    pub fn new(code: RefusalCode, cause: impl Into<String>) -> Refusal {
        Refusal {
            code,
            cause: cause.into(),
        }
    }

    /// As the `Error` frame that carries it, the cause cut to 4 KiB.
    pub fn to_message(self) -> pb::ServerMessage {
        pb::ServerMessage {
            msg: Some(pb::server_message::Msg::Error(pb::Error {
                cause: truncate(self.cause, MAX_CAUSE),
                code: self.code.to_proto().into(),
            })),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.cause)
    }
}

/// The refusal of a field over its cap: names the field, its size and the cap.
pub(crate) fn over_cap(field: &str, size: usize, cap: usize) -> Refusal {
    Refusal::new(
        RefusalCode::FieldTooLarge,
        format!("{field} of {size} bytes exceeds the cap of {cap} bytes"),
    )
}
