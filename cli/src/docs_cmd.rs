//! `nodeipc completions SHELL` and `nodeipc man`: what a package installs
//! beside the binary, generated from the same definition clap parses with,
//! so they cannot drift from the real command line.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, ValueEnum};

use crate::{Cli, CmdResult, Failure};

/// The shells `completions` writes for.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    shell: Shell,
}

#[derive(Args)]
pub(crate) struct ManArgs {
    /// Write nodeipc.1 and one page per subcommand (nodeipc-ls.1, …) into
    /// this existing directory instead of printing nodeipc.1. A page already
    /// there is replaced only if it is a regular file of ours that only we
    /// may write; a link, a FIFO or another user's file is refused.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script for `args.shell` on standard output.
pub(crate) fn completions(args: CompletionsArgs) -> CmdResult {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut public(Cli::command()), "nodeipc", &mut script);
    crate::output::bytes(&script);
    Ok(())
}

/// The command without its hidden subcommands (`demo-worker`), which
/// clap_complete would otherwise offer: the same name, version, about and
/// top-level arguments, and every subcommand a person may type.
fn public(command: clap::Command) -> clap::Command {
    let mut public = clap::Command::new("nodeipc")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(
            command
                .get_subcommands()
                .filter(|sub| !sub.is_hide_set())
                .cloned(),
        );
    if let Some(about) = command.get_about() {
        public = public.about(about.clone());
    }
    public
}

/// Prints the manual page (roff), or writes every page into `args.dir`.
pub(crate) fn man(args: ManArgs) -> CmdResult {
    let command = Cli::command();
    if let Some(dir) = args.dir {
        let mut command = command.disable_help_subcommand(true);
        command.build();
        return write_pages(&command, &dir);
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .map_err(|e| Failure::Error(format!("rendering the manual page: {e}")))?;
    crate::output::bytes(&page);
    Ok(())
}

/// Writes the page of `command` and of each of its visible subcommands
/// into `dir`, as `clap_mangen::generate_to` names them (`nodeipc-ls.1`),
/// each through [`nodeipc_fs::create_output`]: `dir` may be shared, and
/// whatever another user planted at a page's name is refused by name (with
/// its owner), never written through and never waited on.
fn write_pages(command: &clap::Command, dir: &Path) -> CmdResult {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let man = clap_mangen::Man::new(command.clone());
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)
        .map_err(|e| Failure::Error(format!("rendering {}: {e}", path.display())))?;
    let fd = nodeipc_fs::create_output(&path, 0o644, nodeipc_fs::Existing::Truncate)
        .map_err(|e| Failure::Error(format!("writing manual pages: {e}")))?;
    std::fs::File::from(fd)
        .write_all(&page)
        .map_err(|e| Failure::Error(format!("writing {}: {e}", path.display())))
}
