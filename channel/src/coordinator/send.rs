//! Broadcasting a request: room in every worker's ring, the frame encoded
//! in place, every worker woken.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nodeipc_proto::execute::ExecuteRequest;
use prost::Message;

use super::gather::Slot;
use super::{Coordinator, Shared};
use crate::layout;
use crate::sem_kind::{Direction, Role};
use crate::wait::Poll;
use crate::{Error, Result};

impl Coordinator {
    /// Broadcasts `request` to every worker; returns its index (0, 1, …).
    ///
    /// Waits for every worker's request-produce semaphore (room in the
    /// ring), encodes the request into the ring frame, posts every worker's
    /// request-consume semaphore. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is waited for or written;
    /// [`Error::WorkerDied`], [`Error::WorkerLeft`], [`Error::Timeout`].
    pub fn send(&mut self, request: &ExecuteRequest) -> Result<u64> {
        let shared = &*self.shared;
        let capacity = shared.layout.request_capacity;
        let size = request.encoded_len() + nodeipc_proto::LEN_PREFIX;
        if size > capacity {
            return Err(Error::TooLarge {
                channel: shared.config.name.clone(),
                slot: "request frame",
                size,
                max: capacity,
            });
        }
        let header = layout::request_header(&shared.request);
        let index = shared.sent.load(Ordering::Relaxed);
        for rank in 0..shared.config.workers {
            let freed = if shared.stale.load(Ordering::Acquire) {
                shared.wait_frame_draining(rank)
            } else {
                shared.wait_worker(Direction::Request, Role::Produce, rank)
            };
            if let Err(e) = freed {
                // Nothing is written: give back the frames already taken from
                // the workers before this one, or they would stay taken and
                // every later send would wait on them in vain.
                for earlier in 0..rank {
                    let _ = shared
                        .sem(Direction::Request, Role::Produce, earlier)
                        .post();
                }
                return Err(e);
            }
        }
        let frame = shared.layout.frame(index);
        // SAFETY: every worker's produce semaphore was taken for this frame,
        // so by the channel's protocol no process reads or writes it until
        // the consume semaphores below are posted.
        let out =
            unsafe { shared.request.bytes_mut(frame, capacity) }.map_err(|source| Error::Shm {
                channel: shared.config.name.clone(),
                source,
            })?;
        nodeipc_proto::encode_frame(request, out).map_err(|source| Error::Proto {
            context: format!("channel {}", shared.config.name),
            source,
        })?;
        // Ours first, then the workers' copy in the header (which a hostile
        // worker may overwrite; nothing of ours is computed from it).
        shared.sent.store(index.wrapping_add(1), Ordering::SeqCst);
        header.sent.store(index.wrapping_add(1), Ordering::SeqCst);
        for rank in 0..shared.config.workers {
            shared
                .sem(Direction::Request, Role::Consume, rank)
                .post()
                .map_err(|source| Error::Sem {
                    channel: shared.config.name.clone(),
                    source,
                })?;
        }
        if shared.thread_idle.load(Ordering::SeqCst) {
            let _guard = shared.idle.0.lock().unwrap_or_else(|e| e.into_inner());
            shared.idle.1.notify_all();
        }
        Ok(index)
    }
}

impl Shared {
    /// Waits for a free request frame of worker `rank` while consuming (and
    /// dropping) the answers it gave to requests already gathered by
    /// `recv_first`: the worker may be blocked on its full slot until then.
    fn wait_frame_draining(&self, rank: u32) -> Result<()> {
        let produce = self.sem(Direction::Request, Role::Produce, rank);
        let mut poll = Poll::new(
            Duration::from_micros(5),
            Duration::from_millis(1),
            self.config.timeout,
        );
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
                    match self.try_consume(rank, Slot::Response)? {
                        Some(_) => gatherer.consumed[r] += 1,
                        None => break,
                    }
                }
                let behind = gatherer.consumed.iter().any(|&c| c < next);
                self.stale.store(behind, Ordering::Release);
                if !behind {
                    drop(gatherer);
                    return self.wait_worker(Direction::Request, Role::Produce, rank);
                }
            }
            self.check_worker(rank)?;
            poll.pause(&self.config.name, || {
                format!("waiting for worker {rank} to free a request frame")
            })?;
        }
    }
}
