"""The documents hold to the tree (called by docs.sh, which says what and why).

1. Every crate folder of the workspace (`cargo metadata --no-deps`, relative
   to the root) has a row of its own in docs/DESIGN.md's tables and in the
   README's crate table: the row's first cell names it as `FOLDER/`.
2. Every test SECURITY.md's "shown by" column names exists: the Rust ones in
   what the workspace's test binaries list (`cargo test --workspace --lib --bins --tests -- --list`,
   read binary by binary so each name is tied to its crate; the loom models
   from the `--cfg loom` build .ci/steps/queue.sh makes), the Python ones in
   `pytest --collect-only -q`. A name this script cannot place fails too.

Exit 1 naming each miss.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI = os.environ.get("CI") == "true"
failures: list[str] = []


def crate_dirs() -> dict[str, str]:
    """Crate folder (relative to the root) -> package name."""
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    dirs = {}
    for package in json.loads(out)["packages"]:
        folder = Path(package["manifest_path"]).parent.relative_to(ROOT).as_posix()
        dirs[folder] = package["name"]
    return dirs


def first_cells(text: str, section: str | None) -> list[str]:
    """First cells of the table rows of `text` (within `## section` if given)."""
    if section is not None:
        match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        if match is None:
            failures.append(f"no section '## {section}'")
            return []
        text = match.group(1)
    cells = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells.append(line.split("|")[1])
    return cells


def check_crates(dirs: dict[str, str]) -> None:
    places = {
        "docs/DESIGN.md": first_cells((ROOT / "docs/DESIGN.md").read_text(), None),
        "README.md (## Crates)": first_cells((ROOT / "README.md").read_text(), "Crates"),
    }
    for doc, cells in places.items():
        missing = [d for d in sorted(dirs) if not any(f"`{d}/`" in c for c in cells)]
        for d in missing:
            failures.append(f"{doc}: no table row for the crate folder `{d}/` ({dirs[d]})")
        print(f"{doc}: {len(dirs) - len(missing)} of {len(dirs)} crate folders have their row")


def test_lists(cargo_args: list[str], env: dict[str, str]) -> dict[tuple[str, str, str], set[str]]:
    """(crate folder, kind, target name) -> the names its test binary lists.

    `kind` is "unit" for a lib's or bin's own tests, "test" for tests/.
    Runs `cargo test ARGS -- --list` once and splits its output at cargo's
    "Running ... (EXECUTABLE)" lines; the build's JSON ties each executable
    to its crate and target."""
    build = subprocess.run(
        ["cargo", "test", "--locked", "--no-run", "--message-format=json", *cargo_args],
        cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    targets: dict[str, tuple[str, str, str]] = {}
    for line in build.splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        target = message["target"]
        folder = Path(message["manifest_path"]).parent.relative_to(ROOT).as_posix()
        kind = "test" if "test" in target["kind"] else "unit"
        targets[Path(message["executable"]).name] = (folder, kind, target["name"])
    listed = subprocess.run(
        ["cargo", "test", "--locked", *cargo_args, "--", "--list"],
        cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    ).stdout
    lists: dict[tuple[str, str, str], set[str]] = {key: set() for key in targets.values()}
    current = None
    for line in listed.splitlines():
        running = re.match(r"\s*Running .*\((?:.*/)?([^/()]+)\)$", line)
        if running:
            current = targets.get(running.group(1))
            if current is None:
                failures.append(f"cargo test ran {running.group(1)}, which its build did not name")
        elif re.match(r"\s*Doc-tests ", line):
            current = None
        elif current is not None and line.endswith(": test"):
            lists[current].add(line[: -len(": test")])
    return lists


def found(names: set[str], wanted: str) -> bool:
    """`wanted` is a test, or a module holding at least one."""
    return wanted in names or any(n.startswith(wanted + "::") for n in names)


def module_path(source: str) -> str:
    """src/a/b.rs -> a::b; src/a/mod.rs -> a; src/lib.rs, src/main.rs -> ''."""
    parts = source[: -len(".rs")].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "::".join(parts)


def security_names() -> list[str]:
    """Backticked words of the last column of SECURITY.md's claim tables."""
    names = []
    for line in (ROOT / "SECURITY.md").read_text().splitlines():
        if not line.startswith("| ") or line.startswith("| claim"):
            continue
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        names += re.findall(r"`([^`]+)`", cells[-1])
    return names


def check_security(dirs: dict[str, str]) -> None:
    env = dict(os.environ)
    # Doc tests are not named in SECURITY.md (and listing them compiles each).
    lists = test_lists(["--workspace", "--lib", "--bins", "--tests"], env)
    # The loom models exist only under --cfg loom: the build queue.sh makes.
    loom_env = dict(env, RUSTFLAGS="--cfg loom",
                    CARGO_TARGET_DIR=env.get("CARGO_TARGET_DIR", str(ROOT / "target")) + "/loom")
    loom = test_lists(["--release", "-p", "nodeipc-queue", "-p", "nodeipc-pool", "--lib"], loom_env)
    for key, names in loom.items():
        lists.setdefault(key, set()).update(names)
    print(f"test binaries listed: {len(lists)}, tests: {sum(len(n) for n in lists.values())}")

    aliases = {"it": "integration-tests"}
    python_names: list[str] = []
    checked = 0
    for name in security_names():
        if "/" not in name and "::" not in name:
            continue  # a fuzz target, an option, an error code: not a test
        if re.search(r"\.(sh|c|h|hpp|cpp|md|toml|proto)$", name):
            continue  # a script or source file the claim points at
        if name.startswith("python/"):
            python_names.append(name)
            continue
        head, _, rest = name.partition("/")
        # The longest crate folder the name starts with (capi/abi before capi).
        folder = None
        for d in sorted(dirs, key=len, reverse=True):
            if name == d or name.startswith(d + "/"):
                folder, rest = d, name[len(d) + 1 :]
                break
        if folder is None and head in aliases:
            folder = aliases[head]
        if folder is None or not rest:
            failures.append(f"SECURITY.md: `{name}` names no crate folder (CRATE/FILE::TEST)")
            continue
        checked += 1
        ok = False
        if rest.startswith("src/"):
            # A unit test: src/PATH.rs::TEST, TEST its path within that
            # file's module; src/PATH.rs alone: every test of the file.
            source, sep, test = rest.partition(".rs::")
            if not sep and not rest.endswith(".rs"):
                failures.append(f"SECURITY.md: `{name}` is not CRATE/src/PATH.rs::TEST")
                continue
            module = module_path(source.removesuffix(".rs")[len("src/") :] + ".rs")
            wanted = "::".join(p for p in (module, test) if p)
            ok = any(found(n, wanted) for (d, kind, _), n in lists.items()
                     if d == folder and kind == "unit")
        else:
            # An integration test: FILE::TEST, FILE under tests/ (its own
            # binary) or tests/it/ (a module of the crate's one binary).
            file, _, test = rest.partition("::")
            for (d, kind, target), n in lists.items():
                if d != folder or kind != "test":
                    continue
                if target == file and (n if not test else found(n, test)):
                    ok = True
                if found(n, rest):
                    ok = True
        if not ok:
            failures.append(f"SECURITY.md: no test `{name}` in the crate's test lists")
    print(f"SECURITY.md: {checked} Rust test names checked")
    check_python(python_names)


def check_python(names: list[str]) -> None:
    if not names:
        return
    python = os.environ.get("NODEIPC_DOCS_PYTHON")
    if not python:
        message = (f"SECURITY.md names {len(names)} Python tests: set NODEIPC_DOCS_PYTHON to a "
                   "python with pytest and nodeipc installed (CI: target/python-venv/bin/python)")
        if CI:
            failures.append(message)
        else:
            print(f"not checked: {message}")
        return
    if os.sep in python:
        # A path given relative to where we were started (CI passes
        # target/python-venv/bin/python); pytest runs from python/.
        python = os.path.abspath(python)
    collected = subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         str(ROOT / "python/tests")],
        cwd=ROOT / "python", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if collected.returncode != 0:
        print(collected.stdout[-3000:])
        failures.append(f"pytest --collect-only exited {collected.returncode} (its output above)")
    collected = collected.stdout
    ids = {"python/" + l for l in collected.splitlines() if l.startswith("tests/") and "::" in l}
    for name in names:
        if name not in ids and not any(i.startswith(name + "[") for i in ids):
            failures.append(f"SECURITY.md: no Python test `{name}` in pytest --collect-only")
    print(f"SECURITY.md: {len(names)} Python test names checked against {len(ids)} collected")


def main() -> int:
    dirs = crate_dirs()
    check_crates(dirs)
    check_security(dirs)
    for failure in failures:
        print(failure)
    if failures:
        print(f"{len(failures)} docs out of step with the tree")
        return 1
    print("docs match the tree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
