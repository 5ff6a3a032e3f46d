//! `nodeipc launch`: a thin front over `nodeipc-launch`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nodeipc_launch::{HealthOptions, LaunchOptions, RdzvOptions, Rendezvous};
use nodeipc_monitor::MonitorConfig;

use crate::limits::u32_in;
use crate::{CmdResult, Failure};

/// `nodeipc launch --nproc N [options] -- COMMAND ARGS...`
#[derive(Args)]
pub(crate) struct LaunchArgs {
    /// Local ranks to start (1 to 1024).
    #[arg(
        long,
        value_name = "N",
        visible_alias = "nproc-per-node",
        alias = "nproc_per_node",
        env = "PET_NPROC_PER_NODE",
        value_parser = u32_in(1, nodeipc_launch::MAX_NPROC)
    )]
    nproc: u32,
    /// Restart rounds allowed after the first (for the whole job: rounds
    /// caused only by a change of nodes are not counted).
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        alias = "max_restarts",
        env = "PET_MAX_RESTARTS",
        value_parser = u32_in(0, nodeipc_launch::MAX_RESTARTS)
    )]
    max_restarts: u32,
    /// Nodes in the job: N, or a range N:M (a round runs on N to M nodes,
    /// numbered anew each round; launchers beyond M wait as spares).
    #[arg(long, value_name = "N", default_value = "1", env = "PET_NNODES")]
    nnodes: String,
    /// Where nodes meet: etcd (etcd v3).
    #[arg(
        long,
        value_name = "NAME",
        alias = "rdzv_backend",
        env = "PET_RDZV_BACKEND"
    )]
    rdzv_backend: Option<String>,
    /// The etcd endpoints: HOST:PORT[,HOST:PORT...], each with http:// or
    /// https:// (TLS: see --rdzv-conf) before it if wanted.
    #[arg(
        long,
        value_name = "HOST:PORT",
        alias = "rdzv_endpoint",
        env = "PET_RDZV_ENDPOINT"
    )]
    rdzv_endpoint: Option<String>,
    /// The job's name, the same on every node: [A-Za-z0-9._-]{1,64}.
    #[arg(long, value_name = "JOB", alias = "rdzv_id", env = "PET_RDZV_ID")]
    rdzv_id: Option<String>,
    /// This node's rank, 0 to N-1: on every launcher or on none (then
    /// ranks go in order of arrival).
    #[arg(
        long,
        value_name = "R",
        alias = "node_rank",
        env = "PET_NODE_RANK",
        value_parser = u32_in(0, nodeipc_launch::MAX_NNODES - 1)
    )]
    node_rank: Option<u32>,
    /// Seconds each launcher's etcd lease lives without a keepalive (whole,
    /// at least 2): a launcher that has had none acknowledged for half of
    /// it stops its ranks.
    #[arg(long, value_name = "SECS", default_value = "5", alias = "rdzv_ttl", value_parser = ttl_seconds)]
    rdzv_ttl: Duration,
    /// Seconds to wait for etcd and for the other nodes; a finished job's
    /// state stays in etcd this long.
    #[arg(long, value_name = "SECS", default_value = "600", alias = "rdzv_timeout", value_parser = long_seconds)]
    rdzv_timeout: Duration,
    /// The address node 0 publishes as MASTER_ADDR (default: its host name).
    #[arg(
        long,
        value_name = "ADDR",
        alias = "local_addr",
        env = "PET_LOCAL_ADDR"
    )]
    local_addr: Option<String>,
    /// This node alone (the default without --rdzv-backend).
    #[arg(long, env = "PET_STANDALONE")]
    standalone: bool,
    /// torchrun's rendezvous settings, KEY=VALUE[,KEY=VALUE...]: with a
    /// range of nodes, last_call_timeout=SECS (default 30) is how long a
    /// round waits for more nodes once it has N; for TLS to etcd
    /// protocol=https, cacert=FILE (required), cert=FILE and key=FILE
    /// (PEM); other keys are ignored with a warning.
    #[arg(
        long,
        value_name = "KEY=VALUE,...",
        alias = "rdzv_conf",
        env = "PET_RDZV_CONF"
    )]
    rdzv_conf: Option<String>,
    /// The monitors' configuration: our JSON (see the nodeipc-monitor README),
    /// its `health_checks` section included; the health flags below add to
    /// it or override it.
    #[arg(long, value_name = "FILE", conflicts_with = "nvrx_config")]
    monitor_config: Option<PathBuf>,
    /// The monitors' configuration from a nvidia-resiliency-ext file (YAML
    /// or JSON, its `fault_tolerance:` block); unknown keys are warned about.
    #[arg(long, value_name = "FILE")]
    nvrx_config: Option<PathBuf>,
    /// Where the private run directory is made (default: $XDG_RUNTIME_DIR,
    /// else the temporary directory): a directory of ours, not a symlink,
    /// that group and others cannot write.
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
    /// Seconds between SIGTERM and SIGKILL when ranks are stopped.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    stop_timeout: Duration,
    /// Seconds a restarted rank that had registered with its monitor may
    /// take to register again before the round fails (default: no limit).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    rank_restart_timeout: Option<Duration>,
    /// A NIC that must stay up (repeat for more): `class/net/NAME` or
    /// `class/infiniband/NAME` under --sysfs-root; checked while ranks are
    /// registered with their monitors, a failure restarts the round. Added
    /// to the configuration's `health_checks.nic.devices`.
    #[arg(long = "nic", value_name = "NAME")]
    nics: Vec<String>,
    /// Where sysfs is mounted (for the NIC check); other than /sys, it
    /// replaces the configuration's.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Check each rank's GPU through NVML (device by LOCAL_RANK through
    /// CUDA_VISIBLE_DEVICES); reported unavailable without NVML.
    #[arg(long)]
    gpu_health: bool,
    /// Seconds between two runs of each health check; other than 5, it
    /// replaces the configuration's intervals.
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = seconds)]
    health_interval: Duration,
    /// Append one JSON object per event to FILE.
    #[arg(long, value_name = "FILE")]
    json_events: Option<PathBuf>,
    /// The program to run and its arguments (after `--`).
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub(crate) fn run(args: LaunchArgs) -> CmdResult {
    let monitor = match (&args.monitor_config, &args.nvrx_config) {
        (Some(file), _) => MonitorConfig::load(file)?,
        (None, Some(file)) => {
            let nvrx = MonitorConfig::load_nvrx(file)?;
            for warning in &nvrx.warnings {
                eprintln_safe(&format!("nodeipc launch: {}: {warning}", file.display()));
            }
            nvrx.monitor
        }
        (None, None) => MonitorConfig::default(),
    };
    let rdzv = RdzvOptions {
        nnodes: args.nnodes,
        backend: args.rdzv_backend,
        endpoint: args.rdzv_endpoint,
        id: args.rdzv_id,
        node_rank: args.node_rank,
        ttl: args.rdzv_ttl,
        timeout: args.rdzv_timeout,
        local_addr: args.local_addr,
        standalone: args.standalone,
        conf: args.rdzv_conf,
    }
    .resolve()
    .map_err(|e| Failure::Usage(e.to_string()))?;
    if let Rendezvous::Etcd(etcd) = &rdzv {
        for key in &etcd.ignored_conf {
            eprintln_safe(&format!(
                "nodeipc launch: warning: --rdzv-conf {key}: not a setting of this launcher, ignored"
            ));
        }
    }
    let options = LaunchOptions {
        max_restarts: args.max_restarts,
        monitor,
        run_dir: args.run_dir,
        stop_timeout: args.stop_timeout,
        rank_restart_timeout: args.rank_restart_timeout,
        json_events: args.json_events,
        handle_signals: true,
        own_all_children: true,
        health: HealthOptions {
            nics: args.nics,
            sysfs_root: args.sysfs_root,
            gpu: args.gpu_health,
            interval: args.health_interval,
        },
        ..LaunchOptions::new(args.nproc, args.command)
    };
    options.validate()?;
    let outcome = match rdzv {
        Rendezvous::Local => nodeipc_launch::launch(&options)?,
        Rendezvous::Etcd(etcd) => across_nodes(&options, etcd)?,
    };
    match outcome.exit_code {
        0 => Ok(()),
        // The last event line (`exit N: …`) has said why.
        code => Err(Failure::Status(
            u8::try_from(code.clamp(1, 255)).unwrap_or(1),
            String::new(),
        )),
    }
}

#[cfg(feature = "etcd")]
fn across_nodes(
    options: &LaunchOptions,
    etcd: nodeipc_launch::EtcdRendezvous,
) -> Result<nodeipc_launch::Outcome, Failure> {
    let mut backend = nodeipc_launch::EtcdBackend::new(
        etcd,
        options.nproc,
        options.max_restarts,
        options.stop_timeout,
    );
    let outcome = nodeipc_launch::launch_with(options, &mut backend, &|_| Vec::new());
    let (requests, rounds) = backend.stats();
    let node = backend
        .node_rank()
        .map_or("without a node rank".to_owned(), |n| format!("node {n}"));
    drop(backend);
    eprintln_safe(&format!(
        "nodeipc launch: {node}: {requests} etcd requests over {rounds} rounds"
    ));
    Ok(outcome?)
}

#[cfg(not(feature = "etcd"))]
fn across_nodes(
    _options: &LaunchOptions,
    _etcd: nodeipc_launch::EtcdRendezvous,
) -> Result<nodeipc_launch::Outcome, Failure> {
    Err(nodeipc_launch::Error::Options {
        reason: "--rdzv-backend etcd: this nodeipc was built without the `etcd` feature".into(),
    }
    .into())
}

/// A line on stderr, escaped (it may name a file or a key someone else
/// chose), never a panic on a closed stderr.
fn eprintln_safe(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{}", nodeipc_text::Printable(line));
}

/// Seconds, whole or fractional, from 1 to a week: --rdzv-timeout's own
/// bounds (`nodeipc_launch::MAX_RDZV_TIMEOUT`).
fn long_seconds(text: &str) -> Result<Duration, String> {
    seconds_in(text, 1.0, nodeipc_launch::MAX_RDZV_TIMEOUT)
}

/// Seconds, whole or fractional, from 1 ms to an hour: what the launcher
/// takes for --stop-timeout, --rank-restart-timeout and --health-interval
/// (`nodeipc_launch::MAX_STOP_TIMEOUT`).
fn seconds(text: &str) -> Result<Duration, String> {
    seconds_in(text, 0.001, nodeipc_launch::MAX_STOP_TIMEOUT)
}

/// Whole seconds from 2 to an hour: an etcd lease's TTL
/// (`nodeipc_launch::MAX_RDZV_TTL`).
fn ttl_seconds(text: &str) -> Result<Duration, String> {
    let max = nodeipc_launch::MAX_RDZV_TTL.as_secs();
    match text.parse::<u64>() {
        Ok(secs) if (2..=max).contains(&secs) => Ok(Duration::from_secs(secs)),
        _ => Err(format!("must be whole seconds from 2 to {max}")),
    }
}

/// A number of seconds in `min..=max`, the range named when it is not.
fn seconds_in(text: &str, min: f64, max: Duration) -> Result<Duration, String> {
    let max = max.as_secs_f64();
    let refused = || format!("must be a number of seconds from {min} to {max}");
    let value: f64 = text.parse().map_err(|_| refused())?;
    if !(value >= min && value <= max) {
        return Err(refused());
    }
    Ok(Duration::from_secs_f64(value))
}
