"""The kernel tests and benchmark take the head dims from kdtree_verify.kernel.shapes and never write them.

tests/ext/fast/test_shapes.py checks the package and tests/ext (and the CUDA header against shapes.py);
this does the same for tests/kernel and bench/kernel_*.py. No torch needed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import ROOT
from kdtree_verify.kernel import shapes

FILES = sorted((ROOT / "tests" / "kernel").glob("*.py")) + sorted((ROOT / "bench").glob("kernel_*.py"))
DIMS = {shapes.HEAD_DIM_QK, shapes.HEAD_DIM_V}
DIM_IN_TEXT = re.compile(r"\b(" + "|".join(str(d) for d in sorted(DIMS)) + r")\b")


def written_dims(path: Path) -> list[str]:
    """Integer literals equal to a head dim, and strings naming one, as 'file:line: value'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
            continue
        value = node.value
        if (isinstance(value, int) and value in DIMS) or (
            isinstance(value, str) and DIM_IN_TEXT.search(value)
        ):
            found.append(f"{path.name}:{node.lineno}: {value!r}"[:160])
    return found


def test_the_scan_finds_a_written_dim(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        f'x = torch.empty((4, {shapes.HEAD_DIM_QK}))\nname = "out with {shapes.HEAD_DIM_V} dims"\n'
    )
    assert sorted(hit.split(":")[1] for hit in written_dims(probe)) == ["1", "2"]
    assert ROOT / "bench" / "kernel_cases.py" in FILES and Path(__file__) in FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_kernel_test_or_benchmark_writes_a_head_dim(path):
    assert written_dims(path) == []
