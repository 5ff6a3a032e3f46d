"""Builds a ``*_pb2`` module's classes from the file descriptor the
extension module carries (compiled from the crate's ``.proto`` files at
build time), as the modules ``protoc --python_out`` writes do."""

from typing import Any, Dict

# protobuf ships no type information (types-protobuf has it).
from google.protobuf import descriptor_pool as _descriptor_pool  # type: ignore[import-untyped, unused-ignore]
from google.protobuf.internal import builder as _builder  # type: ignore[import-untyped, unused-ignore]

from .. import _native


def build(proto: str, namespace: Dict[str, Any]) -> None:
    """Fills ``namespace`` (a module's globals) with ``DESCRIPTOR`` and the
    message and enum classes of ``proto``."""
    descriptor = _descriptor_pool.Default().AddSerializedFile(_native.FILE_DESCRIPTORS[proto])
    namespace["DESCRIPTOR"] = descriptor
    _builder.BuildMessageAndEnumDescriptors(descriptor, namespace)
    _builder.BuildTopDescriptorsAndMessages(descriptor, namespace["__name__"], namespace)
