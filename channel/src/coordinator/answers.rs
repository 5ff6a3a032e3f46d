//! What a gather hands out: views of the responses in the coordinator's
//! own buffers, borrowed until they drop (the next gather waits for that).

use std::sync::MutexGuard;

use super::{Gatherer, TurnGuard};
#[cfg(doc)]
use crate::mode::Mode;
use crate::{Error, Result};

/// Every worker's response to one request, as bytes (the frames' bodies,
/// length prefix removed), in the coordinator's own buffers: borrowed until
/// it drops, which the coordinator's next gather waits for.
pub struct Gathered<'c> {
    pub(super) gatherer: MutexGuard<'c, Gatherer>,
    /// The caller's turn as the gathering thread, held while the responses
    /// are borrowed (the response thread has none: it is the only gatherer).
    pub(super) turn: Option<TurnGuard<'c>>,
}

impl<'c> Gathered<'c> {
    /// Worker `rank`'s response; `None` past the last rank.
    pub fn get(&self, rank: u32) -> Option<&[u8]> {
        self.gatherer.frames.get(rank as usize).map(Vec::as_slice)
    }

    /// How many responses: one per worker.
    pub fn len(&self) -> usize {
        self.gatherer.frames.len()
    }

    /// Never true: a channel has at least one worker.
    pub fn is_empty(&self) -> bool {
        self.gatherer.frames.is_empty()
    }

    /// Every response with its rank, in rank order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.gatherer
            .frames
            .iter()
            .enumerate()
            .map(|(rank, frame)| (rank as u32, frame.as_slice()))
    }

    /// Worker `rank`'s response alone (the others were checked and are
    /// dropped), or [`Error::RankOutOfRange`] naming the channel.
    pub(super) fn into_picked(self, channel: &str, rank: u32) -> Result<Picked<'c>> {
        if rank as usize >= self.len() {
            return Err(Error::RankOutOfRange {
                channel: channel.to_owned(),
                rank,
                workers: self.len() as u32,
            });
        }
        Ok(Picked {
            gatherer: self.gatherer,
            rank,
            turn: self.turn,
        })
    }
}

/// One worker's response to one request, as bytes in the coordinator's own
/// buffer: the first to arrive ([`First`](crate::First)), rank 0's
/// ([`Rank0AfterAll`](crate::Rank0AfterAll)) or the one a
/// [`Pick`](crate::Pick) rule chose ([`Aggregated`](crate::Aggregated)).
/// Borrowed until it drops, which the coordinator's next gather waits for.
pub struct Picked<'c> {
    pub(super) gatherer: MutexGuard<'c, Gatherer>,
    pub(super) rank: u32,
    /// As in [`Gathered`].
    pub(super) turn: Option<TurnGuard<'c>>,
}

impl Picked<'_> {
    /// The rank whose response this is.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Its response (the frame's body).
    pub fn bytes(&self) -> &[u8] {
        self.gatherer
            .frames
            .get(self.rank as usize)
            .map_or(&[], Vec::as_slice)
    }
}

/// What a [`Raw`](crate::Raw) coordinator's gather in a runtime [`Mode`]
/// hands out: every worker's bytes ([`Mode::All`], [`Mode::Init`]) or one
/// worker's ([`Mode::First`], [`Mode::Aggregated`], [`Mode::Rank0AfterAll`]).
pub enum Answers<'c> {
    /// Every worker's response, in rank order.
    All(Gathered<'c>),
    /// One worker's response.
    One(Picked<'c>),
}

impl<'c> Answers<'c> {
    /// The answers of a gather that takes every worker's (every mode but
    /// [`Mode::First`]).
    pub(super) fn every(self) -> Gathered<'c> {
        match self {
            Answers::All(gathered) => gathered,
            Answers::One(_) => unreachable!("only a First gather takes one answer"),
        }
    }

    /// The answer of a [`Mode::First`] gather.
    pub(super) fn first(self) -> Picked<'c> {
        match self {
            Answers::One(picked) => picked,
            Answers::All(_) => unreachable!("a First gather takes one answer"),
        }
    }

    /// With the caller's turn as the gathering thread, held as long as the
    /// answers are borrowed.
    pub(super) fn with_turn(mut self, turn: TurnGuard<'c>) -> Answers<'c> {
        match &mut self {
            Answers::All(gathered) => gathered.turn = Some(turn),
            Answers::One(picked) => picked.turn = Some(turn),
        }
        self
    }
}
