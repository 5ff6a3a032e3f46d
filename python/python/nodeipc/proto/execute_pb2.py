"""Protocol buffer classes of execute.proto (package nodeipc.execute.v1)."""

from ._build import build

build("execute.proto", globals())
