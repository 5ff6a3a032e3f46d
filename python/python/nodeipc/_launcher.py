"""The ``nodeipc`` command a wheel installs: it becomes the native program.

A wheel carries the native ``nodeipc`` program (the launcher, the monitor,
the demo, ``ls``/``clean``) as ``nodeipc/_bin/nodeipc``. The console script
``nodeipc`` runs :func:`main`, which replaces this Python process with that
program through ``execv``: same process id, same terminal, same exit
status, and nothing of Python left in it (no SIGINT handler, no interpreter
threads). The launcher never runs inside the Python process, where it could
not own its signal mask, its children or the subreaper setting.
``python -m nodeipc`` does the same.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys
from typing import NoReturn

# A source install (`pip install ./python`) builds only the extension module:
# the program is put here by the wheel's build (python/build-wheel.sh).
PROGRAM = pathlib.Path(__file__).resolve().parent / "_bin" / "nodeipc"

# Python sets these to "ignored" at start-up, and an ignored disposition
# survives exec: left so, the launcher and every rank it starts would ignore
# them. `subprocess` restores the same two for its children.
_RESTORED_SIGNALS = ("SIGPIPE", "SIGXFSZ")


def main() -> NoReturn:
    """Replaces this process with the native ``nodeipc``, passing the
    arguments on; returns only by exiting (127: the program is not in this
    installation, 126: it could not be run)."""
    path = PROGRAM
    if not (path.is_file() and os.access(path, os.X_OK)):
        sys.stderr.write(
            f"nodeipc: the native program is not in this installation ({path} is missing):"
            " a source install builds only the Python extension. Install a wheel built by"
            " python/build-wheel.sh (see the package's README), or build the program with"
            " `cargo build --release -p nodeipc-cli`.\n"
        )
        sys.exit(127)
    for name in _RESTORED_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # argv[0] "nodeipc": the program names itself from it in its usage
        # lines (`python -m nodeipc` would otherwise show "__main__.py").
        os.execv(path, ["nodeipc", *sys.argv[1:]])
    except OSError as error:
        sys.stderr.write(f"nodeipc: cannot run {path}: {error}\n")
        sys.exit(126)
