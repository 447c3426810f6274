"""The absorbed-MLA head dims live in kdtree_verify.kernel.shapes only: the C header agrees with it, and no
other Python file of the package or of tests/ext writes the numbers itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from extlib import EXT_DIR, ROOT
from kdtree_verify.kernel import shapes

HEADER = ROOT / "files" / "csrc" / "kdtree_verify.h"
SHAPES_PY = EXT_DIR / "kdtree_verify" / "kernel" / "shapes.py"


def header_defines(path: Path) -> dict[str, int]:
    """`#define NAME <integer>` lines of a C header."""
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^\s*#\s*define\s+(\w+)\s+(\d+)\b", path.read_text(), re.M)
    }


def test_the_cuda_header_head_dims_equal_the_python_shapes():
    defines = header_defines(HEADER)
    assert defines["KDTREE_HEAD_DIM"] == shapes.HEAD_DIM_QK
    assert defines["KDTREE_V_DIM"] == shapes.HEAD_DIM_V


def test_the_python_shapes_are_latent_plus_rope_with_v_the_latent_part():
    assert shapes.HEAD_DIM_QK == shapes.KV_LORA_RANK + shapes.QK_ROPE_HEAD_DIM
    assert shapes.HEAD_DIM_V == shapes.KV_LORA_RANK


def written_head_dims(path: Path) -> list[str]:
    """Integer literals equal to a head dim, and strings naming one, in a Python file."""
    dims = {shapes.HEAD_DIM_QK, shapes.HEAD_DIM_V}
    pattern = re.compile(r"\b(" + "|".join(str(d) for d in sorted(dims)) + r")\b")
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Constant):
            continue
        value = node.value
        if (isinstance(value, int) and not isinstance(value, bool) and value in dims) or (
            isinstance(value, str) and pattern.search(value)
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {value!r}"[:160])
    return found


def test_no_python_file_of_the_package_or_tests_ext_writes_the_head_dims_but_shapes_py():
    files = sorted(EXT_DIR.rglob("*.py")) + sorted((ROOT / "tests" / "ext").rglob("*.py"))
    assert SHAPES_PY in files and written_head_dims(SHAPES_PY)  # the scan sees the one definition
    found = [hit for path in files if path != SHAPES_PY for hit in written_head_dims(path)]
    assert not found, found
