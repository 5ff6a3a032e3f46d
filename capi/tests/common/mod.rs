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

/// The static library next to this test's executable: `target/<profile>/`.
pub(crate) fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let lib = profile_dir.join("libnodeipc.a");
    assert!(
        lib.exists(),
        "{} is missing: cargo builds it with the tests (crate-type staticlib)",
        lib.display()
    );
    lib
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
    let is_c = source.ends_with(".c");
    let (var, default, std) = if is_c {
        ("CC", "cc", "-std=c11")
    } else {
        ("CXX", "g++", "-std=c++17")
    };
    let compiler = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    let out = dir.join(source.split('.').next().expect("a file name"));
    let include = crate_dir().join("include");
    let output = Command::new(&compiler)
        .arg(std)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg("-I")
        .arg(&include)
        .arg(src)
        .arg(static_lib())
        .args(LINK_LIBS)
        .output();
    match output {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!(
            "{compiler} failed to compile {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            nodeipc_testkit::skip(source, &format!("no compiler ({compiler}: {e})"));
            None
        }
    }
}
