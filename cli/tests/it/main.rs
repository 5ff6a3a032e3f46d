//! The command line's integration tests, one module per former test binary,
//! linked once. Tests that re-run this binary in a child name themselves by
//! `nodeipc_testkit::test_path`; the ranks `nodeipc launch` starts are
//! `launch_kit::rank_helper`.

mod bench;
mod bench_json;
mod clean_proof;
mod cli;
mod closed_stdout;
mod common;
mod crash_clean;
mod demo_hostile;
mod extremes;
mod formats;
mod full_tmpfs;
mod launch;
mod launch_checks;
mod launch_kit;
mod launch_measure;
mod launch_rdzv;
mod launch_torchrun;
mod ls_queues_pools;
mod monitor;
mod monitor_cmd;
