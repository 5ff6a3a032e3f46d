//! The launcher's options taken by table: torchrun's that it accepts
//! without doing what they say, and nvidia-resiliency-ext's `--ft-*`
//! (`nodeipc_launch::FT_SETTINGS`), each in every spelling their users
//! write, collected in command-line order.

use nodeipc_launch::{FT_SETTINGS, FtValue};

use crate::Failure;

/// torchrun's options that set what the launcher chooses itself, or that
/// have no meaning for it: `(option, takes a value, Ok(why it is only
/// warned) or Err(why it is refused))`. Each also answers to its
/// underscore spelling and, where torchrun reads one, `PET_<NAME>`.
const TORCHRUN_ACCEPTED: &[(&str, bool, Result<&str, &str>)] = &[
    (
        "master-addr",
        true,
        Ok("MASTER_ADDR is 127.0.0.1 on one node, node 0's address across nodes"),
    ),
    (
        "master-port",
        true,
        Ok("MASTER_PORT is a free port the launcher picks each round"),
    ),
    (
        "monitor-interval",
        true,
        Ok("ranks are watched through pidfds, without polling"),
    ),
    (
        "start-method",
        true,
        Ok("ranks are always new processes (exec)"),
    ),
    ("role", true, Ok("every rank has the one role")),
    (
        "term-timeout",
        true,
        Ok("--stop-timeout is the grace before SIGKILL on every stop"),
    ),
    (
        "signals-to-handle",
        true,
        Ok("every terminating signal stops the launch in order"),
    ),
    (
        "event-log-handler",
        true,
        Ok("events go to stderr and --json-events"),
    ),
    (
        "run-path",
        false,
        Err("ranks are separate processes, never run inside the launcher"),
    ),
    (
        "logs-specs",
        true,
        Err("no log-spec plug-ins: --log-dir, -r and -t are built in"),
    ),
    ("numa-binding", true, Err("no NUMA binding")),
];

/// The options of a table (torchrun's accepted ones, NVRx's `--ft-*`):
/// each given one, by its table name, with its value (`None` for a flag),
/// in command-line order (a later one wins, as with argparse).
#[derive(Default)]
pub(crate) struct TableOptions<T: OptionTable> {
    pub(crate) given: Vec<(String, Option<String>)>,
    table: std::marker::PhantomData<T>,
}

/// One option of a table, taken by name.
pub(crate) struct TableOption {
    name: String,
    long: String,
    aliases: Vec<String>,
    takes_value: bool,
    env: Option<String>,
}

/// A table of options taken by name.
pub(crate) trait OptionTable {
    fn options() -> Vec<TableOption>;
}

/// torchrun's accepted options.
#[derive(Default)]
pub(crate) struct Torchrun;

impl OptionTable for Torchrun {
    fn options() -> Vec<TableOption> {
        TORCHRUN_ACCEPTED
            .iter()
            .map(|(name, takes_value, _)| TableOption {
                name: (*name).to_owned(),
                long: (*name).to_owned(),
                aliases: vec![name.replace('-', "_")],
                takes_value: *takes_value,
                env: takes_value.then(|| format!("PET_{}", name.replace('-', "_").to_uppercase())),
            })
            .collect()
    }
}

/// nvidia-resiliency-ext's `--ft-*` options, from `nodeipc_launch`'s table
/// (`--ft-cfg-path` is `--nvrx-config`'s alias).
#[derive(Default)]
pub(crate) struct Nvrx;

impl OptionTable for Nvrx {
    fn options() -> Vec<TableOption> {
        FT_SETTINGS
            .iter()
            .filter(|s| s.option != Some("cfg-path"))
            .filter_map(|s| {
                Some(TableOption {
                    name: s.option?.to_owned(),
                    long: s.long()?,
                    aliases: s.aliases(),
                    takes_value: s.value != FtValue::Flag,
                    env: None,
                })
            })
            .collect()
    }
}

impl<T: OptionTable> TableOptions<T> {
    fn id(name: &str) -> String {
        format!("table:{name}")
    }
}

impl<T: OptionTable> clap::FromArgMatches for TableOptions<T> {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut options = TableOptions {
            given: Vec::new(),
            table: std::marker::PhantomData,
        };
        options.update_from_arg_matches(matches)?;
        Ok(options)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        let mut given = Vec::new();
        for TableOption {
            name, takes_value, ..
        } in T::options()
        {
            let id = Self::id(&name);
            if !takes_value {
                if matches.get_flag(&id) {
                    given.push((matches.index_of(&id).unwrap_or(0), name, None));
                }
            } else if let Some(values) = matches.get_many::<String>(&id) {
                let indices = matches.indices_of(&id).into_iter().flatten();
                for (value, index) in values.zip(indices) {
                    given.push((index, name.clone(), Some(value.clone())));
                }
            }
        }
        given.sort_by_key(|(index, ..)| *index);
        self.given = given.into_iter().map(|(_, o, v)| (o, v)).collect();
        Ok(())
    }
}

impl<T: OptionTable> clap::Args for TableOptions<T> {
    fn augment_args(mut command: clap::Command) -> clap::Command {
        for TableOption {
            name,
            long,
            aliases,
            takes_value,
            env,
        } in T::options()
        {
            let mut arg = clap::Arg::new(Self::id(&name)).long(long).hide(true);
            for alias in aliases {
                arg = arg.alias(alias);
            }
            if let Some(env) = env {
                arg = arg.env(env);
            }
            arg = if takes_value {
                arg.action(clap::ArgAction::Append)
                    .num_args(1)
                    .allow_hyphen_values(true)
                    .value_name("VALUE")
            } else {
                arg.action(clap::ArgAction::SetTrue)
            };
            command = command.arg(arg);
        }
        command
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

impl TableOptions<Torchrun> {
    /// The warnings, or the refusal of an option that cannot be honoured.
    pub(crate) fn check(&self) -> Result<Vec<String>, Failure> {
        let mut warnings = Vec::new();
        for (name, _) in &self.given {
            match TORCHRUN_ACCEPTED.iter().find(|(n, ..)| n == name) {
                Some((_, _, Err(why))) => {
                    return Err(Failure::Usage(format!("--{name} is not supported: {why}")));
                }
                Some((_, _, Ok(why))) => {
                    warnings.push(format!("--{name}: accepted, no effect: {why}"));
                }
                None => {}
            }
        }
        warnings.dedup();
        Ok(warnings)
    }
}
