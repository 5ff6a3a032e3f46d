//! Broadcasting a request: room in every worker's ring, the frame encoded
//! in place, every worker woken.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::liveness::Waiter;
use super::{Coordinator, Shared, Turn};
use crate::layout;
use crate::sem_kind::{Direction, Role};
use crate::wait::Budget;
use crate::{Error, Result};

impl<Req: prost::Message + Default, Resp: prost::Message + Default + 'static>
    Coordinator<Req, Resp>
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
        let mut budget = self.default_budget();
        self.send_within(request, &mut budget)
    }

    /// [`send`](Coordinator::send) within `timeout` instead of the configured
    /// one. A timeout leaves the channel as it was: nothing is sent.
    ///
    /// # Errors
    /// As [`send`](Coordinator::send).
    pub fn send_timeout(&self, request: &Req, timeout: Duration) -> Result<u64> {
        self.send_within(request, &mut Budget::new(timeout))
    }

    /// Broadcasts `frame` as it is: bytes of any encoding, which workers
    /// take with [`recv_in_place`](crate::Worker::recv_in_place) or
    /// [`recv_bytes`](crate::Worker::recv_bytes).
    ///
    /// # Errors
    /// As [`send`](Coordinator::send).
    pub fn send_bytes(&self, frame: &[u8]) -> Result<u64> {
        let _turn = self.shared.turn(Turn::Send, "send_bytes")?;
        let mut budget = self.default_budget();
        self.shared
            .send(frame.len(), &mut budget, |out| bytes_frame(frame, out))
    }

    /// [`send_bytes`](Coordinator::send_bytes) within `timeout`.
    ///
    /// # Errors
    /// As [`send`](Coordinator::send).
    pub fn send_bytes_timeout(&self, frame: &[u8], timeout: Duration) -> Result<u64> {
        let _turn = self.shared.turn(Turn::Send, "send_bytes")?;
        self.shared
            .send(frame.len(), &mut Budget::new(timeout), |out| {
                bytes_frame(frame, out)
            })
    }

    fn send_within(&self, request: &Req, budget: &mut Budget) -> Result<u64> {
        let _turn = self.shared.turn(Turn::Send, "send")?;
        let channel = &self.shared.config.name;
        self.shared.send(request.encoded_len(), budget, |out| {
            nodeipc_proto::encode_frame(request, out)
                .map(drop)
                .map_err(|source| Error::Proto {
                    context: format!("channel {channel}"),
                    source,
                })
        })
    }
}

/// [`layout::write_bytes_frame`] as `Shared::send`'s filler.
fn bytes_frame(body: &[u8], out: &mut [u8]) -> Result<()> {
    layout::write_bytes_frame(body, out);
    Ok(())
}

impl Shared {
    /// Broadcasts a request of `body` bytes, whose whole frame (length
    /// prefix included) `fill` writes into the slice it is given.
    fn send(
        &self,
        body: usize,
        budget: &mut Budget,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<u64> {
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
        let header = layout::request_header(&self.request);
        let index = self.sent.load(Ordering::Relaxed);
        for rank in 0..self.config.workers {
            let freed = if self.stale.load(Ordering::Acquire) {
                self.wait_frame_draining(rank, budget)
            } else {
                self.wait_worker_as(
                    Waiter::Caller,
                    Direction::Request,
                    Role::Produce,
                    rank,
                    budget,
                )
            };
            if let Err(e) = freed {
                // Nothing is written: give back the frames already taken from
                // the workers before this one, or they would stay taken and
                // every later send would wait on them in vain.
                for earlier in 0..rank {
                    let _ = self.sem(Direction::Request, Role::Produce, earlier).post();
                }
                return Err(e);
            }
        }
        let frame = self.layout.frame(index);
        // SAFETY: every worker's produce semaphore was taken for this frame,
        // so by the channel's protocol no process reads or writes it until
        // the consume semaphores below are posted (workers map the ring
        // read-only).
        let out = unsafe { self.request.bytes_mut(frame, size) }.map_err(|source| Error::Shm {
            channel: self.config.name.clone(),
            source,
        })?;
        if let Err(e) = fill(out) {
            // Nothing announced: the frames taken go back, as above.
            for rank in 0..self.config.workers {
                let _ = self.sem(Direction::Request, Role::Produce, rank).post();
            }
            return Err(e);
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
        if self.thread_idle.load(Ordering::SeqCst) {
            let _guard = self.idle.0.lock().unwrap_or_else(|e| e.into_inner());
            self.idle.1.notify_all();
        }
        Ok(index)
    }

    /// Waits for a free request frame of worker `rank` while consuming (and
    /// dropping) the answers it gave to requests already gathered by
    /// `recv_first`: the worker may be blocked on its full slot until then.
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
            {
                let mut gatherer = self.lock_gatherer();
                let (next, r) = (gatherer.next, rank as usize);
                while gatherer.consumed[r] < next {
                    if !self.try_discard(rank)? {
                        break;
                    }
                    gatherer.consumed[r] += 1;
                }
                let behind = gatherer.consumed.iter().any(|&c| c < next);
                self.stale.store(behind, Ordering::Release);
                if !behind {
                    drop(gatherer);
                    return self.wait_worker_as(
                        Waiter::Caller,
                        Direction::Request,
                        Role::Produce,
                        rank,
                        budget,
                    );
                }
            }
            self.check_worker(rank)?;
            poll.pause(&self.config.name, || {
                format!("waiting for worker {rank} to free a request frame")
            })?;
        }
    }
}
