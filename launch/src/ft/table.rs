//! The table itself: every `--ft-*` option of `ft_launcher` 0.7.0 and
//! every field of its `FaultToleranceConfig`, with nodeipc's support.

/// How a value given to an `--ft-*` option is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FtValue {
    /// `none`, `null` or empty for no limit, else a number of seconds.
    Seconds,
    /// `name:seconds,...` (`none` for a section without a limit).
    Sections,
    /// A whole number.
    Int,
    /// Text, as given.
    Text,
    /// True unless `false`, `0` or `no` (NVRx's reading of most switches).
    TrueUnlessNo,
    /// True only for `true`, `1` or `yes` (`--ft-skip-section-response`).
    TrueOnlyIfYes,
    /// No value: the option alone.
    Flag,
}

/// What nodeipc does with a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FtSupport {
    /// Does what NVRx does with it.
    Implemented,
    /// Accepted, with a one-line warning saying why it changes nothing.
    Warned(&'static str),
    /// Refused, naming it and saying why.
    Refused(&'static str),
}

/// One NVRx setting: its option (after `--ft-`, dashes), its configuration
/// field, its default there, how its value is read, and nodeipc's support.
#[derive(Clone, Copy, Debug)]
pub struct FtSetting {
    /// The option after `--ft-`, with dashes; `None` for a field with no
    /// option.
    pub option: Option<&'static str>,
    /// The `fault_tolerance:` field; `None` for an option with no field.
    pub field: Option<&'static str>,
    /// The field's default in NVRx 0.7.0, as JSON: a file holding it (as
    /// `to_yaml_file` writes every field) is taken quietly.
    pub default: &'static str,
    /// How the option's value is read.
    pub value: FtValue,
    /// What nodeipc does with it.
    pub support: FtSupport,
}

const NO_GPU_MEMORY: &str = "the launcher does not wait for GPU memory to be released";
const NIC_BY_NAME: &str =
    "NICs are checked by name (--nic NAME, sysfs operstate/state), not discovered";
const LOG_FUNNEL: &str = "no log server or per-cycle log files: use --log-dir with --tee";
const ATTRIBUTION: &str = "no attribution service";
const NO_SEGMENTS: &str = "no hot-spare segments";
const CLIENT_SIDE: &str = "a setting of the ranks' client, given there";

macro_rules! setting {
    ($option:expr, $field:expr, $default:expr, $value:ident, $support:expr) => {
        FtSetting {
            option: $option,
            field: $field,
            default: $default,
            value: FtValue::$value,
            support: $support,
        }
    };
}

use FtSupport::{Implemented, Refused, Warned};

/// Every `--ft-*` option of `ft_launcher` 0.7.0 and every field of its
/// `FaultToleranceConfig`, in `launch/README.md`'s order.
pub const FT_SETTINGS: &[FtSetting] = &[
    setting!(Some("cfg-path"), None, "null", Text, Implemented),
    setting!(
        Some("workload-check-interval"),
        Some("workload_check_interval"),
        "5.0",
        Seconds,
        Implemented
    ),
    setting!(
        Some("initial-rank-heartbeat-timeout"),
        Some("initial_rank_heartbeat_timeout"),
        "null",
        Seconds,
        Implemented
    ),
    setting!(
        Some("rank-heartbeat-timeout"),
        Some("rank_heartbeat_timeout"),
        "null",
        Seconds,
        Implemented
    ),
    setting!(
        Some("rank-section-timeouts"),
        Some("rank_section_timeouts"),
        "{}",
        Sections,
        Implemented
    ),
    setting!(
        Some("rank-out-of-section-timeout"),
        Some("rank_out_of_section_timeout"),
        "null",
        Seconds,
        Implemented
    ),
    setting!(
        Some("rank-termination-signal"),
        Some("rank_termination_signal"),
        "\"SIGKILL\"",
        Text,
        Implemented
    ),
    setting!(
        Some("skip-section-response"),
        Some("skip_section_response"),
        "true",
        TrueOnlyIfYes,
        Implemented
    ),
    setting!(
        Some("node-health-check-interval"),
        Some("node_health_check_interval"),
        "5.0",
        Seconds,
        Implemented
    ),
    setting!(
        Some("max-no-progress-cycles"),
        Some("max_no_progress_cycles"),
        "3",
        Int,
        Implemented
    ),
    setting!(
        Some("min-progress-iterations"),
        Some("min_progress_iterations"),
        "1",
        Int,
        Implemented
    ),
    setting!(
        Some("checkpoint-iteration-file"),
        Some("checkpoint_iteration_file"),
        "null",
        Text,
        Implemented
    ),
    setting!(Some("no-restart-exit-code"), None, "93", Int, Implemented),
    setting!(
        Some("restart-policy"),
        None,
        "\"any-failed\"",
        Text,
        Implemented
    ),
    setting!(
        Some("safety-factor"),
        Some("safety_factor"),
        "5.0",
        Seconds,
        Implemented
    ),
    setting!(
        Some("log-level"),
        Some("log_level"),
        "20",
        Text,
        Warned("the launcher and monitors log at their own level")
    ),
    setting!(
        Some("restart-check-interval"),
        Some("restart_check_interval"),
        "60.0",
        Seconds,
        Warned("deprecated in nvidia-resiliency-ext, no effect there either")
    ),
    setting!(
        Some("ignore-missing-cfg"),
        None,
        "false",
        Flag,
        Warned("accepted and unused, as in nvidia-resiliency-ext 0.7.0")
    ),
    setting!(
        Some("rdzv-impl"),
        None,
        "\"barrier\"",
        Text,
        Warned("nodeipc's own rendezvous is used")
    ),
    setting!(
        Some("enable-nic-monitor"),
        Some("enable_nic_monitor"),
        "false",
        TrueUnlessNo,
        Warned(NIC_BY_NAME)
    ),
    setting!(
        Some("enable-nic-healthcheck"),
        Some("enable_nic_healthcheck"),
        "true",
        TrueUnlessNo,
        Warned(NIC_BY_NAME)
    ),
    setting!(
        Some("pci-topo-file"),
        Some("pci_topo_file"),
        "null",
        Text,
        Warned(NIC_BY_NAME)
    ),
    setting!(
        Some("link-down-path-template"),
        Some("link_down_path_template"),
        "null",
        Text,
        Warned(NIC_BY_NAME)
    ),
    setting!(
        Some("link-state-path-template"),
        Some("link_state_path_template"),
        "null",
        Text,
        Warned(NIC_BY_NAME)
    ),
    setting!(
        Some("numa-bind-strict"),
        Some("numa_bind_strict"),
        "true",
        TrueUnlessNo,
        Warned("ranks are not wrapped in numactl")
    ),
    setting!(
        Some("gpu-memory-reclaim-timeout"),
        Some("gpu_memory_reclaim_timeout"),
        "50.0",
        Seconds,
        Warned(NO_GPU_MEMORY)
    ),
    setting!(
        Some("gpu-memory-tolerance-mb"),
        Some("gpu_memory_tolerance_mb"),
        "512.0",
        Seconds,
        Warned(NO_GPU_MEMORY)
    ),
    setting!(
        Some("gpu-memory-poll-interval"),
        Some("gpu_memory_poll_interval"),
        "2.0",
        Seconds,
        Warned(NO_GPU_MEMORY)
    ),
    setting!(
        Some("check-remaining-processes"),
        Some("check_remaining_processes"),
        "false",
        TrueUnlessNo,
        Warned("always on: every process a round leaves is killed and reported")
    ),
    setting!(
        Some("install-exception-hook"),
        Some("install_exception_hook"),
        "false",
        TrueUnlessNo,
        Warned(CLIENT_SIDE)
    ),
    setting!(
        None,
        Some("num_warmup_iterations"),
        "5",
        Int,
        Warned(CLIENT_SIDE)
    ),
    setting!(
        Some("segment"),
        Some("segment"),
        "null",
        Int,
        Refused(NO_SEGMENTS)
    ),
    setting!(
        Some("segment-health-check-dir"),
        Some("segment_health_check_dir"),
        "null",
        Text,
        Refused(NO_SEGMENTS)
    ),
    setting!(
        Some("enable-dist-storage-healthcheck"),
        Some("enable_dist_storage_healthcheck"),
        "false",
        TrueUnlessNo,
        Refused("no storage health checks")
    ),
    setting!(
        Some("storage-health-check-path"),
        Some("storage_healthcheck_path"),
        "null",
        Text,
        Refused("no storage health checks")
    ),
    setting!(
        Some("node-health-check-endpoint"),
        None,
        "null",
        Text,
        Refused("no external node health service")
    ),
    setting!(
        Some("per-cycle-applog-prefix"),
        None,
        "null",
        Text,
        Refused(LOG_FUNNEL)
    ),
    setting!(
        Some("nvrx-logfile"),
        None,
        "null",
        Text,
        Refused(LOG_FUNNEL)
    ),
    setting!(
        Some("enable-log-server"),
        None,
        "null",
        Text,
        Refused(LOG_FUNNEL)
    ),
    setting!(
        Some("log-server-port"),
        None,
        "50051",
        Text,
        Refused(LOG_FUNNEL)
    ),
    setting!(
        Some("log-aggregator-count"),
        None,
        "0",
        Text,
        Refused(LOG_FUNNEL)
    ),
    setting!(
        Some("log-leaf-max-queue-chunks"),
        None,
        "-1",
        Text,
        Refused(LOG_FUNNEL)
    ),
    setting!(
        Some("log-server-log-prefix"),
        None,
        "null",
        Text,
        Refused(LOG_FUNNEL)
    ),
    setting!(
        Some("log-server-graceful-shutdown-timeout"),
        None,
        "60.0",
        Text,
        Refused(LOG_FUNNEL)
    ),
    setting!(
        Some("attribution-endpoint"),
        Some("attribution_endpoint"),
        "null",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("attribution-startup-timeout"),
        None,
        "20.0",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("attribution-llm-api-key-file"),
        None,
        "null",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("attribution-llm-base-url"),
        None,
        "null",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("attribution-llm-model"),
        None,
        "null",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("attribution-analysis-backend"),
        None,
        "\"lib\"",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("attribution-stop-action"),
        Some("attribution_stop_action"),
        "null",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("attribution-log-level"),
        None,
        "null",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("attribution-export-url"),
        Some("attribution_export_url"),
        "null",
        Text,
        Refused(ATTRIBUTION)
    ),
    setting!(
        Some("cycle-info-dir"),
        Some("cycle_info_dir"),
        "null",
        Text,
        Refused("no cycle-info files")
    ),
];

impl FtSetting {
    /// `--ft-<option>`, as NVRx spells it first.
    pub fn long(&self) -> Option<String> {
        self.option.map(|o| format!("ft-{o}"))
    }

    /// The other spellings NVRx accepts: the tail with underscores
    /// (`--ft-rank_heartbeat_timeout`), and all underscores
    /// (`--ft_segment`).
    pub fn aliases(&self) -> Vec<String> {
        let Some(option) = self.option else {
            return Vec::new();
        };
        let tail = option.replace('-', "_");
        let mut aliases = vec![format!("ft-{tail}"), format!("ft_{tail}")];
        aliases.retain(|a| *a != format!("ft-{option}"));
        aliases.dedup();
        aliases
    }

    pub(crate) fn name(&self) -> String {
        match (self.option, self.field) {
            (Some(option), _) => format!("--ft-{option}"),
            (None, Some(field)) => format!("fault_tolerance.{field}"),
            (None, None) => "?".into(),
        }
    }
}
