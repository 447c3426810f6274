"""The C header files/csrc/kdtree_verify.h owns the ABI constants; kernel.py mirrors
them (ABI version, enums, error codes, the args struct's layout) and must agree, field by field."""

from __future__ import annotations

import ctypes
import re
import subprocess

from conftest import CSRC
from kdtree_verify.kernel import binding as kernel

HEADER = CSRC / "kdtree_verify.h"


def _enum(name: str) -> dict[str, int]:
    """`NAME = <int or earlier NAME>` entries of `enum <name> { ... }` in the header."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"enum\s+" + name + r"\s*\{(.*?)\}", text, re.S)
    assert body, name
    values: dict[str, int] = {}
    for key, value in re.findall(r"(\w+)\s*=\s*(\w+)", body.group(1)):
        values[key] = int(value) if value.isdigit() else _ALL[value]
    _ALL.update(values)
    return values


_ALL: dict[str, int] = {}


def test_abi_version_is_the_headers():
    define = re.search(r"#define KDTREE_VERIFY_ABI_VERSION (\d+)", HEADER.read_text())
    assert define and int(define.group(1)) == kernel.ABI_VERSION == 6


def test_dtype_device_mask_and_status_enums_are_the_headers():
    dtypes = _enum("kdtree_dtype")
    assert dtypes == {
        "KDTREE_DTYPE_BF16": kernel.DTYPE_BF16,
        "KDTREE_DTYPE_FP8_E4M3": kernel.DTYPE_FP8_E4M3,
        "KDTREE_DTYPE_FP16": kernel.DTYPE_FP16,
        "KDTREE_DTYPE_FP32": kernel.DTYPE_FP32,
    }
    assert set(kernel.DTYPE_TORCH_NAMES) == set(dtypes.values())
    assert _enum("kdtree_kv_dtype") == {
        "KDTREE_KV_BF16": kernel.KV_BF16,
        "KDTREE_KV_FP8_E4M3": kernel.KV_FP8_E4M3,
    }
    devices = _enum("kdtree_device_kind")
    assert devices == {"KDTREE_DEVICE_CUDA": kernel.DEVICE_CUDA, "KDTREE_DEVICE_HOST": kernel.DEVICE_HOST}
    assert set(kernel.DEVICE_NAMES) == set(devices.values())
    assert _enum("kdtree_mask_mode") == {
        "KDTREE_MASK_TREE": kernel.MASK_TREE,
        "KDTREE_MASK_CAUSAL": kernel.MASK_CAUSAL,
    }
    assert set(_enum("kdtree_verify_status").values()) == set(kernel._ERR_NAMES)


def test_the_ctypes_args_struct_has_the_c_layout(tmp_path):
    fields = [name for name, _ in kernel._Args._fields_]
    src = tmp_path / "layout.c"
    src.write_text(
        '#include <stddef.h>\n#include <stdio.h>\n#include "kdtree_verify.h"\nint main(void) {\n'
        '  printf("sizeof %zu\\n", sizeof(kdtree_verify_args));\n'
        + "".join(f'  printf("{f} %zu\\n", offsetof(kdtree_verify_args, {f}));\n' for f in fields)
        + "  return 0;\n}\n"
    )
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-I", str(CSRC), str(src), "-o", str(exe)], check=True)
    c_layout = dict(
        line.split()
        for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    )
    py_layout = {name: str(getattr(kernel._Args, name).offset) for name in fields}
    py_layout["sizeof"] = str(ctypes.sizeof(kernel._Args))
    assert py_layout == c_layout
