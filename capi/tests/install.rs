//! `install.sh` lays out headers, both libraries, `nodeipc.pc` and the CMake
//! package config under a prefix, and a C program builds from pkg-config's
//! flags alone, against the static library and against the shared one.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, skip};

fn pkg_config(prefix: &Path, args: &[&str]) -> Option<Vec<String>> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("nodeipc")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output();
    match out {
        Ok(o) => {
            assert!(
                o.status.success(),
                "pkg-config {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect(),
            )
        }
        Err(e) => {
            skip(
                "installed_library_builds_with_pkg_config",
                &format!("no pkg-config: {e}"),
            );
            None
        }
    }
}

fn build_and_run(dir: &TempDir, name: &str, flags: &[String], env: &[(&str, String)]) {
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .arg("-o")
        .arg(&exe)
        .arg(common::crate_dir().join("tests/c/hello.c"))
        .args(flags)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "{cc} {flags:?}: {status}");
    let out = Command::new(&exe)
        .envs(env.iter().cloned())
        .output()
        .expect("run the program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("says hi"),
        "{name}: {stdout}"
    );
}

#[test]
fn installed_library_builds_with_pkg_config() {
    let _dog = Watchdog::new(
        "installed_library_builds_with_pkg_config",
        Duration::from_secs(60),
    );
    let lib = common::static_lib();
    let profile_dir = lib.parent().expect("profile dir");
    let (target, profile) = (
        profile_dir.parent().expect("target dir"),
        profile_dir
            .file_name()
            .expect("profile")
            .to_string_lossy()
            .into_owned(),
    );
    let dir = TempDir::new("capi-install");
    let prefix = dir.join("prefix");
    let out = Command::new(common::crate_dir().join("install.sh"))
        .arg("--prefix")
        .arg(&prefix)
        .args(["--profile", &profile, "--target-dir"])
        .arg(target)
        .output()
        .expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in [
        "include/nodeipc.h",
        "include/nodeipc.hpp",
        "include/nodeipc/kittens_broker.hpp",
        "lib/libnodeipc.a",
        "lib/libnodeipc.so",
        "lib/pkgconfig/nodeipc.pc",
        "lib/cmake/nodeipc/nodeipc-config.cmake",
        "lib/cmake/nodeipc/nodeipc-config-version.cmake",
    ] {
        assert!(prefix.join(file).is_file(), "{file} not installed");
    }
    let Some(static_flags) = pkg_config(&prefix, &["--cflags", "--libs", "--static"]) else {
        return;
    };
    // Static: link the archive itself (the linker prefers the .so for -lnodeipc).
    let archive: Vec<String> = static_flags
        .iter()
        .map(|f| match f.as_str() {
            "-lnodeipc" => prefix.join("lib/libnodeipc.a").display().to_string(),
            other => other.to_owned(),
        })
        .collect();
    build_and_run(&dir, "hello-static", &archive, &[]);
    let shared = pkg_config(&prefix, &["--cflags", "--libs"]).expect("pkg-config ran above");
    build_and_run(
        &dir,
        "hello-shared",
        &shared,
        &[("LD_LIBRARY_PATH", prefix.join("lib").display().to_string())],
    );
}
