//! The gather grid: every mode in `recv`, `try_recv` and `recv_timeout`
//! form, raw or typed by the coordinator's type, each form one call of the
//! byte-level gather; `drain` in the same three forms; the channel's
//! aggregation rule.

use std::time::Duration;

use super::answers::{Answers, Gathered, Picked};
use super::gather::{Slot, decode, decode_all};
use super::liveness::Waiter;
use super::{Coordinator, Turn};
use crate::aggregate::{Aggregate, Pick};
use crate::mode::{Aggregated, AggregatedBy, All, First, GatherMode, Init, Mode, Rank0AfterAll};
use crate::payload::{Payload, Raw};
use crate::wait::{Budget, Wait};
use crate::{Error, Result};

impl<Req: Payload, Resp: Payload> Coordinator<Req, Resp> {
    /// Gathers the answers to the oldest request not yet gathered, in
    /// `mode` ([`All`], [`First`], [`Aggregated`], [`AggregatedBy`],
    /// [`Rank0AfterAll`], [`Init`]; a [`Mode`] for a `Raw` coordinator),
    /// within the configured timeout. What it returns follows from the mode
    /// and the coordinator's type (see [`mode`](crate::mode)): decoded
    /// messages for a typed coordinator, views of the coordinator's own
    /// copies of the workers' bytes for a `Raw` one.
    ///
    /// A timeout breaks nothing: the answers taken so far are kept and the
    /// next gather resumes there.
    ///
    /// # Errors
    /// Typed, the first of: [`Error::WorkerFailed`] (a non-zero status, for
    /// the execute schema), [`Error::UnknownMessageType`],
    /// [`Error::Corrupt`], [`Error::Decode`] — every worker's slot is still
    /// consumed, so the channel stays in step; raw, [`Error::Corrupt`] alone.
    /// Then [`Error::WorkerDied`], [`Error::Timeout`],
    /// [`Error::NothingOutstanding`] (every request sent is gathered);
    /// [`Error::Busy`] while another thread gathers;
    /// [`Error::ResponseThread`] while the response thread runs, or (before
    /// anything is taken) for [`Aggregated`] on a channel without a rule;
    /// what an aggregation rule returns, and [`Error::RankOutOfRange`] for
    /// a [`Pick`] of a rank outside the channel.
    ///
    /// # Examples
    /// ```no_run
    /// use nodeipc_channel::{All, Channel, First, Rank0AfterAll};
    /// let coordinator = Channel::builder("/nodeipc-doc-recv").workers(2).create()?;
    /// # let request = nodeipc_proto::execute::ExecuteRequest::default();
    /// coordinator.send(&request)?;
    /// let every = coordinator.recv(All)?;              // Vec<ExecuteResponse>, rank order
    /// coordinator.send(&request)?;
    /// let (rank, fastest) = coordinator.recv(First)?;  // the rest drained later
    /// coordinator.send(&request)?;
    /// let rank0 = coordinator.recv(Rank0AfterAll)?;    // every answer awaited and checked
    /// # Ok::<(), nodeipc_channel::Error>(())
    /// ```
    pub fn recv<M: GatherMode<Req, Resp>>(&self, mode: M) -> Result<M::Output<'_>> {
        let wait = Wait::Within(self.default_budget());
        Ok(self
            .gather(mode, wait)?
            .expect("a gather that may wait gathers or fails"))
    }

    /// [`recv`](Coordinator::recv) without waiting: `None` while an answer
    /// it needs is not there yet ([`First`]: while no worker has answered).
    /// The answers it could take are kept for the next gather.
    ///
    /// # Errors
    /// As [`recv`](Coordinator::recv), never [`Error::Timeout`]; a dead
    /// worker whose answer is missing is [`Error::WorkerDied`].
    pub fn try_recv<M: GatherMode<Req, Resp>>(&self, mode: M) -> Result<Option<M::Output<'_>>> {
        self.gather(mode, Wait::Try)
    }

    /// [`recv`](Coordinator::recv) within `timeout` instead of the
    /// configured one.
    ///
    /// # Errors
    /// As [`recv`](Coordinator::recv).
    pub fn recv_timeout<M: GatherMode<Req, Resp>>(
        &self,
        mode: M,
        timeout: Duration,
    ) -> Result<M::Output<'_>> {
        let wait = Wait::Within(Budget::new(timeout));
        Ok(self
            .gather(mode, wait)?
            .expect("a gather that may wait gathers or fails"))
    }

    /// Every form of every mode: the caller's turn as the gathering thread
    /// (refused while the response thread runs or another thread gathers),
    /// the mode's own check, then the one byte-level gather.
    fn gather<M: GatherMode<Req, Resp>>(
        &self,
        mode: M,
        mut wait: Wait,
    ) -> Result<Option<M::Output<'_>>> {
        let runtime = mode.mode();
        self.check_no_thread()?;
        let turn = self.shared.turn(Turn::Gather, call_name(runtime))?;
        mode.ready(self)?;
        let Some(answers) = self
            .shared
            .gather_frames(Waiter::Caller, runtime, &mut wait)?
        else {
            return Ok(None);
        };
        mode.finish(self, answers.with_turn(turn)).map(Some)
    }

    /// Consumes (and drops) every answer a [`First`] gather left behind,
    /// waiting for the slower workers to give them; returns how many. Call
    /// it before closing the channel after a [`First`] gather, so every
    /// worker can finish its last answer. (A send that needs those workers'
    /// frames drains them too.)
    ///
    /// # Errors
    /// [`Error::WorkerDied`], [`Error::Timeout`]; [`Error::Busy`] and
    /// [`Error::ResponseThread`] as for [`recv`](Coordinator::recv).
    pub fn drain(&self) -> Result<u64> {
        let wait = Wait::Within(self.default_budget());
        Ok(self
            .drain_with("drain", wait)?
            .expect("a drain that may wait drains or fails"))
    }

    /// [`drain`](Coordinator::drain) without waiting: `None` while a slower
    /// worker has not given its answer yet (the ones there are taken).
    ///
    /// # Errors
    /// As [`drain`](Coordinator::drain), never [`Error::Timeout`].
    pub fn try_drain(&self) -> Result<Option<u64>> {
        self.drain_with("try_drain", Wait::Try)
    }

    /// [`drain`](Coordinator::drain) within `timeout`.
    ///
    /// # Errors
    /// As [`drain`](Coordinator::drain).
    pub fn drain_timeout(&self, timeout: Duration) -> Result<u64> {
        let wait = Wait::Within(Budget::new(timeout));
        Ok(self
            .drain_with("drain_timeout", wait)?
            .expect("a drain that may wait drains or fails"))
    }

    fn drain_with(&self, op: &'static str, mut wait: Wait) -> Result<Option<u64>> {
        self.check_no_thread()?;
        let _turn = self.shared.turn(Turn::Gather, op)?;
        self.shared.drain(Waiter::Caller, &mut wait)
    }

    /// The error of an [`Aggregated`] gather on a channel without a rule.
    fn no_rule(&self) -> Error {
        self.thread_error("no aggregation rule for these messages (call set_aggregate first)")
    }

    /// Whether the channel has an aggregation rule.
    fn has_rule(&self) -> Result<()> {
        match self.lock_rule().is_some() {
            true => Ok(()),
            false => Err(self.no_rule()),
        }
    }
}

/// The name a refused gather is reported under ([`Error::Busy`]).
fn call_name(mode: Mode) -> &'static str {
    match mode {
        Mode::All => "recv(All)",
        Mode::First => "recv(First)",
        Mode::Aggregated => "recv(Aggregated)",
        Mode::Rank0AfterAll => "recv(Rank0AfterAll)",
        Mode::Init => "recv(Init)",
    }
}

impl<Req, Resp> Coordinator<Req, Resp>
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    /// The rule [`Aggregated`] gathers and the response thread fold the
    /// workers' responses with ([`PullKvRule`](crate::PullKvRule) for the
    /// execute schema; none for another). A closure
    /// `FnMut(Vec<Resp>) -> Result<Resp>` is one.
    pub fn set_aggregate(&mut self, rule: impl Aggregate<Resp> + Send + 'static) {
        *self.rule_mut() = Some(Box::new(rule));
    }

    /// Every gathered frame decoded and checked, in rank order.
    fn decode_every(&self, gathered: &Gathered<'_>, slot: Slot) -> Result<Vec<Resp>> {
        decode_all(&self.shared.config.name, gathered, slot, self.check)
    }
}

impl Coordinator<Raw, Raw> {
    /// The rule [`Aggregated`] gathers pick the one answer with: given
    /// every worker's bytes, the rank whose answer stands for all. A
    /// closure `FnMut(&Gathered<'_>) -> Result<u32>` is one. A raw channel
    /// has none until one is set.
    pub fn set_aggregate(&mut self, rule: impl Pick + Send + 'static) {
        *self.rule_mut() = Some(Box::new(rule));
    }

    /// `gathered` narrowed to the answer the channel's rule picks.
    fn pick_by_rule<'c>(&'c self, gathered: Gathered<'c>) -> Result<Picked<'c>> {
        let mut rule = self.lock_rule();
        let rule = rule.as_mut().ok_or_else(|| self.no_rule())?;
        let rank = rule.pick(&gathered)?;
        gathered.into_picked(&self.shared.config.name, rank)
    }
}

impl<Req, Resp> GatherMode<Req, Resp> for All
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    type Output<'c> = Vec<Resp>;

    fn mode(&self) -> Mode {
        Mode::All
    }

    fn finish<'c>(self, c: &'c Coordinator<Req, Resp>, answers: Answers<'c>) -> Result<Vec<Resp>> {
        c.decode_every(&answers.every(), Slot::Response)
    }
}

impl<Req, Resp> GatherMode<Req, Resp> for Init
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    type Output<'c> = Vec<Resp>;

    fn mode(&self) -> Mode {
        Mode::Init
    }

    fn finish<'c>(self, c: &'c Coordinator<Req, Resp>, answers: Answers<'c>) -> Result<Vec<Resp>> {
        c.decode_every(&answers.every(), Slot::Init)
    }
}

impl<Req, Resp> GatherMode<Req, Resp> for First
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    type Output<'c> = (u32, Resp);

    fn mode(&self) -> Mode {
        Mode::First
    }

    fn finish<'c>(
        self,
        c: &'c Coordinator<Req, Resp>,
        answers: Answers<'c>,
    ) -> Result<(u32, Resp)> {
        let first = answers.first();
        let (channel, rank) = (&c.shared.config.name, first.rank());
        let response = decode(channel, rank, Slot::Response, first.bytes())?;
        drop(first);
        (c.check)(channel, rank, response).map(|r| (rank, r))
    }
}

impl<Req, Resp> GatherMode<Req, Resp> for Rank0AfterAll
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    type Output<'c> = Resp;

    fn mode(&self) -> Mode {
        Mode::Rank0AfterAll
    }

    fn finish<'c>(self, c: &'c Coordinator<Req, Resp>, answers: Answers<'c>) -> Result<Resp> {
        let mut all = c.decode_every(&answers.every(), Slot::Response)?;
        Ok(all.swap_remove(0))
    }
}

impl<Req, Resp> GatherMode<Req, Resp> for Aggregated
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    type Output<'c> = Resp;

    fn mode(&self) -> Mode {
        Mode::Aggregated
    }

    fn ready(&self, c: &Coordinator<Req, Resp>) -> Result<()> {
        c.has_rule()
    }

    fn finish<'c>(self, c: &'c Coordinator<Req, Resp>, answers: Answers<'c>) -> Result<Resp> {
        let all = c.decode_every(&answers.every(), Slot::Response)?;
        let mut rule = c.lock_rule();
        rule.as_mut().ok_or_else(|| c.no_rule())?.aggregate(all)
    }
}

impl<Req, Resp, A> GatherMode<Req, Resp> for AggregatedBy<'_, A>
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
    A: Aggregate<Resp> + ?Sized,
{
    type Output<'c> = Resp;

    fn mode(&self) -> Mode {
        Mode::Aggregated
    }

    fn finish<'c>(self, c: &'c Coordinator<Req, Resp>, answers: Answers<'c>) -> Result<Resp> {
        let all = c.decode_every(&answers.every(), Slot::Response)?;
        self.0.aggregate(all)
    }
}

impl GatherMode<Raw, Raw> for All {
    type Output<'c> = Gathered<'c>;

    fn mode(&self) -> Mode {
        Mode::All
    }

    fn finish<'c>(
        self,
        _: &'c Coordinator<Raw, Raw>,
        answers: Answers<'c>,
    ) -> Result<Gathered<'c>> {
        Ok(answers.every())
    }
}

impl GatherMode<Raw, Raw> for Init {
    type Output<'c> = Gathered<'c>;

    fn mode(&self) -> Mode {
        Mode::Init
    }

    fn finish<'c>(
        self,
        _: &'c Coordinator<Raw, Raw>,
        answers: Answers<'c>,
    ) -> Result<Gathered<'c>> {
        Ok(answers.every())
    }
}

impl GatherMode<Raw, Raw> for First {
    type Output<'c> = Picked<'c>;

    fn mode(&self) -> Mode {
        Mode::First
    }

    fn finish<'c>(self, _: &'c Coordinator<Raw, Raw>, answers: Answers<'c>) -> Result<Picked<'c>> {
        Ok(answers.first())
    }
}

impl GatherMode<Raw, Raw> for Rank0AfterAll {
    type Output<'c> = Picked<'c>;

    fn mode(&self) -> Mode {
        Mode::Rank0AfterAll
    }

    fn finish<'c>(self, c: &'c Coordinator<Raw, Raw>, answers: Answers<'c>) -> Result<Picked<'c>> {
        answers.every().into_picked(&c.shared.config.name, 0)
    }
}

impl GatherMode<Raw, Raw> for Aggregated {
    type Output<'c> = Picked<'c>;

    fn mode(&self) -> Mode {
        Mode::Aggregated
    }

    fn ready(&self, c: &Coordinator<Raw, Raw>) -> Result<()> {
        c.has_rule()
    }

    fn finish<'c>(self, c: &'c Coordinator<Raw, Raw>, answers: Answers<'c>) -> Result<Picked<'c>> {
        c.pick_by_rule(answers.every())
    }
}

impl<P: Pick + ?Sized> GatherMode<Raw, Raw> for AggregatedBy<'_, P> {
    type Output<'c> = Picked<'c>;

    fn mode(&self) -> Mode {
        Mode::Aggregated
    }

    fn finish<'c>(self, c: &'c Coordinator<Raw, Raw>, answers: Answers<'c>) -> Result<Picked<'c>> {
        let gathered = answers.every();
        let rank = self.0.pick(&gathered)?;
        gathered.into_picked(&c.shared.config.name, rank)
    }
}

/// A mode chosen at run time (by a binding, or recorded with a request):
/// every worker's bytes or one worker's, as the mode takes them.
impl GatherMode<Raw, Raw> for Mode {
    type Output<'c> = Answers<'c>;

    fn mode(&self) -> Mode {
        *self
    }

    fn ready(&self, c: &Coordinator<Raw, Raw>) -> Result<()> {
        match self {
            Mode::Aggregated => c.has_rule(),
            _ => Ok(()),
        }
    }

    fn finish<'c>(self, c: &'c Coordinator<Raw, Raw>, answers: Answers<'c>) -> Result<Answers<'c>> {
        Ok(match self {
            Mode::All | Mode::Init | Mode::First => answers,
            Mode::Rank0AfterAll => Answers::One(Rank0AfterAll.finish(c, answers)?),
            Mode::Aggregated => Answers::One(c.pick_by_rule(answers.every())?),
        })
    }
}
