//! The gather modes: how a coordinator turns its workers' answers to one
//! request into what a gather returns. One marker type per mode, passed to
//! [`Coordinator::recv`](crate::Coordinator::recv),
//! [`try_recv`](crate::Coordinator::try_recv) or
//! [`recv_timeout`](crate::Coordinator::recv_timeout); each maps to the
//! runtime [`Mode`] that bindings pass and a record of a request keeps.
//!
//! | marker | typed coordinator | [`Raw`](crate::Raw) coordinator |
//! |---|---|---|
//! | [`All`] | `Vec<Resp>`, rank order | [`Gathered`](crate::Gathered) |
//! | [`First`] | `(rank, Resp)` | [`Picked`](crate::Picked) |
//! | [`Aggregated`] | `Resp`, by the channel's [`Aggregate`](crate::Aggregate) rule | [`Picked`](crate::Picked), by its [`Pick`](crate::Pick) rule |
//! | [`AggregatedBy`] | `Resp`, by the rule given | [`Picked`](crate::Picked), by the rule given |
//! | [`Rank0AfterAll`] | rank 0's `Resp` | rank 0's [`Picked`](crate::Picked) |
//! | [`Init`] | `Vec<Resp>` from the init slots | [`Gathered`](crate::Gathered) from the init slots |
//! | a [`Mode`] | — | [`Answers`] |

use std::fmt;

use crate::Result;
use crate::coordinator::{Answers, Coordinator};
use crate::payload::Payload;

/// A gather mode as a value: what the markers map to, and what the C ABI,
/// the Python package and a record of a sent request carry. A `Raw`
/// coordinator gathers with one directly (its result is an
/// [`Answers`]); `repr(C)`, so C sees the same numbers.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Every worker's answer ([`All`]).
    All = 0,
    /// The first answer to arrive; the others are drained later ([`First`]).
    First = 1,
    /// Every worker's answer, folded into one by the channel's rule
    /// ([`Aggregated`]; [`AggregatedBy`] maps here too).
    Aggregated = 2,
    /// Every worker's answer; rank 0's is handed out ([`Rank0AfterAll`]).
    Rank0AfterAll = 3,
    /// Every worker's init answer, from the init slots ([`Init`]).
    Init = 4,
}

impl Mode {
    /// Every mode, in the order of their numbers.
    pub const EVERY: [Mode; 5] = [
        Mode::All,
        Mode::First,
        Mode::Aggregated,
        Mode::Rank0AfterAll,
        Mode::Init,
    ];

    /// The mode's name, as errors and the bindings spell it
    /// (`all`, `first`, `aggregated`, `rank0_after_all`, `init`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::All => "all",
            Mode::First => "first",
            Mode::Aggregated => "aggregated",
            Mode::Rank0AfterAll => "rank0_after_all",
            Mode::Init => "init",
        }
    }

    /// The mode numbered `number` (as `repr(C)` numbers them), if any.
    pub fn from_number(number: u32) -> Option<Mode> {
        Mode::EVERY.into_iter().find(|m| *m as u32 == number)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every worker's answer to the oldest request not yet gathered, in rank
/// order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct All;

/// The first answer to arrive for the oldest request not yet gathered, with
/// the rank that gave it. The slower workers' answers to it are consumed
/// (and dropped) by the next gather, by [`drain`](crate::Coordinator::drain),
/// or by a send that needs their frames. A `try_recv(First)` is `None`
/// while no worker has answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct First;

/// Every worker's answer folded into one by the channel's rule
/// ([`Coordinator::set_aggregate`](crate::Coordinator::set_aggregate);
/// [`PullKvRule`](crate::PullKvRule) for the execute schema). Without a
/// rule the gather is refused before anything is taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aggregated;

/// Every worker's answer folded by the rule given, whatever rule the
/// channel has: an [`Aggregate`](crate::Aggregate) for a typed coordinator
/// (any `FnMut(Vec<Resp>) -> Result<Resp>`), a [`Pick`](crate::Pick) for a
/// [`Raw`](crate::Raw) one (any `FnMut(&Gathered<'_>) -> Result<u32>`).
/// Its runtime [`Mode`] is [`Mode::Aggregated`].
#[derive(Debug)]
pub struct AggregatedBy<'f, A: ?Sized>(pub &'f mut A);

/// Every worker's answer is awaited (and, typed, checked); rank 0's is
/// handed out — the answer MindIE's coordinator takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rank0AfterAll;

/// Every worker's init answer, from the fixed-size init slots, in rank
/// order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Init;

/// A gather mode for a coordinator of `Req` and `Resp`: what
/// [`recv`](crate::Coordinator::recv) and its `try_` and `_timeout` forms
/// hand out for it ([`Output`](GatherMode::Output)). Sealed: the markers of
/// this module (and [`Mode`], for a `Raw` coordinator) are all there is.
pub trait GatherMode<Req: Payload, Resp: Payload>: Sized + sealed::Sealed {
    /// What a gather in this mode hands out, borrowing the coordinator for
    /// `'c` where it hands out views of the coordinator's own buffers.
    type Output<'c>;

    /// The runtime mode this one maps to.
    fn mode(&self) -> Mode;

    /// Whether a gather in this mode can be made at all, checked before
    /// anything is taken (the channel's rule, for [`Aggregated`]).
    ///
    /// # Errors
    /// [`Error::ResponseThread`](crate::Error::ResponseThread) naming what
    /// is missing.
    #[doc(hidden)]
    fn ready(&self, coordinator: &Coordinator<Req, Resp>) -> Result<()> {
        let _ = coordinator;
        Ok(())
    }

    /// The output made of the bytes gathered for [`mode`](GatherMode::mode).
    ///
    /// # Errors
    /// What decoding, checking or the rule says.
    #[doc(hidden)]
    fn finish<'c>(
        self,
        coordinator: &'c Coordinator<Req, Resp>,
        answers: Answers<'c>,
    ) -> Result<Self::Output<'c>>;
}

pub(crate) mod sealed {
    /// Keeps [`GatherMode`](super::GatherMode) to this crate's modes.
    pub trait Sealed {}
    impl Sealed for super::All {}
    impl Sealed for super::First {}
    impl Sealed for super::Aggregated {}
    impl<A: ?Sized> Sealed for super::AggregatedBy<'_, A> {}
    impl Sealed for super::Rank0AfterAll {}
    impl Sealed for super::Init {}
    impl Sealed for super::Mode {}
}
