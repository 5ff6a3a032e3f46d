//! What `nodeipc` prints for people and for programs: `ls`/`clean --json`
//! (one object a line, stable fields), sizes and owners in words, shell
//! completions and manual pages, the exit statuses in `--help`, and usage
//! errors that keep clap's suggestion.

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nodeipc_testkit::{Watchdog, shm_leftovers, spawn_child, unique_name};
use serde_json::Value;

fn nodeipc(args: &[&str]) -> Output {
    spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(30))
}

fn ok(args: &[&str]) -> String {
    let out = nodeipc(args);
    assert!(
        out.status.success(),
        "{args:?}: exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// A uid no passwd entry names.
const NAMELESS_UID: u32 = 4_242_424;

/// Removes the test's objects however the test ends.
struct Objects(String);

impl Drop for Objects {
    fn drop(&mut self) {
        for name in shm_leftovers(&self.0) {
            let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
        }
    }
}

#[test]
fn ls_json_has_one_object_a_line_with_stable_fields_and_owners_by_name() {
    let _dog = Watchdog::new("ls json", Duration::from_secs(60));
    let prefix = unique_name("cli-lsjson");
    let _cleanup = Objects(prefix.clone());
    let region = format!("{prefix}-region");
    let foreign = format!("{prefix}-foreign");
    let sem = format!("{prefix}-sem");
    ok(&["shm", "create", &region, "--size", "1536"]);
    ok(&["shm", "create", &foreign, "--size", "3145728"]);
    ok(&["sem", "create", &sem]);
    std::os::unix::fs::chown(
        format!("/dev/shm{foreign}"),
        Some(NAMELESS_UID),
        Some(NAMELESS_UID),
    )
    .unwrap();
    let me = std::fs::metadata(format!("/dev/shm{region}"))
        .unwrap()
        .uid();

    let rows = json_lines(&ok(&["ls", "--json", "--prefix", &prefix]));
    assert_eq!(rows.len(), 3, "{rows:?}");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {rows:?}"))
    };
    let r = row(&region);
    let fields: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected = [
        "kind", "name", "size", "mode", "uid", "owner", "users", "unseen", "detail",
    ];
    expected.sort_unstable();
    assert_eq!(fields, expected, "{r}");
    assert_eq!(r["kind"], "region");
    assert_eq!(r["size"], 1536, "JSON sizes are bytes");
    assert_eq!(r["uid"], me);
    assert_eq!(r["users"], serde_json::json!([]));
    assert_eq!(r["unseen"], false);
    assert_eq!(
        r["detail"],
        serde_json::Value::Null,
        "a plain region has no detail"
    );
    assert!(r["mode"].as_str().unwrap().starts_with('0'), "{r}");
    if me == 0 {
        assert_eq!(r["owner"], "root");
    }
    let f = row(&foreign);
    assert_eq!(f["uid"], NAMELESS_UID);
    assert_eq!(f["owner"], NAMELESS_UID.to_string(), "no name: the number");
    assert_eq!(row(&sem)["kind"], "semaphore");

    // The table: sizes in binary units unless --bytes, owners by name.
    let table = ok(&["ls", "--prefix", &prefix]);
    let line = |table: &str, name: &str| {
        table
            .lines()
            .find(|l| l.ends_with(name))
            .unwrap_or_else(|| panic!("{name} not in:\n{table}"))
            .to_owned()
    };
    assert!(line(&table, &region).contains(" 1.5 KiB "), "{table}");
    assert!(line(&table, &foreign).contains(" 3.0 MiB "), "{table}");
    assert!(
        line(&table, &foreign).contains(&format!(" {NAMELESS_UID} ")),
        "{table}"
    );
    if me == 0 {
        assert!(line(&table, &region).contains(" root "), "{table}");
    }
    let raw = ok(&["ls", "--bytes", "--prefix", &prefix]);
    assert!(line(&raw, &region).contains(" 1536 "), "{raw}");
    assert!(line(&raw, &foreign).contains(" 3145728 "), "{raw}");
}

#[test]
fn clean_json_says_what_it_did_with_each_object_and_no_summary() {
    let _dog = Watchdog::new("clean json", Duration::from_secs(60));
    let prefix = unique_name("cli-cleanjson");
    let _cleanup = Objects(prefix.clone());
    let stale = format!("{prefix}-stale");
    let live = format!("{prefix}-live");
    ok(&["shm", "create", &stale, "--size", "4096"]);
    let _held = nodeipc_shm::Region::create(&live, 4096).unwrap();

    for (args, action) in [
        (&["--dry-run", "--json"][..], "would_remove"),
        (&["--json"][..], "removed"),
    ] {
        let out = ok(&[&["clean", "--prefix", &prefix][..], args].concat());
        let rows = json_lines(&out);
        assert_eq!(rows.len(), 2, "one line an object, no summary: {out}");
        let gone = rows.iter().find(|r| r["name"] == stale.as_str()).unwrap();
        assert_eq!(gone["action"], action, "{gone}");
        assert_eq!(gone["kind"], "region");
        assert_eq!(gone["reason"], Value::Null);
        let kept = rows.iter().find(|r| r["name"] == live.as_str()).unwrap();
        assert_eq!(kept["action"], "kept", "{kept}");
        let reason = kept["reason"].as_str().unwrap();
        assert!(reason.contains(&std::process::id().to_string()), "{reason}");
    }
    assert_eq!(
        shm_leftovers(&prefix),
        vec![live[1..].to_owned()],
        "clean --json removed what it said, kept the rest"
    );
}

#[test]
fn completions_for_bash_zsh_and_fish_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let script = ok(&["completions", shell]);
        // fish spells a long option `-l prefix`.
        for word in ["nodeipc", "clean", "monitor", "status", "prefix", "json"] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
        assert!(!script.contains("demo-worker"), "{shell}: a hidden command");
    }
    let out = nodeipc(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn man_prints_a_roff_page_or_writes_one_per_subcommand() {
    let page = ok(&["man"]);
    assert!(page.contains(".TH nodeipc 1"), "{page}");
    assert!(page.contains("Exit status"), "the exit statuses are in it");
    let dir = nodeipc_testkit::TempDir::new("cli-man");
    ok(&["man", "--dir", dir.path().to_str().unwrap()]);
    for page in ["nodeipc.1", "nodeipc-ls.1", "nodeipc-monitor-status.1"] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
    }
    assert!(!dir.join("nodeipc-demo-worker.1").exists());
    let out = nodeipc(&["man", "--dir", "/nonexistent-nodeipc-man"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent-nodeipc-man") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// `man --dir D` where another user may write D: a symlink planted at a
/// page's name (to a file of ours, say one of root's) is refused naming the
/// page and the link's owner, and the file it points at is untouched; a
/// FIFO planted there is refused at once, not written into (which would
/// block until a reader came); another user's file is not replaced.
#[test]
fn regression_man_never_writes_through_what_is_planted_in_its_directory() {
    use std::os::unix::fs::PermissionsExt;
    let _dog = Watchdog::new("man planted", Duration::from_secs(60));
    let dir = nodeipc_testkit::TempDir::new("cli-man-planted");
    // Anyone may plant a file in it, as in a shared directory.
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o1777)).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    let page = dir.join("nodeipc-ls.1");
    std::os::unix::fs::symlink(&victim, &page).unwrap();
    let planter = if nodeipc_testkit::is_root() {
        rustix::fs::chownat(
            rustix::fs::CWD,
            &page,
            Some(rustix::process::Uid::from_raw(nodeipc_testkit::NOBODY.0)),
            None,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
        nodeipc_testkit::NOBODY.0
    } else {
        rustix::process::geteuid().as_raw()
    };
    let refused = |what: &str| {
        let out = nodeipc(&["man", "--dir", dir.path().to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
        assert!(
            stderr.contains(page.to_str().unwrap()) && stderr.contains(what),
            "{what}: {stderr}"
        );
        stderr
    };
    let stderr = refused("found a symlink");
    assert!(stderr.contains(&format!("owner uid {planter}")), "{stderr}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
    std::fs::remove_file(&page).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &page,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
    refused("found a FIFO");
    std::fs::remove_file(&page).unwrap();
    if nodeipc_testkit::is_root() {
        std::fs::write(&page, b"theirs\n").unwrap();
        let (uid, gid) = nodeipc_testkit::NOBODY;
        std::os::unix::fs::chown(&page, Some(uid), Some(gid)).unwrap();
        let stderr = refused(&format!("owner uid {uid}"));
        assert!(stderr.contains("refusing"), "{stderr}");
        assert_eq!(std::fs::read(&page).unwrap(), b"theirs\n");
        std::fs::remove_file(&page).unwrap();
    }
    // Our own page from an earlier run is replaced.
    ok(&["man", "--dir", dir.path().to_str().unwrap()]);
    ok(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(std::fs::read_to_string(&page).unwrap().contains(".TH"));
}

/// The one line a failing command prints escapes the control characters
/// of what it quotes (a path, a peer's or a monitor's words, a value from
/// etcd): it stays one line and sends the terminal nothing (regression:
/// quoted text went to stderr raw).
#[test]
fn regression_an_error_line_quoting_outside_text_stays_one_line() {
    let dir = "/nonexistent-nodeipc\nnodeipc: all good\u{1b}[2J";
    let out = nodeipc(&["man", "--dir", dir]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(
        stderr.contains("/nonexistent-nodeipc\\nnodeipc: all good\\u{1b}[2J"),
        "{stderr:?}"
    );
}

#[test]
fn help_lists_the_exit_statuses() {
    let help = ok(&["--help"]);
    for line in ["Exit status:", "0 ", "1 ", "2 ", "3 ", "128+N"] {
        assert!(help.contains(line), "{line:?} missing from:\n{help}");
    }
}

#[test]
fn usage_errors_exit_2_on_one_line_with_clap_suggestion() {
    for (args, said) in [
        (&["lss"][..], "a similar subcommand exists: 'ls'"),
        (&["ls", "--jsn"][..], "a similar argument exists: '--json'"),
        (
            &["demo", "--sems", "inregion"][..],
            "a similar value exists: 'in-region'",
        ),
        (&["sem", "wait"][..], "not provided: <NAME>"),
        // Each value in range, together too big: a usage error as well.
        (
            &["demo", "--payload", "67108864", "--depth", "64"][..],
            "at most 268435456 (256 MiB)",
        ),
    ] {
        let out = nodeipc(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr:?}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
        assert!(stderr.ends_with("(see --help)\n"), "{stderr}");
    }
}

/// `shell args…`, output captured; `None` when the shell is not on PATH.
fn in_shell(shell: &str, args: &[&str]) -> Option<Output> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|dir| dir.join(shell).is_file())?;
    Some(
        spawn_child(
            Command::new(shell)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .output_timeout(Duration::from_secs(30)),
    )
}

#[test]
fn completion_scripts_complete_in_their_shells() {
    const TEST: &str = "completion_scripts_complete_in_their_shells";
    let _dog = Watchdog::new(TEST, Duration::from_secs(90));
    let dir = nodeipc_testkit::TempDir::new("cli-completions");
    let script = |shell: &str| {
        let path = dir.path().join(format!("nodeipc.{shell}"));
        std::fs::write(&path, ok(&["completions", shell])).unwrap();
        path.to_str().unwrap().to_owned()
    };
    // bash: the completion function offers the subcommand and the option.
    let bash = script("bash");
    let out = in_shell(
        "bash",
        &[
            "-c",
            "source \"$0\"; \
             COMP_WORDS=(nodeipc mon); COMP_CWORD=1; _nodeipc nodeipc mon nodeipc; \
             printf '%s\\n' \"${COMPREPLY[@]}\"; \
             COMP_WORDS=(nodeipc ls --j); COMP_CWORD=2; _nodeipc nodeipc --j ls; \
             printf '%s\\n' \"${COMPREPLY[@]}\"",
            &bash,
        ],
    )
    .expect("bash is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "monitor\n--json\n");
    // fish: `complete -C` asks it as a user's tab would.
    let fish = script("fish");
    let asked =
        "source $argv[1]; complete -C 'nodeipc mon'; complete -C 'nodeipc monitor status --j'";
    match in_shell("fish", &["-c", asked, &fish]) {
        None => {
            nodeipc_testkit::skip(TEST, "fish is not installed");
        }
        Some(out) => {
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(said.starts_with("monitor\t"), "{said}");
            assert!(said.contains("\n--json\t"), "{said}");
        }
    }
    // zsh: the script parses (completing needs an interactive compinit).
    let zsh = script("zsh");
    match in_shell("zsh", &["-n", &zsh]) {
        None => {
            nodeipc_testkit::skip(TEST, "zsh is not installed");
        }
        Some(out) => assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}
