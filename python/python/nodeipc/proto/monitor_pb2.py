"""Protocol buffer classes of monitor.proto (package nodeipc.monitor.v1)."""

from ._build import build

build("monitor.proto", globals())
