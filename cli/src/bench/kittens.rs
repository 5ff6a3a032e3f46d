//! `kittens::KittensBroker::sync()` of ours (capi/include, over the C ABI)
//! against the seed's algorithm (a sense-reversing barrier polling with
//! `usleep(1)`), one rank per process. The C++ of both is built by
//! `build.rs`; without a C++ compiler the row says so.
//!
//! The C ABI is `nodeipc-capi` linked as a Rust library (its rlib): the
//! C++ broker calls exactly the code of `libnodeipc.a`, and this crate
//! needs no static library built first.

use std::io;
use std::time::Duration;

// The C ABI, for the C++ broker to call: only C++ uses its items, so Rust
// must be told to link it.
#[cfg(not(nodeipc_no_cxx))]
use capi as _;

/// Which broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broker {
    /// `kittens::KittensBroker` of `capi/include/nodeipc/kittens_broker.hpp`.
    Ours,
    /// The seed's sense-reversing barrier polling with `usleep(1)`.
    Seed,
}

impl Broker {
    /// Short name for tables and peer roles.
    pub fn name(self) -> &'static str {
        match self {
            Broker::Ours => "nodeipc KittensBroker::sync",
            Broker::Seed => "seed broker (usleep(1) polling)",
        }
    }

    #[cfg_attr(nodeipc_no_cxx, allow(dead_code))]
    fn role(self) -> &'static str {
        match self {
            Broker::Ours => "ours",
            Broker::Seed => "seed",
        }
    }
}

/// Why the row cannot run here, if it cannot: no C++ compiler at build time.
pub fn unavailable() -> Option<&'static str> {
    #[cfg(nodeipc_no_cxx)]
    return Some(env!("NODEIPC_NO_CXX_REASON"));
    #[cfg(not(nodeipc_no_cxx))]
    None
}

/// The rank side, over the C++ entry points of `cpp/kittens_bench.cpp`.
#[cfg(not(nodeipc_no_cxx))]
mod with_cxx {
    use std::io;
    use std::time::Duration;

    use super::Broker;
    use crate::bench::peer::Peers;

    mod ffi {
        use std::ffi::{c_char, c_int, c_void};

        unsafe extern "C" {
            pub(super) fn nodeipc_bench_kittens_join(
                group: *const c_char,
                rank: c_int,
                world: c_int,
            ) -> *mut c_void;
            pub(super) fn nodeipc_bench_kittens_syncs(
                broker: *mut c_void,
                n: u64,
                ns: *mut u64,
            ) -> c_int;
            pub(super) fn nodeipc_bench_kittens_free(broker: *mut c_void);
            pub(super) fn nodeipc_bench_seed_join(
                name: *const c_char,
                rank: c_int,
                world: c_int,
            ) -> *mut c_void;
            pub(super) fn nodeipc_bench_seed_syncs(
                seed: *mut c_void,
                n: u64,
                ns: *mut u64,
            ) -> c_int;
            pub(super) fn nodeipc_bench_seed_free(seed: *mut c_void);
        }
    }

    /// One rank's broker, of either kind, freed on drop.
    struct Rank {
        broker: Broker,
        ptr: *mut std::ffi::c_void,
    }

    impl Rank {
        fn join(broker: Broker, name: &str, rank: u32, world: u32) -> io::Result<Rank> {
            let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
            let (rank_, world_) = (rank as i32, world as i32);
            // SAFETY: the C++ side copies the name during the call; the pointer
            // it returns is a broker of its own, or null.
            let ptr = unsafe {
                match broker {
                    Broker::Ours => ffi::nodeipc_bench_kittens_join(name.as_ptr(), rank_, world_),
                    Broker::Seed => ffi::nodeipc_bench_seed_join(name.as_ptr(), rank_, world_),
                }
            };
            if ptr.is_null() {
                return Err(io::Error::other(format!(
                    "{} rank {rank}: join failed (see stderr)",
                    broker.name()
                )));
            }
            Ok(Rank { broker, ptr })
        }

        fn syncs(&self, n: u64) -> io::Result<Duration> {
            let mut ns = 0u64;
            // SAFETY: `ptr` is this rank's live broker of this kind; `ns` is ours.
            let rc = unsafe {
                match self.broker {
                    Broker::Ours => ffi::nodeipc_bench_kittens_syncs(self.ptr, n, &mut ns),
                    Broker::Seed => ffi::nodeipc_bench_seed_syncs(self.ptr, n, &mut ns),
                }
            };
            if rc != 0 {
                return Err(io::Error::other(format!(
                    "{}: sync failed (see stderr)",
                    self.broker.name()
                )));
            }
            Ok(Duration::from_nanos(ns))
        }
    }

    impl Drop for Rank {
        fn drop(&mut self) {
            // SAFETY: `ptr` came from the matching join and is freed once, here.
            unsafe {
                match self.broker {
                    Broker::Ours => ffi::nodeipc_bench_kittens_free(self.ptr),
                    Broker::Seed => ffi::nodeipc_bench_seed_free(self.ptr),
                }
            }
        }
    }

    const WARM_UP: u64 = 100;

    pub(super) fn run_rank0(broker: Broker, world: u32, iters: u64) -> io::Result<Duration> {
        let name = format!(
            "/nodeipc-bench-kittens-{}-{:x}",
            std::process::id(),
            crate::bench::nonce()
        );
        let pin = world == 2 && crate::bench::machine::cores() >= 2;
        let mut peers = Peers::default();
        for rank in 1..world {
            let role = format!("kittens {} {name} {rank} {world} {iters}", broker.role());
            peers.spawn(&role, &[], pin.then_some(1))?;
        }
        let _pinned = if pin {
            Some(crate::bench::machine::Pinned::to(0)?)
        } else {
            None
        };
        let me = Rank::join(broker, &name, 0, world)?;
        me.syncs(WARM_UP)?;
        let elapsed = me.syncs(iters)?;
        // Peers may still be leaving the last sync: keep our broker until they exit.
        let result = peers.finish(Duration::from_secs(30));
        drop(me);
        result.map(|()| elapsed)
    }

    pub(super) fn peer_ranks(
        broker: Broker,
        name: &str,
        rank: u32,
        world: u32,
        iters: u64,
    ) -> io::Result<()> {
        let me = Rank::join(broker, name, rank, world)?;
        me.syncs(WARM_UP)?;
        me.syncs(iters)?;
        Ok(())
    }
}

/// `world` processes (this one is rank 0) each join a fresh broker of this
/// kind, pass `WARM_UP` syncs, then `iters` timed ones; rank 0's time.
///
/// # Errors
/// No C++ compiler at build time; a peer that failed; a broker error.
pub fn syncs(broker: Broker, world: u32, iters: u64) -> io::Result<Duration> {
    if let Some(why) = unavailable() {
        return Err(io::Error::other(format!(
            "KittensBroker row unavailable: {why}"
        )));
    }
    #[cfg(not(nodeipc_no_cxx))]
    return with_cxx::run_rank0(broker, world, iters);
    #[cfg(nodeipc_no_cxx)]
    unreachable!("{broker:?} {world} {iters}: checked above")
}

/// A peer rank: `ours|seed NAME RANK WORLD ITERS`.
///
/// # Errors
/// Bad arguments or a broker error.
pub(crate) fn peer_main(args: &[&str]) -> io::Result<()> {
    let [kind, name, rank, world, iters] = args else {
        return Err(io::Error::other(format!(
            "kittens peer: bad arguments {args:?}"
        )));
    };
    let broker = match *kind {
        "ours" => Broker::Ours,
        "seed" => Broker::Seed,
        other => return Err(io::Error::other(format!("unknown broker {other:?}"))),
    };
    let number = |s: &str| {
        s.parse::<u64>()
            .map_err(|e| io::Error::other(format!("{s:?}: {e}")))
    };
    let (rank, world, iters) = (number(rank)? as u32, number(world)? as u32, number(iters)?);
    #[cfg(not(nodeipc_no_cxx))]
    return with_cxx::peer_ranks(broker, name, rank, world, iters);
    #[cfg(nodeipc_no_cxx)]
    Err(io::Error::other(format!(
        "{broker:?} rank {rank}/{world} of {name} ({iters} syncs): built without a C++ compiler"
    )))
}
