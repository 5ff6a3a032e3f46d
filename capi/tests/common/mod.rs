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
/// library cannot be a test's dependency): the tests refuse a missing one,
/// and one older than any source it is made of, rather than test stale code.
pub(crate) fn static_lib() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_static_lib).clone()
}

fn build_static_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let lib = profile_dir.join("libnodeipc.a");
    if let Some(why) = stale(&lib) {
        // `cargo test` never builds a static library (no test can depend on
        // one): build it now, in this target folder and profile.
        eprintln!("{why}: running cargo build -p nodeipc-capi");
        let mut command = Command::new(env!("CARGO"));
        command.args(["build", "-p", "nodeipc-capi"]);
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
        .output_timeout(std::time::Duration::from_secs(600));
        assert!(
            out.status.success(),
            "cargo build -p nodeipc-capi: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(why) = stale(&lib) {
            panic!("{why} after cargo build -p nodeipc-capi");
        }
    }
    lib
}

/// Why `lib` cannot be used: missing, or older than a source it is made of.
fn stale(lib: &Path) -> Option<String> {
    let built = match std::fs::metadata(lib).and_then(|m| m.modified()) {
        Ok(t) => t,
        Err(e) => return Some(format!("{}: {e}", lib.display())),
    };
    let workspace = crate_dir().parent().expect("workspace root");
    [
        "capi", "fs", "shm", "sem", "fdpass", "barrier", "proto", "channel", "monitor",
    ]
    .iter()
    .filter_map(|layer| newest_source(&workspace.join(layer).join("src")))
    .find(|(modified, _)| *modified > built)
    .map(|(_, path)| format!("{} is older than {}", lib.display(), path.display()))
}

/// The most recently modified `.rs` file under `dir`.
fn newest_source(dir: &Path) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let found = if path.is_dir() {
            newest_source(&path)
        } else if path.extension().is_some_and(|e| e == "rs") {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .map(|t| (t, path))
        } else {
            None
        };
        if let Some(f) = found
            && newest.as_ref().is_none_or(|n| f.0 > n.0)
        {
            newest = Some(f);
        }
    }
    newest
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
