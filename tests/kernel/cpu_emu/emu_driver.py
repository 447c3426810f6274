"""Drive the CPU-emulated libkdtree_verify.so (tests/kernel/cpu_emu) with kernel_cases' CPU tensors.

The library has the CUDA library's C ABI; the binding loads it (`binding.load`: ABI and symbol checks,
capabilities) but refuses to run it (host memory without ``double=host``), so the calls are made here
with the binding's own mirror of the argument struct (`binding._Args`) after its `validate_args`, with
the split count chosen by the test (0: the library's own `kdtree_verify_num_splits` for `num_sms`) and
a workspace of exactly `kdtree_verify_workspace_bytes`.

- `build(out, fault=None, sanitize=None)`: tests/kernel/cpu_emu/build.sh into `out`.
- `EmuLibrary.run(case, out, ...)`: in this process (ctypes).
- `run_exact(emu_run, case, out, ...)`: in a child process (`emu_run`, the sanitizer builds), every
  buffer allocated at exactly its tensor's size.
"""

from __future__ import annotations

import ctypes
import logging
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from kdtree_verify.kernel import binding

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
BUILD_SH = HERE / "build.sh"
EMULATOR_INFO = "emulator=cpu"

POINTERS = (
    "q",
    "k_extend",
    "v_extend",
    "kv_buffer",
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "mask_indptr",
    "custom_mask",
    "out",
)


_STAND_IN = torch.zeros(1, dtype=torch.int64)


class EmulatorError(RuntimeError):
    """kdtree_verify_run failed; the emulator's message (a hard error) if it raised one."""


def build(
    out: Path,
    *,
    fault: str | None = None,
    sanitize: str | None = None,
    src: Path | None = None,
    lib_only: bool = False,
) -> Path:
    """g++-build the emulated library (and, unless lib_only, emu_run and conv_check) into `out`
    (tests/kernel/cpu_emu/build.sh)."""
    cmd = ["bash", str(BUILD_SH), "--out", str(out)]
    if fault:
        cmd += ["--fault", fault]
    if sanitize:
        cmd += ["--sanitize", sanitize]
    if src:
        cmd += ["--src", str(src)]
    if lib_only:
        cmd.append("--lib-only")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"cpu_emu build.sh failed:\n{proc.stdout}\n{proc.stderr}")
    log.debug("%s", proc.stdout.strip())
    return out / "libkdtree_verify.so"


@dataclass
class Call:
    """The host-side choices of one call: splits (0: the library's for `num_sms`), layout hint."""

    max_extend_len: int
    num_splits: int = 1
    num_sms: int = 132
    block_m: int = 0


def make_args(lib: Any, case: dict[str, Any], out: torch.Tensor, call: Call) -> tuple[binding._Args, int]:
    """(the kdtree_verify_args of `case`, the workspace bytes it needs); pointers are the tensors'."""
    binding.validate_args(
        torch,
        serves=binding.CUDA_LIBRARY_SERVES,
        **{k: case[k] for k in POINTERS if k != "out"},
        batch_size=case["batch_size"],
        max_extend_len=call.max_extend_len,
        out=out,
    )
    q, kv_buffer = case["q"], case["kv_buffer"]
    num_tokens, num_heads = int(q.shape[0]), int(q.shape[1])
    kv_dtype = binding.dtype_code(str(kv_buffer.dtype).replace("torch.", ""))
    splits = call.num_splits or int(
        lib.kdtree_verify_num_splits(
            call.num_sms,
            case["batch_size"],
            num_heads,
            call.max_extend_len,
            int(case["kv_indices"].numel()),
            kv_dtype,
        )
    )
    ws_bytes = int(
        lib.kdtree_verify_workspace_bytes(case["batch_size"], num_heads, call.max_extend_len, splits)
    )
    causal = case["custom_mask"] is None
    mask_indptr = case["mask_indptr"]
    args = binding._Args(
        struct_size=ctypes.sizeof(binding._Args),
        kv_dtype=kv_dtype,
        qo_indptr_i64=int(case["qo_indptr"].dtype == torch.int64),
        kv_indptr_i64=int(case["kv_indptr"].dtype == torch.int64),
        kv_indices_i64=int(case["kv_indices"].dtype == torch.int64),
        mask_indptr_i64=int(mask_indptr is not None and mask_indptr.dtype == torch.int64),
        q=q.data_ptr(),
        q_stride_t=q.stride(0),
        q_stride_h=q.stride(1),
        k_extend=case["k_extend"].data_ptr(),
        k_extend_stride_t=case["k_extend"].stride(0),
        v_extend=case["v_extend"].data_ptr(),
        v_extend_stride_t=case["v_extend"].stride(0),
        kv_buffer=kv_buffer.data_ptr(),
        kv_stride_t=kv_buffer.stride(0),
        qo_indptr=case["qo_indptr"].data_ptr(),
        kv_indptr=case["kv_indptr"].data_ptr(),
        # as the binding: an empty kv_indices (no request has a prefix key) has a null data pointer, which
        # the library refuses; a valid stand-in the kernel never reads
        kv_indices=case["kv_indices"].data_ptr() or _STAND_IN.data_ptr(),
        mask_indptr=None if causal else mask_indptr.data_ptr(),
        custom_mask=None if causal else case["custom_mask"].data_ptr(),
        out=out.data_ptr(),
        out_stride_t=out.stride(0),
        out_stride_h=out.stride(1),
        workspace=None,
        workspace_bytes=ws_bytes,
        batch_size=case["batch_size"],
        num_heads=num_heads,
        max_extend_len=call.max_extend_len,
        num_tokens=num_tokens,
        num_splits=splits,
        mask_mode=binding.MASK_CAUSAL if causal else binding.MASK_TREE,
        sm_scale=float(case["sm_scale"]),
        k_scale=float(case.get("k_scale", 1.0)),
        v_scale=float(case.get("v_scale", 1.0)),
        block_m=call.block_m,
        io_dtype=binding.DTYPE_BF16,
        call_counter=None,
    )
    return args, ws_bytes


class EmuLibrary:
    """The emulated library loaded through the binding (ABI, symbols, capabilities), run in-process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.vk = binding.load(str(path))
        self.lib = self.vk.lib
        self.lib.kdtree_cpu_emu_last_error.restype = ctypes.c_char_p
        self.lib.kdtree_cpu_emu_last_error.argtypes = []

    @property
    def build_info(self) -> list[str]:
        return self.vk.meta["build_info"].split()

    def run(self, case: dict[str, Any], out: torch.Tensor, call: Call) -> int:
        """One kdtree_verify_run; returns the call counter (1: one launch). Raises EmulatorError."""
        args, ws_bytes = make_args(self.lib, case, out, call)
        workspace = torch.full((max(ws_bytes, 1),), 0xFF, dtype=torch.uint8)  # NaN bytes
        counter = torch.zeros(1, dtype=torch.int64)
        args.workspace = workspace.data_ptr() if ws_bytes else None
        args.call_counter = counter.data_ptr()
        code = int(self.lib.kdtree_verify_run(ctypes.byref(args), None))
        if code != 0:
            message = (self.lib.kdtree_cpu_emu_last_error() or b"").decode()
            raise EmulatorError(f"kdtree_verify_run returned {code}: {message or 'no emulator error'}")
        return int(counter[0])


def _raw(t: torch.Tensor) -> bytes:
    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def run_exact(
    emu_run: Path,
    lib: Any,
    case: dict[str, Any],
    out: torch.Tensor,
    call: Call,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run the case in a child `emu_run` (buffers of exactly the tensors' sizes); `out` receives the
    result when the child succeeds. Returns the finished process (its stderr has any sanitizer report)."""
    args, ws_bytes = make_args(lib, case, out, call)
    with tempfile.TemporaryDirectory(prefix="kdtree-emu-") as tmp:
        d = Path(tmp)
        for name in POINTERS:
            t = out if name == "out" else case[name]
            if t is not None and not (name == "mask_indptr" and case["custom_mask"] is None):
                (d / f"{name}.bin").write_bytes(_raw(t))
        scalars = {name: getattr(args, name) for name, _ in binding._Args._fields_ if name not in POINTERS}
        scalars["workspace_bytes"] = ws_bytes
        lines = [f"{k} {v!r}" for k, v in scalars.items() if k not in ("workspace", "call_counter")]
        (d / "args.txt").write_text("\n".join(lines) + "\n")
        proc = subprocess.run(
            [str(emu_run), str(d)], capture_output=True, text=True, check=False, env=env, timeout=600
        )
        if proc.returncode == 0:
            got = torch.frombuffer(bytearray((d / "out.bin").read_bytes()), dtype=out.dtype).view(out.shape)
            out.copy_(got)
        return proc
