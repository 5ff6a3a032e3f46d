//! `nodeipc launch`: a thin front over `nodeipc-launch`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nodeipc_launch::{HealthOptions, LaunchOptions};
use nodeipc_monitor::MonitorConfig;

use crate::{CmdResult, Failure};

/// `nodeipc launch --nproc N [options] -- COMMAND ARGS...`
#[derive(Args)]
pub(crate) struct LaunchArgs {
    /// Local ranks to start (1 to 1024).
    #[arg(long, value_name = "N")]
    nproc: u32,
    /// Restart rounds allowed after the first.
    #[arg(long, value_name = "K", default_value_t = 0)]
    max_restarts: u32,
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
    /// else the temporary directory).
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
    let outcome = nodeipc_launch::launch(&options)?;
    match outcome.exit_code {
        0 => Ok(()),
        // The last event line (`exit N: …`) has said why.
        code => Err(Failure::Status(
            u8::try_from(code.clamp(1, 255)).unwrap_or(1),
            String::new(),
        )),
    }
}

fn eprintln_safe(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Seconds, whole or fractional, more than 0 and at most an hour.
fn seconds(text: &str) -> Result<Duration, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(value > 0.0 && value <= 3600.0) {
        return Err(format!(
            "{text} s is out of range: more than 0, at most 3600"
        ));
    }
    Ok(Duration::from_secs_f64(value))
}
