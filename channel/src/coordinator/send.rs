//! Broadcasting a request: room in every worker's ring, the frame encoded
//! in place, every worker woken.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nodeipc_shm::Prefetch;

use super::liveness::Waiter;
use super::{Coordinator, Shared, Turn};
use crate::layout;
use crate::payload::Raw;
use crate::sem_kind::{Direction, Role};
use crate::wait::{Budget, Wait};
use crate::{Error, Result};

impl<Req, Resp> Coordinator<Req, Resp>
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    /// Broadcasts `request` to every worker; returns its index (0, 1, …).
    ///
    /// Waits for every worker's request-produce semaphore (room in the
    /// ring), encodes the request into the ring frame, posts every worker's
    /// request-consume semaphore. Allocates nothing.
    ///
    /// A frame is reused only once every worker has released it: a worker
    /// still holding it (reading it in place, say) makes this wait, then
    /// time out naming that worker.
    ///
    /// One thread may send while another gathers; a second thread sending
    /// at the same time is refused ([`Error::Busy`], nothing sent).
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is waited for or written;
    /// [`Error::WorkerDied`], [`Error::WorkerLeft`], [`Error::Timeout`];
    /// [`Error::Busy`] while another thread sends.
    pub fn send(&self, request: &Req) -> Result<u64> {
        let wait = Wait::Within(self.default_budget());
        Ok(self
            .send_message("send", request, wait)?
            .expect("a send that may wait sends or fails"))
    }

    /// [`send`](Coordinator::send) without waiting: `None` (nothing sent)
    /// while a worker has no free frame.
    ///
    /// # Errors
    /// As [`send`](Coordinator::send), never [`Error::Timeout`].
    pub fn try_send(&self, request: &Req) -> Result<Option<u64>> {
        self.send_message("try_send", request, Wait::Try)
    }

    /// [`send`](Coordinator::send) within `timeout` instead of the configured
    /// one. A timeout leaves the channel as it was: nothing is sent.
    ///
    /// # Errors
    /// As [`send`](Coordinator::send).
    pub fn send_timeout(&self, request: &Req, timeout: Duration) -> Result<u64> {
        let wait = Wait::Within(Budget::new(timeout));
        Ok(self
            .send_message("send_timeout", request, wait)?
            .expect("a send that may wait sends or fails"))
    }

    fn send_message(&self, op: &'static str, request: &Req, mut wait: Wait) -> Result<Option<u64>> {
        let _turn = self.shared.turn(Turn::Send, op)?;
        let channel = &self.shared.config.name;
        self.shared.send(request.encoded_len(), &mut wait, |out| {
            nodeipc_proto::encode_frame(request, out)
                .map(drop)
                .map_err(|source| Error::Proto {
                    context: format!("channel {channel}"),
                    source,
                })
        })
    }
}

impl Coordinator<Raw, Raw> {
    /// Broadcasts `frame` as it is: bytes of any encoding; returns its
    /// index (0, 1, …). As the typed [`send`](Coordinator::send) otherwise.
    ///
    /// # Errors
    /// As the typed [`send`](Coordinator::send).
    pub fn send(&self, frame: &[u8]) -> Result<u64> {
        let wait = Wait::Within(self.default_budget());
        Ok(self
            .send_frame("send", frame, wait)?
            .expect("a send that may wait sends or fails"))
    }

    /// [`send`](Coordinator::send) without waiting: `None` (nothing sent)
    /// while a worker has no free frame.
    ///
    /// # Errors
    /// As the typed [`send`](Coordinator::send), never [`Error::Timeout`].
    pub fn try_send(&self, frame: &[u8]) -> Result<Option<u64>> {
        self.send_frame("try_send", frame, Wait::Try)
    }

    /// [`send`](Coordinator::send) within `timeout`. A timeout leaves the
    /// channel as it was: nothing is sent.
    ///
    /// # Errors
    /// As the typed [`send`](Coordinator::send).
    pub fn send_timeout(&self, frame: &[u8], timeout: Duration) -> Result<u64> {
        let wait = Wait::Within(Budget::new(timeout));
        Ok(self
            .send_frame("send_timeout", frame, wait)?
            .expect("a send that may wait sends or fails"))
    }

    fn send_frame(&self, op: &'static str, frame: &[u8], mut wait: Wait) -> Result<Option<u64>> {
        let _turn = self.shared.turn(Turn::Send, op)?;
        self.shared.send(frame.len(), &mut wait, |out| {
            layout::write_bytes_frame(frame, out);
            Ok(())
        })
    }
}

impl Shared {
    /// Broadcasts a request of `body` bytes, whose whole frame (length
    /// prefix included) `fill` writes into the slice it is given; `None`
    /// (nothing sent) when a try found a worker without a free frame.
    fn send(
        &self,
        body: usize,
        wait: &mut Wait,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<Option<u64>> {
        let Some(frame) = self.reserve(body, wait)? else {
            return Ok(None);
        };
        // SAFETY: `reserve` took every worker's produce semaphore for this
        // frame, so by the channel's protocol no process reads or writes it
        // until `publish` posts the consume semaphores (workers map the
        // ring read-only).
        let out =
            unsafe { self.request.bytes_mut(frame.at, frame.size) }.map_err(|source| Error::Shm {
                channel: self.config.name.clone(),
                source,
            });
        if let Err(e) = out.and_then(fill) {
            // Nothing announced: the frames taken go back.
            self.give_back(self.config.workers);
            return Err(e);
        }
        self.publish(frame.index, frame.size).map(Some)
    }

    /// Checks a request of `body` bytes against the ring, then takes a free
    /// frame of every worker (as `wait` allows): the frame's place, or
    /// `None` (nothing taken) when a try found a worker without one. Until
    /// [`publish`](Shared::publish) or [`give_back`](Shared::give_back),
    /// only this thread may write the frame.
    pub(super) fn reserve(&self, body: usize, wait: &mut Wait) -> Result<Option<Frame>> {
        let capacity = self.layout.request_capacity;
        let size = body.saturating_add(nodeipc_proto::LEN_PREFIX);
        // A capacity never exceeds MAX_SLOT (1 GiB), so a body that fits it
        // fits the u32 prefix.
        if size > capacity {
            return Err(Error::TooLarge {
                channel: self.config.name.clone(),
                slot: "request frame",
                size,
                max: capacity,
            });
        };
        if matches!(wait, Wait::Within(_)) && super::thread::in_handler() {
            return Err(Error::ResponseThread {
                channel: self.config.name.clone(),
                reason: "inside a response handler a send may not wait: only try_send is allowed",
            });
        }
        let index = self.sent.load(Ordering::Relaxed);
        for rank in 0..self.config.workers {
            let freed = match wait {
                Wait::Within(budget) if self.stale.load(Ordering::Acquire) => {
                    self.wait_frame_draining(rank, budget).map(|()| true)
                }
                Wait::Within(budget) => self.wait_frame(rank, budget).map(|()| true),
                Wait::Try => self.try_free_frame(rank),
            };
            if !matches!(freed, Ok(true)) {
                // Nothing is written: give back the frames already taken from
                // the workers before this one, or they would stay taken and
                // every later send would wait on them in vain.
                self.give_back(rank);
                return freed.map(|_| None);
            }
        }
        self.prefetch_semaphores(Direction::Request, Role::Consume);
        Ok(Some(Frame {
            index,
            at: self.layout.frame(index),
            size,
        }))
    }

    /// Takes a free request frame of worker `rank`, waiting within `budget`;
    /// while sends gather ahead for the response thread, first by doing so.
    fn wait_frame(&self, rank: u32, budget: &mut Budget) -> Result<()> {
        if self.helping.load(Ordering::Relaxed) && self.take_frame_gathering_ahead(rank)? {
            return Ok(());
        }
        self.wait_worker_as(
            Waiter::Caller,
            Direction::Request,
            Role::Produce,
            rank,
            budget,
        )
    }

    /// Gives back the frames taken (by [`reserve`](Shared::reserve)) from
    /// workers `0..workers`, unannounced.
    pub(super) fn give_back(&self, workers: u32) {
        for rank in 0..workers {
            let _ = self.sem(Direction::Request, Role::Produce, rank).post();
        }
    }

    /// Announces request `index`, whose frame [`reserve`](Shared::reserve)
    /// took and the caller wrote (`size` bytes, prefix included), to every
    /// worker.
    pub(super) fn publish(&self, index: u64, size: usize) -> Result<u64> {
        let header = layout::request_header(&self.request);
        // The mode the response thread gathers it in, known before the
        // thread can see the request sent.
        if self.recording.load(Ordering::SeqCst) {
            self.modes.record(index, self.response_mode());
        }
        // Ours first, then the workers' copy in the header (which a hostile
        // worker may overwrite; nothing of ours is computed from it).
        self.sent.store(index.wrapping_add(1), Ordering::SeqCst);
        header.sent.store(index.wrapping_add(1), Ordering::SeqCst);
        for rank in 0..self.config.workers {
            self.sem(Direction::Request, Role::Consume, rank)
                .post()
                .map_err(|source| Error::Sem {
                    channel: self.config.name.clone(),
                    source,
                })?;
        }
        self.idle.changed();
        // The next frame's first lines, owned again before the next send
        // writes them (a worker read them last): its stall on them becomes
        // a fetch during whatever comes between.
        let next = self.layout.frame(index.wrapping_add(1));
        self.request
            .prefetch(next, size.min(layout::PREFETCH_NEXT), Prefetch::Write);
        Ok(index)
    }

    /// Takes a free request frame of worker `rank` if there is one, after
    /// dropping the answers it gave to requests a [`First`](crate::First)
    /// gather already handed out (it may be blocked on its full slot until
    /// then): whether one was taken. With none, a dead worker is news.
    fn try_free_frame(&self, rank: u32) -> Result<bool> {
        let produce = self.sem(Direction::Request, Role::Produce, rank);
        let sem = |source| Error::Sem {
            channel: self.config.name.clone(),
            source,
        };
        if produce.try_wait().map_err(sem)? {
            return Ok(true);
        }
        if self.stale.load(Ordering::Acquire) {
            self.drop_stale(rank)?;
        }
        if produce.try_wait().map_err(sem)? {
            return Ok(true);
        }
        self.check_worker(rank)?;
        Ok(false)
    }

    /// Waits for a free request frame of worker `rank` while consuming (and
    /// dropping) the answers it gave to requests a [`First`](crate::First)
    /// gather already handed out: the worker may be blocked on its full
    /// slot until then.
    fn wait_frame_draining(&self, rank: u32, budget: &mut Budget) -> Result<()> {
        let produce = self.sem(Direction::Request, Role::Produce, rank);
        let mut poll = budget.poll(Duration::from_micros(5), Duration::from_millis(1));
        loop {
            if produce.try_wait().map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })? {
                return Ok(());
            }
            if !self.drop_stale(rank)? {
                return self.wait_worker_as(
                    Waiter::Caller,
                    Direction::Request,
                    Role::Produce,
                    rank,
                    budget,
                );
            }
            self.check_worker(rank)?;
            poll.pause(&self.config.name, || {
                format!("waiting for worker {rank} to free a request frame")
            })?;
        }
    }

    /// Consumes (and drops) what worker `rank` has given of the answers a
    /// [`First`](crate::First) gather left behind: whether some worker is
    /// still behind after that.
    fn drop_stale(&self, rank: u32) -> Result<bool> {
        let mut gatherer = self.lock_gatherer();
        let (next, r) = (gatherer.next, rank as usize);
        while gatherer.consumed[r] < next && self.try_discard(rank)? {
            gatherer.consumed[r] += 1;
        }
        let behind = gatherer.consumed.iter().any(|&c| c < next);
        self.stale.store(behind, Ordering::Release);
        Ok(behind)
    }
}

/// A request frame taken from every worker ([`Shared::reserve`]).
pub(super) struct Frame {
    pub(super) index: u64,
    /// Where the frame starts in the request region, and its size (length
    /// prefix included).
    pub(super) at: usize,
    pub(super) size: usize,
}
