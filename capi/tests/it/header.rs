//! The checked-in `include/nodeipc.h` is what cbindgen makes of the sources
//! now: a C program never compiles against a stale header.
//! `NODEIPC_BLESS=1 cargo test -p nodeipc-capi --test it header::` rewrites it.
//! And every header under `include/` compiles alone, as the first include
//! of a translation unit (twice: its guard holds).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use nodeipc_testkit::TempDir;

#[test]
fn checked_in_header_matches_a_fresh_generation() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("read capi/cbindgen.toml");
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir.join("abi"))
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut fresh);
    let path = crate_dir.join("include/nodeipc.h");
    if std::env::var_os("NODEIPC_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/nodeipc.h");
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "capi/include/nodeipc.h is stale: regenerate it with \
         NODEIPC_BLESS=1 cargo test -p nodeipc-capi --test it header::"
    );
}

/// Every file under `include/`, as a path relative to it.
fn headers(dir: &Path, under: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read include/").flatten() {
        let path = entry.path();
        if path.is_dir() {
            headers(&path, under, out);
        } else {
            out.push(path.strip_prefix(under).unwrap().to_path_buf());
        }
    }
}

#[test]
fn every_header_compiles_alone() {
    let include = common::crate_dir().join("include");
    let mut all = Vec::new();
    headers(&include, &include, &mut all);
    all.sort();
    assert!(all.len() >= 4, "{all:?}");
    let dir = TempDir::new("capi-headers");
    for header in &all {
        let name = header.to_str().expect("a UTF-8 header path");
        // nodeipc.h is C and C++; the .hpp files C++ only.
        let sources: &[&str] = match name.ends_with(".h") {
            true => &["alone.c", "alone.cpp"],
            false => &["alone.cpp"],
        };
        for source in sources {
            let tu = dir.join(source);
            std::fs::write(
                &tu,
                format!(
                    "#include \"{name}\"\n#include \"{name}\"\nint main(void) {{ return 0; }}\n"
                ),
            )
            .unwrap();
            let (compiler, std) = common::compiler_for(source);
            let mut command = Command::new(compiler);
            command
                .args([
                    std,
                    "-fsyntax-only",
                    "-Wall",
                    "-Wextra",
                    "-Wpedantic",
                    "-Werror",
                    "-I",
                ])
                .arg(&include)
                .arg(&tu);
            if !common::run_compiler(&mut command, &format!("{name} alone ({source})")) {
                return;
            }
        }
    }
}
