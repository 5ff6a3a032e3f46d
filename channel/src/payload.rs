//! What a channel carries, by type: [`Raw`] frames of bytes, or protobuf
//! messages of any schema. The coordinator's and the worker's calls have
//! the same names either way; which ones exist, and what they take and
//! return, follows from the type.

use crate::aggregate::{Aggregate, Pick};

/// Frames of bytes of any encoding, as a channel's request or response
/// type: `Coordinator<Raw, Raw>` sends `&[u8]` and gathers borrowed views of
/// the workers' bytes ([`Gathered`](crate::Gathered),
/// [`Picked`](crate::Picked)); `Worker<Raw, Raw>` receives and answers bytes.
/// What the C ABI and the Python package wrap, and what a stack with its
/// own encoder uses.
///
/// A marker only: no value of it is ever made or sent. It implements no
/// `prost::Message`, so the raw and the typed calls never overlap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Raw;

/// What a channel may carry: [`Raw`] bytes, or any
/// `prost::Message + Default` (our `execute.proto` by default). Sealed: the
/// two kinds are all there is.
pub trait Payload: sealed::Sealed + 'static {
    /// How a coordinator of these responses turns every worker's answer
    /// into one ([`Aggregated`](crate::Aggregated)): an [`Aggregate`] rule
    /// for messages, a [`Pick`] of one rank's bytes for [`Raw`].
    type Rule: ?Sized + Send;
}

impl Payload for Raw {
    type Rule = dyn Pick + Send;
}

impl<M: prost::Message + Default + 'static> Payload for M {
    type Rule = dyn Aggregate<M> + Send;
}

pub(crate) mod sealed {
    /// Keeps [`Payload`](super::Payload) to the two kinds of this crate.
    pub trait Sealed {}
    impl Sealed for super::Raw {}
    impl<M: prost::Message + Default + 'static> Sealed for M {}
}
