//! Compiling the C and C++ test programs against `include/` and the static
//! library this very `cargo test` built (`target/<profile>/libnodeipc.a`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use nodeipc_testkit::TempDir;

/// `capi/`.
pub(crate) fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The static library in `target/<profile>/`, as `cargo build -p
/// nodeipc-capi` leaves it. `cargo test` does not build it (a static
/// library cannot be a test's dependency): built here when it is missing or
/// older than a source it is made of, rather than test stale code.
pub(crate) fn static_lib() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| built("libnodeipc.a", "libnodeipc.d", &["-p", "nodeipc-capi"]))
        .clone()
}

/// The `nodeipc` program in `target/<profile>/` (for `nodeipc launch`),
/// built as [`static_lib`] is when missing or stale.
pub(crate) fn nodeipc_program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            built(
                "nodeipc",
                "nodeipc.d",
                &["-p", "nodeipc-cli", "--bin", "nodeipc"],
            )
        })
        .clone()
}

/// `target/<profile>/`: where this test's executable lives, one up.
pub(crate) fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// `target/<profile>/<artifact>`, after `cargo build ARGS` in that target
/// folder and profile when it is missing or older than a file its dep-info
/// (`<dep_info>`, written by cargo beside it) names.
fn built(artifact: &str, dep_info: &str, args: &[&str]) -> PathBuf {
    let profile_dir = profile_dir();
    let path = profile_dir.join(artifact);
    let dep_info = profile_dir.join(dep_info);
    if let Some(why) = stale(&path, &dep_info) {
        eprintln!("{why}: running cargo build {}", args.join(" "));
        let mut command = Command::new(env!("CARGO"));
        command.arg("build").args(args);
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            command.arg("--release");
        }
        let target = profile_dir.parent().expect("target folder");
        command
            .env("CARGO_TARGET_DIR", target)
            .current_dir(crate_dir());
        let out = nodeipc_testkit::spawn_child(
            command
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped()),
        )
        .output_timeout(std::time::Duration::from_secs(900));
        assert!(
            out.status.success(),
            "cargo build {}: {}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(why) = stale(&path, &dep_info) {
            panic!("{why} after cargo build {}", args.join(" "));
        }
    }
    path
}

/// Why `artifact` cannot be used: missing, or older than a file its
/// dep-info lists (every source cargo built it from).
fn stale(artifact: &Path, dep_info: &Path) -> Option<String> {
    let built = match std::fs::metadata(artifact).and_then(|m| m.modified()) {
        Ok(t) => t,
        Err(e) => return Some(format!("{}: {e}", artifact.display())),
    };
    let deps = match std::fs::read_to_string(dep_info) {
        Ok(text) => text,
        Err(e) => return Some(format!("{}: {e}", dep_info.display())),
    };
    // `target: dep dep ...`, a space inside a path escaped as `\ `.
    let (_, list) = deps.split_once(": ")?;
    let list = list.replace("\\ ", "\u{0}");
    list.split_whitespace()
        .map(|dep| PathBuf::from(dep.replace('\u{0}', " ")))
        .find(|dep| {
            std::fs::metadata(dep)
                .and_then(|m| m.modified())
                .map_or(true, |t| t > built)
        })
        .map(|dep| {
            format!(
                "{} is older than {} (or it is gone)",
                artifact.display(),
                dep.display()
            )
        })
}

/// What linking the static library needs beyond what the compiler adds.
pub(crate) const LINK_LIBS: [&str; 4] = ["-lpthread", "-ldl", "-lm", "-lrt"];

/// Compiles `tests/c/<source>` (C when it ends in `.c`, C++ otherwise) into
/// `dir`, against `include/` and the static library. `None` (with a message)
/// when the compiler is missing outside CI; a panic under `CI=true`, or when
/// the compiler rejects the program.
pub(crate) fn compile(source: &str, dir: &TempDir) -> Option<PathBuf> {
    compile_file(&crate_dir().join("tests/c").join(source), dir)
}

/// As [`compile`], for any source file.
pub(crate) fn compile_file(src: &Path, dir: &TempDir) -> Option<PathBuf> {
    let source = src
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a source file name");
    let (compiler, std) = compiler_for(source);
    let out = dir.join(source.split('.').next().expect("a file name"));
    let mut command = Command::new(&compiler);
    command
        .arg(std)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(src)
        .arg(static_lib())
        .args(LINK_LIBS);
    run_compiler(&mut command, source).then_some(out)
}

/// The compiler for `source` and its language standard: `$CC` (else `cc`)
/// and C11 for a `.c` file, `$CXX` (else `g++`) and C++17 otherwise.
pub(crate) fn compiler_for(source: &str) -> (String, &'static str) {
    let (var, default, std) = if source.ends_with(".c") {
        ("CC", "cc", "-std=c11")
    } else {
        ("CXX", "g++", "-std=c++17")
    };
    (
        std::env::var(var).unwrap_or_else(|_| default.to_owned()),
        std,
    )
}

/// Runs a compiler (or another build tool): `true` when it succeeded,
/// `false` (with a message) when it is missing outside CI; a panic under
/// `CI=true`, or with its output when it fails. `what` names the input.
pub(crate) fn run_compiler(command: &mut Command, what: &str) -> bool {
    let tool = command.get_program().to_string_lossy().into_owned();
    match command.output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => panic!(
            "{tool} failed on {what}: {}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            nodeipc_testkit::skip(what, &format!("no {tool} ({e})"));
            false
        }
    }
}

/// What each of the README's examples (`examples/<file>`) prints when it
/// runs, line by line (`channel.cpp`'s last line names pids: its start).
pub(crate) fn example_says(file: &str) -> &'static [&'static str] {
    match file {
        "group.c" => &[
            "rank 0: gathered \"rank 0\" \"rank 1\", region says \"shared\"",
            "rank 1: gathered \"rank 0\" \"rank 1\", region says \"shared\"",
        ],
        "kittens.cpp" => &[
            "rank 0: exchanged 100 101, fd says \"from rank 0\"",
            "rank 1: exchanged 100 101, fd says \"from rank 0\"",
        ],
        "channel.cpp" => &[
            "init: 3 workers loaded tiny",
            "forward: 1 2 3 -> worker 0: 1 2 3",
            "forward: 1 -2 -> worker 1 failed: worker 1 refuses input -2",
            "worker 2 killed: NODEIPC_ERR_PEER_DIED: nodeipc_coordinator_recv_aggregated: \
             channel /nodeipc-example-channel-",
        ],
        _ => panic!("no example {file}"),
    }
}
