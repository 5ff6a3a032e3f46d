//! The response thread, which gathers every response and hands it to the
//! handler, and the coordinator's drop, which stops that thread before it
//! tells the workers the channel is closed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;

use nodeipc_proto::execute::ExecuteResponse;

use super::gather::Slot;
use super::liveness::Waiter;
use super::{Coordinator, ResponseHandler, ResponseThread, Shared};
use crate::aggregate::aggregate;
use crate::layout;
use crate::sem_kind::{Direction, Role};
use crate::wait;
use crate::{Error, Result};

impl Coordinator {
    /// Registers the handler the response thread calls with every aggregated
    /// response (or the error that ended a gather).
    ///
    /// # Errors
    /// [`Error::ResponseThread`] if one is registered already.
    pub fn on_response(
        &mut self,
        handler: impl FnMut(Result<ExecuteResponse>) + Send + 'static,
    ) -> Result<()> {
        if self.handler.is_some() || self.thread.is_some() {
            return Err(self.thread_error("a response handler is registered already"));
        }
        self.handler = Some(Box::new(handler));
        Ok(())
    }

    /// Starts a thread that gathers every response ([`recv_all_aggregated`](Coordinator::recv_all_aggregated)
    /// for each request sent) and calls the handler with it. The thread ends
    /// by itself after an error that breaks the channel (a dead worker, a
    /// timeout); after an error of one response it goes on.
    ///
    /// # Errors
    /// [`Error::ResponseThread`] without a handler or when already running;
    /// [`Error::Io`] if the thread cannot be spawned.
    pub fn start_response_thread(&mut self) -> Result<()> {
        if self.thread.is_some() {
            return Err(self.thread_error("the response thread is running already"));
        }
        let Some(handler) = self.handler.take() else {
            return Err(
                self.thread_error("no response handler is registered (call on_response first)")
            );
        };
        self.shared.stop.store(false, Ordering::SeqCst);
        let shared = Arc::clone(&self.shared);
        let handle = thread::Builder::new()
            .name(format!("nodeipc-responses {}", self.shared.config.name))
            .spawn(move || shared.response_loop(handler))
            .map_err(|source| Error::Io {
                context: format!("channel {}", self.shared.config.name),
                op: "spawn response thread",
                source,
            })?;
        self.thread = Some(ResponseThread { handle });
        Ok(())
    }

    /// Stops the response thread and waits for it (within one wait slice);
    /// the handler stays registered for a later start.
    ///
    /// # Errors
    /// [`Error::ResponseThread`] if it is not running.
    pub fn stop_response_thread(&mut self) -> Result<()> {
        let Some(thread) = self.thread.take() else {
            return Err(self.thread_error("the response thread is not running"));
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.idle.0.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.idle.1.notify_all();
        }
        match thread.handle.join() {
            Ok(handler) => {
                self.handler = Some(handler);
                Ok(())
            }
            Err(_) => Err(self.thread_error("the response handler panicked")),
        }
    }

    /// Whether the response thread is running (it ends by itself after an
    /// error that breaks the channel).
    pub fn response_thread_running(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|t| !t.handle.is_finished())
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop_response_thread();
        }
        // Wake every worker waiting for a request: they see the channel closed.
        layout::request_header(&self.shared.request)
            .closed
            .store(1, Ordering::SeqCst);
        for rank in 0..self.shared.config.workers {
            let _ = self
                .shared
                .sem(Direction::Request, Role::Consume, rank)
                .post();
        }
    }
}

impl Shared {
    fn response_loop(self: Arc<Self>, mut handler: ResponseHandler) -> ResponseHandler {
        while !self.stop.load(Ordering::SeqCst) {
            let next = self.lock_gatherer().next;
            if next >= self.sent.load(Ordering::SeqCst) {
                self.wait_idle(next);
                continue;
            }
            match self.gather(Waiter::ResponseThread, Slot::Response) {
                Ok(responses) => {
                    let all: Result<Vec<_>> = responses.into_iter().collect();
                    handler(all.and_then(aggregate));
                }
                // Asked to stop mid-gather: what was gathered stays for the
                // next gather, and the handler hears nothing.
                Err(_) if self.stop.load(Ordering::SeqCst) => break,
                Err(e) => {
                    handler(Err(e));
                    break;
                }
            }
        }
        handler
    }

    /// Sleeps until a request is sent after gather `next`, or a stop.
    fn wait_idle(&self, next: u64) {
        let guard = self.idle.0.lock().unwrap_or_else(|e| e.into_inner());
        self.thread_idle.store(true, Ordering::SeqCst);
        if self.sent.load(Ordering::SeqCst) <= next && !self.stop.load(Ordering::SeqCst) {
            let _ = self.idle.1.wait_timeout(guard, wait::SLICE);
        }
        self.thread_idle.store(false, Ordering::SeqCst);
    }
}
