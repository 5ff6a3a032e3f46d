//! Which implementation carries a channel row's requests, and the names
//! the peers' command lines give them.

use std::io;
use std::time::Duration;

/// Which implementation carries the requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelImpl {
    /// nodeipc-channel with futex semaphores in the region (ours).
    Nodeipc,
    /// nodeipc-channel with glibc named semaphores.
    NodeipcNamed,
    /// Encode, copy into shared memory, glibc named semaphores in lock-step.
    GlibcLockstep,
    /// Frames over a Unix stream socket per worker.
    UnixSocket,
    /// nodeipc-channel moving raw bytes (a `Coordinator<Raw, Raw>`): `send`
    /// of bytes, `recv_in_place`, `respond` of a digest, `recv(All)`.
    NodeipcInPlace,
    /// `NodeipcInPlace` with both sides busy-polling before they sleep
    /// (`ChannelConfig::poll`, 50 ms), as iceoryx2's polling does.
    NodeipcInPlacePoll,
    /// `NodeipcInPlace` laid out as MindIE's coordinator: this thread sends
    /// (waiting only on a full ring), the response thread gathers every
    /// answer (`on_response`, `Mode::All`) and checks it.
    NodeipcResponseThread,
    /// `NodeipcResponseThread` from C++ (`cpp/channel_thread_bench.cpp`:
    /// `nodeipc::Coordinator::on_response` over the C ABI).
    CppResponseThread,
    /// `NodeipcInPlace` from C++: `nodeipc::Coordinator::send`, then
    /// `recv_in_place(Gather::all)`, over the C ABI.
    CppLockstep,
}

/// How long the polling variant polls before it sleeps.
const POLL: Duration = Duration::from_millis(50);

impl ChannelImpl {
    pub(super) fn in_place(self) -> bool {
        matches!(
            self,
            ChannelImpl::NodeipcInPlace
                | ChannelImpl::NodeipcInPlacePoll
                | ChannelImpl::NodeipcResponseThread
                | ChannelImpl::CppResponseThread
                | ChannelImpl::CppLockstep
        )
    }

    pub(crate) fn poll(self) -> Duration {
        if self == ChannelImpl::NodeipcInPlacePoll {
            POLL
        } else {
            Duration::ZERO
        }
    }
}

impl ChannelImpl {
    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            ChannelImpl::Nodeipc => "nodeipc",
            ChannelImpl::NodeipcNamed => "nodeipc-named-sems",
            ChannelImpl::GlibcLockstep => "glibc-sem-lockstep",
            ChannelImpl::UnixSocket => "unix-socket",
            ChannelImpl::NodeipcInPlace => "nodeipc-in-place",
            ChannelImpl::NodeipcInPlacePoll => "nodeipc-in-place-poll",
            ChannelImpl::NodeipcResponseThread => "nodeipc-response-thread",
            ChannelImpl::CppResponseThread => "cpp-response-thread",
            ChannelImpl::CppLockstep => "cpp-lockstep",
        }
    }

    pub(super) fn parse(s: &str) -> io::Result<ChannelImpl> {
        [
            ChannelImpl::Nodeipc,
            ChannelImpl::NodeipcNamed,
            ChannelImpl::GlibcLockstep,
            ChannelImpl::UnixSocket,
            ChannelImpl::NodeipcInPlace,
            ChannelImpl::NodeipcInPlacePoll,
            ChannelImpl::NodeipcResponseThread,
            ChannelImpl::CppResponseThread,
            ChannelImpl::CppLockstep,
        ]
        .into_iter()
        .find(|i| i.name() == s)
        .ok_or_else(|| io::Error::other(format!("unknown channel implementation {s:?}")))
    }
}
