"""Protocol buffer classes of handshake.proto (package nodeipc.handshake.v1)."""

from ._build import build

build("handshake.proto", globals())
