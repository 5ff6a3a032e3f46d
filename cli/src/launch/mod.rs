//! `nodeipc launch`: a thin front over `nodeipc-launch`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nodeipc_launch::{
    HealthOptions, LaunchOptions, OutputOptions, ProgressOptions, RdzvOptions, Rendezvous,
    StreamChoice,
};
use nodeipc_monitor_host::{HostConfig, MonitorConfigFile};

use crate::limits::u32_in;
use crate::{CmdResult, Failure};

mod tables;

use tables::{Nvrx, TableOptions, Torchrun};

/// `nodeipc launch [options] SCRIPT.py ARGS...`, `-m MODULE ARGS...`,
/// `--no-python PROGRAM ARGS...` or `-- COMMAND ARGS...`
#[derive(Args)]
pub(crate) struct LaunchArgs {
    /// Local ranks to start: 1 to 1024, or `cpu` (one per CPU).
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        visible_alias = "nproc-per-node",
        alias = "nproc_per_node",
        env = "PET_NPROC_PER_NODE",
        value_parser = nproc
    )]
    nproc: u32,
    /// Run the program as a Python module: `python -u -m MODULE ARGS...`.
    #[arg(short = 'm', long, conflicts_with = "no_python")]
    module: bool,
    /// Run the program itself, not through Python.
    #[arg(long, alias = "no_python")]
    no_python: bool,
    /// The Python that runs a script or module (default: $PYTHON, else
    /// `python3` on PATH).
    #[arg(long, value_name = "PATH", env = "PYTHON")]
    python: Option<OsString>,
    /// Where ranks' output files go (torchrun's layout:
    /// DIR/RUN_ID_*/attempt_N/LOCAL_RANK/{stdout,stderr}.log); /dev/null
    /// keeps none. Default: a new directory under the temporary directory.
    #[arg(long, value_name = "DIR", alias = "log_dir", env = "PET_LOG_DIR")]
    log_dir: Option<PathBuf>,
    /// Streams written to files only: 0 none, 1 stdout, 2 stderr, 3 both,
    /// or per local rank: 0:1,1:3.
    #[arg(short = 'r', long, value_name = "STREAMS", env = "PET_REDIRECTS", value_parser = StreamChoice::parse)]
    redirects: Option<StreamChoice>,
    /// Streams written to files and to the console, each line prefixed
    /// with its rank (`[rank3]: `, `[node1/rank3]: ` across nodes): as -r.
    #[arg(short = 't', long, value_name = "STREAMS", env = "PET_TEE", value_parser = StreamChoice::parse)]
    tee: Option<StreamChoice>,
    /// The local ranks whose output reaches the console (comma-separated);
    /// the others' goes to their files or nowhere.
    #[arg(long, value_name = "RANKS", alias = "local_ranks_filter", env = "PET_LOCAL_RANKS_FILTER", value_parser = ranks_filter)]
    local_ranks_filter: Option<RanksFilter>,
    /// torchrun options accepted with a warning: what they set is chosen
    /// by the launcher (MASTER_ADDR and MASTER_PORT), watched without
    /// polling (--monitor-interval), or has no meaning here.
    #[command(flatten)]
    torchrun: TableOptions<Torchrun>,
    /// nvidia-resiliency-ext's `--ft-*` options (see the launcher's README
    /// for which are implemented, accepted with a warning, or refused).
    #[command(flatten)]
    ft: TableOptions<Nvrx>,
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
    /// The monitors' configuration: our JSON (see the nodeipc-monitor-host README),
    /// its `health_checks` section included; the health flags below add to
    /// it or override it.
    #[arg(long, value_name = "FILE", conflicts_with = "nvrx_config")]
    monitor_config: Option<PathBuf>,
    /// The monitors' configuration from a nvidia-resiliency-ext file (YAML
    /// or JSON, its `fault_tolerance:` block); the `--ft-*` options go over
    /// it; fields without effect are warned about, unsupported ones refused.
    #[arg(
        long,
        value_name = "FILE",
        visible_alias = "ft-cfg-path",
        alias = "ft-cfg_path",
        alias = "ft_cfg_path",
        env = "PET_FT_CFG_PATH"
    )]
    nvrx_config: Option<PathBuf>,
    /// Where the private run directory is made (default: $XDG_RUNTIME_DIR,
    /// else the temporary directory): a directory of ours, not a symlink,
    /// that group and others cannot write.
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
    /// Seconds between SIGTERM and SIGKILL when ranks are stopped.
    #[arg(
        long,
        value_name = "SECS",
        default_value = "10",
        alias = "workers-stop-timeout",
        alias = "workers_stop_timeout",
        value_parser = seconds
    )]
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
    /// The Python script to run and its arguments (with -m, the module;
    /// with --no-python, the program); after `--`, the command to run as
    /// it is.
    #[arg(
        value_name = "SCRIPT",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    program: Vec<OsString>,
    /// Set from the raw command line: the program came after `--`.
    #[arg(skip)]
    after_dashes: bool,
}

/// `--local-ranks-filter`'s list (one value, not repeated occurrences).
#[derive(Clone)]
pub(crate) struct RanksFilter(Vec<u32>);

fn ranks_filter(text: &str) -> Result<RanksFilter, String> {
    OutputOptions::parse_filter(text).map(RanksFilter)
}

/// `--nproc`: a number of ranks, or `cpu` for one per CPU (torchrun's).
fn nproc(text: &str) -> Result<u32, String> {
    match text {
        "cpu" => Ok(std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
            .min(nodeipc_launch::MAX_NPROC)),
        "gpu" | "auto" | "xpu" => Err(format!(
            "{text}: ranks per accelerator are not counted here: give a number"
        )),
        _ => u32_in(1, nodeipc_launch::MAX_NPROC)(text),
    }
}

/// Marks a launch whose program came after `--` (run as it is): the raw
/// command line has `--` just before the program's first word.
pub(crate) fn mark_after_dashes(args: &mut LaunchArgs, raw: &[OsString]) {
    if let Some(at) = raw.iter().position(|a| a == "--") {
        args.after_dashes = raw[at + 1..] == args.program[..];
    }
}

impl LaunchArgs {
    /// The command each rank runs: as given after `--` or with
    /// --no-python; else through Python (`python -u SCRIPT ARGS` or
    /// `python -u -m MODULE ARGS`), as torchrun does.
    fn command(&self) -> Result<Vec<OsString>, Failure> {
        if self.after_dashes && (self.module || self.no_python) {
            return Err(Failure::Usage(
                "a command after -- runs as it is: -m and --no-python do not go with it".into(),
            ));
        }
        if self.after_dashes || self.no_python {
            return Ok(self.program.clone());
        }
        let python = self.python.clone().unwrap_or_else(|| "python3".into());
        if python.is_empty() {
            return Err(Failure::Usage("--python (or $PYTHON) is empty".into()));
        }
        let mut command = vec![python, "-u".into()];
        if self.module {
            command.push("-m".into());
        }
        command.extend(self.program.iter().cloned());
        Ok(command)
    }
}

pub(crate) fn run(args: LaunchArgs) -> CmdResult {
    let command = args.command()?;
    for warning in args.torchrun.check()? {
        eprintln_safe(&format!("nodeipc launch: warning: {warning}"));
    }
    let nvrx = args.nvrx_config.is_some() || !args.ft.given.is_empty();
    if nvrx && args.monitor_config.is_some() {
        return Err(Failure::Usage(
            "--monitor-config does not go with --nvrx-config/--ft-cfg-path or --ft-* options: give the monitors' settings in one place".into(),
        ));
    }
    let (HostConfig { monitor, health }, progress, health_interval, ft_safety_factor) =
        match (&args.monitor_config, nvrx) {
            (Some(file), _) => (HostConfig::load(file)?, ProgressOptions::off(), None, None),
            (None, true) => {
                let ft = nodeipc_launch::resolve_ft(args.nvrx_config.as_deref(), &args.ft.given)
                    .map_err(|e| Failure::Usage(e.to_string()))?;
                for warning in &ft.warnings {
                    eprintln_safe(&format!("nodeipc launch: warning: {warning}"));
                }
                let host = HostConfig {
                    monitor: ft.monitor,
                    health: ft.health,
                };
                (host, ft.progress, ft.health_interval, ft.safety_factor)
            }
            (None, false) => (HostConfig::default(), ProgressOptions::off(), None, None),
        };
    let output = OutputOptions {
        log_dir: args.log_dir,
        redirects: args.redirects.unwrap_or_default(),
        tee: args.tee.unwrap_or_default(),
        local_ranks_filter: args.local_ranks_filter.map(|f| f.0),
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
        health_checks: health,
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
            // --health-interval, when given, wins over the NVRx setting.
            interval: match health_interval {
                Some(nvrx) if args.health_interval == DEFAULT_HEALTH_INTERVAL => nvrx,
                _ => args.health_interval,
            },
        },
        progress,
        ft_safety_factor,
        output,
        ..LaunchOptions::new(args.nproc, command)
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

/// --health-interval's default (NVRx's `node_health_check_interval` too).
const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);

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
