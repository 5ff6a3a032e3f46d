//! The processes the monitor's tests need, played by the test binary
//! itself (nothing of this ships in the crate): a monitor server (`monitor
//! serve`, the command line `SpawnOptions::program` runs), ranks that
//! misbehave in chosen ways, a client that names someone else's pid, and a
//! launcher that spawns its monitor by re-executing itself.
//!
//! The test binary's `main` is the test harness's, so the roles start
//! before it: [`ENTRY`] sits in `.init_array`, which the C runtime calls
//! before `main` in every process of the binary. It plays a role when the
//! process was started as one: `monitor serve --socket …` (no test
//! harness takes that command line), or any role with [`HELPER_ENV`] set
//! (what [`helper_command`] does). Otherwise it returns and the tests run.
//! A monitor that `spawn_monitor` re-executed (the `spawn` role's) is served
//! first of all, as a program's `main` calling `run_if_server` would.
//!
//! Every stage a test waits for is one line on standard output.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use nodeipc_monitor::{MonitorClient, MonitorConfig, RankInfo};
use nodeipc_monitor_host::{HostConfig, MonitorConfigFile, SpawnOptions};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Set in a helper process's environment: argument 1 is its role.
pub const HELPER_ENV: &str = "NODEIPC_MONITOR_TEST_HELPER";

/// The program that plays the roles: this test binary.
pub fn helper() -> PathBuf {
    std::env::current_exe().expect("the test binary's path")
}

/// A command that starts this binary in a role: add the role and its flags.
pub fn helper_command() -> Command {
    let mut command = Command::new(helper());
    command.env(HELPER_ENV, "1");
    command
}

// SAFETY (of placing it there): the C runtime calls each `.init_array`
// entry once, before `main`, with the process's only thread; `entry` is an
// `extern "C" fn()` as it expects (the arguments glibc passes are ignored,
// which the C calling convention allows).
#[used]
#[unsafe(link_section = ".init_array")]
static ENTRY: extern "C" fn() = entry;

extern "C" fn entry() {
    // As Rust's `main` would have it (its runtime does this before `main`,
    // in every process of the binary): a write to a closed pipe is an error,
    // not a death by SIGPIPE. First of all, since a monitor served from here
    // writes its log to a standard error whose reader may be gone.
    // SAFETY: changes one signal's disposition, to what std sets anyway,
    // while this is the process's only thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // Until it is known that this process plays a role, only what std
    // allows before its runtime is set up: allocation, files, environment —
    // never `thread::current` (std aborts at `main` if it was used) nor a
    // panic (it cannot unwind out of an `extern "C"` function). A role
    // process never reaches `main`.
    // A monitor re-executed by `spawn_monitor`: serves, then exits.
    nodeipc_monitor_host::run_if_server();
    let args: Vec<String> = match std::fs::read("/proc/self/cmdline") {
        // Each argument ends with a NUL, the last one too.
        Ok(bytes) => bytes
            .strip_suffix(&[0])
            .unwrap_or(&bytes)
            .split(|b| *b == 0)
            .skip(1)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
        Err(_) => return,
    };
    let serve_line = args.len() >= 3 && args[..3] == ["monitor", "serve", "--socket"];
    if !serve_line && std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let code = match std::panic::catch_unwind(|| play(&args)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            // Not `eprintln!`, which panics when standard error is gone: a
            // panic cannot unwind out of this `extern "C"` function.
            let _ = writeln!(std::io::stderr(), "nodeipc-monitor test helper: {e}");
            1
        }
        Err(_) => 101,
    };
    std::process::exit(code);
}

fn play(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("monitor") => serve(&args[1..]),
        Some("rank") => rank(&Options::parse(&args[1..])),
        Some("spoof") => spoof(&Options::parse(&args[1..])),
        Some("spawn") => spawn(&Options::parse(&args[1..])),
        _ => Err(format!("unknown role in {args:?}")),
    }
}

/// `monitor serve --socket P [--config F]`.
fn serve(args: &[String]) -> Result<(), String> {
    if args.first().map(String::as_str) != Some("serve") {
        return Err(format!("expected `monitor serve`, got {args:?}"));
    }
    let options = Options::parse(&args[1..]);
    let config = match &options.config {
        Some(file) => load(file)?,
        None => HostConfig::default(),
    };
    nodeipc_monitor_host::serve(options.socket(), config)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[derive(Default)]
struct Options {
    socket: Option<PathBuf>,
    config: Option<PathBuf>,
    config_json: Option<String>,
    beats: u64,
    interval: Duration,
    then: String,
    section: Option<String>,
    fast: bool,
    ignore_sigterm: bool,
    pid: u32,
}

impl Options {
    fn parse(args: &[String]) -> Options {
        let mut o = Options {
            interval: Duration::from_millis(20),
            then: "hang".to_owned(),
            ..Options::default()
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || it.next().cloned().unwrap_or_default();
            match flag.as_str() {
                "--socket" => o.socket = Some(PathBuf::from(value())),
                "--config" => o.config = Some(PathBuf::from(value())),
                "--config-json" => o.config_json = Some(value()),
                "--beats" => o.beats = value().parse().expect("--beats N"),
                "--interval-ms" => {
                    o.interval = Duration::from_millis(value().parse().expect("--interval-ms N"))
                }
                "--then" => o.then = value(),
                "--section" => o.section = Some(value()),
                "--pid" => o.pid = value().parse().expect("--pid N"),
                "--fast" => o.fast = true,
                "--ignore-sigterm" => o.ignore_sigterm = true,
                other => panic!("unknown flag {other}"),
            }
        }
        o
    }

    fn socket(&self) -> PathBuf {
        self.socket.clone().expect("--socket PATH")
    }
}

extern "C" fn on_sigterm(_: libc::c_int) {
    let line = b"sigterm\n";
    // SAFETY: write(2) is async-signal-safe; the buffer is a static string.
    unsafe {
        libc::write(1, line.as_ptr().cast(), line.len());
    }
}

/// A rank: init, optionally open a section, beat `--beats` times every
/// `--interval-ms`, then `--then hang` (stop beating, stay alive), `exit`,
/// or `beat-forever`.
fn rank(o: &Options) -> Result<(), String> {
    if o.ignore_sigterm {
        let handler: extern "C" fn(libc::c_int) = on_sigterm;
        // SAFETY: installs a handler that only calls write(2); nothing else
        // in this process depends on SIGTERM's disposition.
        unsafe {
            libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
        }
    }
    let e = |e: nodeipc_monitor::Error| e.to_string();
    let mut client = MonitorClient::connect(o.socket(), TIMEOUT).map_err(e)?;
    let me = RankInfo::this_process(3, 1);
    if o.fast {
        client.init_with_heartbeat_region(&me).map_err(e)?;
        if !client.has_heartbeat_region() {
            return Err("the monitor declined the heartbeat region".to_owned());
        }
    } else {
        client.init(&me).map_err(e)?;
    }
    println!("registered");
    if let Some(section) = &o.section {
        client.start_section(section).map_err(e)?;
        println!("in-section");
    }
    let beat = |client: &mut MonitorClient| -> Result<(), String> {
        if o.fast {
            client.heartbeat_fast().map_err(e)
        } else {
            client.heartbeat().map_err(e)
        }
    };
    for _ in 0..o.beats {
        beat(&mut client)?;
        std::thread::sleep(o.interval);
    }
    match o.then.as_str() {
        "exit" => {
            println!("exiting");
            Ok(())
        }
        "beat-forever" => {
            println!("beating");
            loop {
                beat(&mut client)?;
                std::thread::sleep(o.interval);
            }
        }
        _ => {
            println!("hung");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }
}

/// Connects and names `--pid` in its Init; prints `accepted` or `refused: CAUSE`.
fn spoof(o: &Options) -> Result<(), String> {
    let mut client = MonitorClient::connect(o.socket(), TIMEOUT).map_err(|e| e.to_string())?;
    let rank = RankInfo {
        pid: o.pid,
        ..RankInfo::this_process(0, 0)
    };
    match client.init(&rank) {
        Ok(_) => println!("accepted"),
        Err(e) => match e.refusal_cause() {
            Some(cause) => println!("refused: {cause}"),
            None => return Err(e.to_string()),
        },
    }
    Ok(())
}

/// A launcher: spawns its monitor by re-executing this binary (no
/// `program`), prints `ready <pid>`, stops it when standard input closes,
/// prints `stopped <status>`.
fn spawn(o: &Options) -> Result<(), String> {
    let config = match &o.config_json {
        Some(json) => super::parse_config(json),
        None => MonitorConfig::default(),
    };
    let handle =
        nodeipc_monitor_host::spawn_monitor_with(&config, o.socket(), SpawnOptions::default())
            .map_err(|e| e.to_string())?;
    println!("ready {}", handle.pid());
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    let status = handle.stop().map_err(|e| e.to_string())?;
    println!("stopped {status}");
    Ok(())
}

/// The config file `spawn_monitor_with` wrote (health checks included).
fn load(file: &std::path::Path) -> Result<HostConfig, String> {
    HostConfig::load(file).map_err(|e| e.to_string())
}
