//! Which benchmark a peer process plays: the one module that knows them all,
//! so the benchmark modules depend on `peer` and nothing depends on this.

use std::io;

use crate::bench::peer::PEER_ENV;

/// If this process was spawned as a benchmark peer ([`PEER_ENV`] set),
/// plays the role and exits; otherwise returns at once.
pub fn run_if_peer() {
    let Ok(spec) = std::env::var(PEER_ENV) else {
        return;
    };
    let args: Vec<&str> = spec.split(' ').collect();
    let result = match args.as_slice() {
        ["ring", rest @ ..] => crate::bench::ring::peer_main(rest),
        ["barrier", rest @ ..] => crate::bench::barrier::peer_main(rest),
        ["kittens", rest @ ..] => crate::bench::kittens::peer_main(rest),
        ["chan-worker", rest @ ..] => crate::bench::channel::peer_main(rest),
        ["queue", rest @ ..] => crate::bench::queue::peer_main(rest),
        [role @ ("scm-sink" | "fd-holder"), rest @ ..] => {
            crate::bench::fdpass::peer_main(role, rest)
        }
        _ => Err(io::Error::other(format!(
            "unknown benchmark peer role {spec:?}"
        ))),
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("benchmark peer ({spec}): {e}");
            std::process::exit(1);
        }
    }
}
