//! `install.sh` lays out headers, both libraries, `nodeipc.pc` and the CMake
//! package config under a prefix, and a C program builds from pkg-config's
//! flags alone and from `find_package(nodeipc)`, against the static library
//! and against the shared one.

mod common;

use std::path::{Path, PathBuf};
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

/// Runs install.sh into `dir/prefix` for this test run's profile.
fn install(dir: &TempDir) -> PathBuf {
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
    prefix
}

#[test]
fn installed_library_builds_with_pkg_config() {
    let _dog = Watchdog::new(
        "installed_library_builds_with_pkg_config",
        Duration::from_secs(60),
    );
    let dir = TempDir::new("capi-install");
    let prefix = install(&dir);
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

#[test]
fn installed_library_builds_with_cmake_find_package() {
    let _dog = Watchdog::new(
        "installed_library_builds_with_cmake",
        Duration::from_secs(120),
    );
    let dir = TempDir::new("capi-cmake");
    let prefix = install(&dir);
    let project = dir.join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::copy(
        common::crate_dir().join("tests/c/hello.c"),
        project.join("hello.c"),
    )
    .unwrap();
    std::fs::write(
        project.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.16)\n\
         project(hello C)\n\
         find_package(nodeipc 0.1 REQUIRED)\n\
         add_executable(hello_static hello.c)\n\
         target_link_libraries(hello_static PRIVATE nodeipc::nodeipc)\n\
         add_executable(hello_shared hello.c)\n\
         target_link_libraries(hello_shared PRIVATE nodeipc::shared)\n",
    )
    .unwrap();
    let build = dir.join("build");
    let configure = Command::new("cmake")
        .arg("-S")
        .arg(&project)
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .output();
    let configure = match configure {
        Ok(o) => o,
        Err(e) => {
            skip(
                "installed_library_builds_with_cmake_find_package",
                &format!("no cmake: {e}"),
            );
            return;
        }
    };
    assert!(
        configure.status.success(),
        "cmake: {}",
        String::from_utf8_lossy(&configure.stderr)
    );
    let built = Command::new("cmake")
        .arg("--build")
        .arg(&build)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "cmake --build: {}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    for exe in ["hello_static", "hello_shared"] {
        let out = Command::new(build.join(exe))
            .env("LD_LIBRARY_PATH", prefix.join("lib"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("says hi"),
            "{exe}: {stdout}"
        );
    }
}
