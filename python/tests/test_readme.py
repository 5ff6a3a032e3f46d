"""The README's examples that stand alone (those starting with an import)
run as written."""

import pathlib
import re

import pytest

from conftest import require_module

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = [
    block
    for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    if block.startswith("import ")
]


def test_the_readme_has_runnable_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[b.splitlines()[0] for b in BLOCKS])
def test_a_readme_example_runs(block):
    if "numpy" in block:
        require_module("numpy")
    exec(compile(block, str(README), "exec"), {})
