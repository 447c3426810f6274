"""ctypes binding of libkdtree_verify.so (the CUDA verify-attention kernel).

The library is plain C ABI (see files/csrc/kdtree_verify.h, the one owner of the
ABI constants mirrored below; tests/kernel/test_abi_constants.py keeps them equal): it needs only the
CUDA runtime, never torch's C++ ABI, so a torch upgrade does not require a rebuild.

The library says what it serves (``kdtree_verify_capabilities``, since ABI 3): the dtypes of q/k/v/out and
of the KV cache, and where its data lives. The real library serves bf16 on CUDA; the host test double
(tests/doubles/hostlib) serves fp32 in host memory and is accepted for a CPU device only because it
declares both ``KDTREE_DEVICE_HOST`` and ``double=host`` in its build info.

- ``probe_library(path)`` works without torch: dlopen + ABI symbol check.
- ``load(path)`` imports torch and returns a ``VerifyKernel`` whose ``run`` launches on torch's
  current stream, never synchronises with the host and never allocates while a CUDA graph is
  being captured (the workspace is sized from maxima and only grown outside capture). The workspace
  is one per device, so one call may be in flight per device: SGLang runs a device's attention on one
  stream at a time; verify calls overlapped on two streams would share the split partials.
- Every run that launches work bumps a per-device uint64 call counter (ABI 4, ``call_counter``):
  a one-element tensor per device, allocated with the workspace (outside capture), whose pointer a
  captured graph bakes in, so replays count too. ``VerifyKernel.device_calls()`` reads it without
  synchronising the forward stream (docs/CONTRACTS.md section 3b, ``kernel_calls_device``).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V

log = logging.getLogger(__name__)

ABI_VERSION = 6  # KDTREE_VERIFY_ABI_VERSION

# Error codes of kdtree_verify_run (mirror of kdtree_verify.h).
_ERR_NAMES = {
    0: "ok",
    1: "bad argument",
    2: "workspace too small",
    3: "CUDA launch error",
    4: "device lacks the shared memory this kernel needs",
    5: "struct size mismatch (binding and library disagree)",
}


_LAUNCH_SYMBOLS = (
    "kdtree_verify_capabilities",
    "kdtree_verify_run",
    "kdtree_verify_prepare",
    "kdtree_verify_num_splits",
    "kdtree_verify_min_split_tiles",
    "kdtree_verify_workspace_bytes",
    "kdtree_verify_max_workspace_bytes",
    "kdtree_verify_partition",
)


@dataclass(frozen=True)
class Partition:
    """A call's work plan (kdtree_verify_partition, ABI 6): unit u (of num_splits) processes
    unit_tiles[u] key tiles of block_n keys in each of its m_blocks CTAs, visiting unit_segments[u]
    requests; a unit's chunk is at least min_unit_tiles."""

    total_tiles: int
    unit_tiles: list[int]
    unit_segments: list[int]
    min_unit_tiles: int  # the fewest tiles of a unit's chunk (KDTREE_MIN_SPLIT_TILES in the layout's tiles)
    block_n: int
    m_blocks: int


class KernelUnavailable(Exception):
    """The library cannot be used; ``str(exc)`` is a one-line reason."""


class _Args(ctypes.Structure):
    """Mirror of ``kdtree_verify_args`` in files/csrc/kdtree_verify.h (ABI_VERSION 6)."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int32),
        ("qo_indptr_i64", ctypes.c_int32),
        ("kv_indptr_i64", ctypes.c_int32),
        ("kv_indices_i64", ctypes.c_int32),
        ("mask_indptr_i64", ctypes.c_int32),
        ("q", ctypes.c_void_p),
        ("q_stride_t", ctypes.c_int64),
        ("q_stride_h", ctypes.c_int64),
        ("k_extend", ctypes.c_void_p),
        ("k_extend_stride_t", ctypes.c_int64),
        ("v_extend", ctypes.c_void_p),
        ("v_extend_stride_t", ctypes.c_int64),
        ("kv_buffer", ctypes.c_void_p),
        ("kv_stride_t", ctypes.c_int64),
        ("qo_indptr", ctypes.c_void_p),
        ("kv_indptr", ctypes.c_void_p),
        ("kv_indices", ctypes.c_void_p),
        ("mask_indptr", ctypes.c_void_p),
        ("custom_mask", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("out_stride_t", ctypes.c_int64),
        ("out_stride_h", ctypes.c_int64),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64),
        ("batch_size", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("max_extend_len", ctypes.c_int32),
        ("num_tokens", ctypes.c_int32),
        ("num_splits", ctypes.c_int32),
        ("mask_mode", ctypes.c_int32),
        ("sm_scale", ctypes.c_float),
        ("k_scale", ctypes.c_float),
        ("v_scale", ctypes.c_float),
        ("block_m", ctypes.c_int32),
        ("io_dtype", ctypes.c_int32),
        ("call_counter", ctypes.c_void_p),  # uint64_t*, ABI 4 (NULL: not counted)
    ]


MASK_TREE, MASK_CAUSAL = 0, 1  # enum kdtree_mask_mode
# enum kdtree_dtype: the args' io_dtype / kv_dtype, and bit (1 << value) of the capability masks.
DTYPE_BF16, DTYPE_FP8_E4M3, DTYPE_FP16, DTYPE_FP32 = 0, 1, 2, 3
KV_BF16, KV_FP8_E4M3 = DTYPE_BF16, DTYPE_FP8_E4M3  # enum kdtree_kv_dtype (the ABI 2 names)
DEVICE_CUDA, DEVICE_HOST = 1, 2  # enum kdtree_device_kind (bits of the device mask)
# torch's dtype names (str(dtype) without "torch.") of the enum kdtree_dtype values, and short names.
DTYPE_TORCH_NAMES = {
    DTYPE_BF16: "bfloat16",
    DTYPE_FP8_E4M3: "float8_e4m3fn",
    DTYPE_FP16: "float16",
    DTYPE_FP32: "float32",
}
SHORT_NAMES = {"bfloat16": "bf16", "float8_e4m3fn": "fp8_e4m3", "float16": "fp16", "float32": "fp32"}
DEVICE_NAMES = {DEVICE_CUDA: "cuda", DEVICE_HOST: "host"}
HOST_DOUBLE_INFO = "double=host"  # the build_info field of the host test double


def _short(name: str) -> str:
    return SHORT_NAMES.get(name, name)


class Serves:
    """What a library serves, from kdtree_verify_capabilities (torch dtype names, device kinds)."""

    def __init__(self, io_dtypes, kv_dtypes, devices) -> None:
        self.io_dtypes = frozenset(io_dtypes)
        self.kv_dtypes = frozenset(kv_dtypes)
        self.devices = frozenset(devices)

    @classmethod
    def from_masks(cls, io_mask: int, kv_mask: int, device_mask: int) -> Serves:
        def names(mask: int, table: dict[int, str], bit=lambda v: 1 << v) -> list[str]:
            return [name for value, name in table.items() if mask & bit(value)]

        return cls(
            names(io_mask, DTYPE_TORCH_NAMES),
            names(kv_mask, DTYPE_TORCH_NAMES),
            names(device_mask, DEVICE_NAMES, bit=lambda v: v),
        )

    def describe(self) -> str:
        """e.g. ``q/k/v bf16, kv cache bf16/fp8_e4m3, on cuda``."""

        def join(names) -> str:
            return "/".join(sorted(_short(n) for n in names)) or "nothing"

        devices = "/".join(sorted(self.devices)) or "no device"
        return f"q/k/v {join(self.io_dtypes)}, kv cache {join(self.kv_dtypes)}, on {devices}"

    def dtype_problem(self, io_dtypes: list[str], kv_dtype: str) -> str | None:
        """None when q/k/v (torch dtype names, all equal) and the KV cache dtype are served."""
        if len(set(io_dtypes)) != 1:
            return f"q/k/v dtypes differ ({', '.join(_short(d) for d in io_dtypes)})"
        io = io_dtypes[0]
        if io not in self.io_dtypes:
            served = "/".join(sorted(_short(n) for n in self.io_dtypes)) or "nothing"
            return f"q/k/v {_short(io)}, not {served} (library serves {self.describe()})"
        if kv_dtype not in self.kv_dtypes:
            return f"kv cache dtype {kv_dtype} (library serves {self.describe()})"
        return None

    def __repr__(self) -> str:
        return f"Serves({self.describe()})"


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _parse_build_info(info: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for item in info.split():
        key, sep, value = item.partition("=")
        if sep:
            fields[key] = value
    return fields


def _open(path: str) -> tuple[ctypes.CDLL, dict[str, Any]]:
    if not path:
        raise KernelUnavailable("KDTREE_LIB is not set")
    if not os.path.isabs(path):
        raise KernelUnavailable(f"library path is not absolute: {path}")
    if not os.path.isfile(path):
        raise KernelUnavailable(f"library not found: {path}")
    from kdtree_verify.kernel import libfile  # ELF header and size before dlopen: no SIGBUS on a cut file

    if problem := libfile.problem(path):
        raise KernelUnavailable(problem)
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise KernelUnavailable(f"dlopen failed: {exc}") from exc
    try:
        abi_fn = lib.kdtree_verify_abi_version
        info_fn = lib.kdtree_verify_build_info
    except AttributeError as exc:
        raise KernelUnavailable(f"not a kdtree_verify library (missing symbol): {exc}") from exc
    abi_fn.restype = ctypes.c_int
    abi_fn.argtypes = []
    info_fn.restype = ctypes.c_char_p
    info_fn.argtypes = []
    abi = int(abi_fn())
    if abi != ABI_VERSION:
        raise KernelUnavailable(f"ABI mismatch: library has {abi}, binding expects {ABI_VERSION}")
    info = (info_fn() or b"").decode("utf-8", "replace")
    fields = _parse_build_info(info)
    archs = [a for a in fields.get("archs", "").split(",") if a]
    meta = {"path": path, "sha256": _sha256(path), "abi": abi, "archs": archs, "build_info": info}
    return lib, meta


def probe_library(path: str) -> dict:
    """dlopen ``path`` and check its ABI (no torch). Raises KernelUnavailable."""
    _lib, meta = _open(path)
    return {k: meta[k] for k in ("path", "sha256", "abi", "archs")}


def arch_of_capability(major: int, minor: int) -> str:
    """The arch-specific target name a device of this compute capability runs (``sm_90a``...)."""
    return f"sm_{major}{minor}a"


class VerifyKernel:
    """A loaded library bound to torch tensors."""

    def __init__(self, lib: ctypes.CDLL, meta: dict[str, Any]) -> None:
        import torch  # imported here: probe_library must not need torch

        self._torch = torch
        self.lib = lib
        self.meta = meta
        self.path: str = meta["path"]
        self.archs: list[str] = meta["archs"]
        caps = lib.kdtree_verify_capabilities
        caps.restype = ctypes.c_int
        caps.argtypes = [ctypes.POINTER(ctypes.c_uint32)] * 3
        io_mask, kv_mask, dev_mask = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
        code = int(caps(ctypes.byref(io_mask), ctypes.byref(kv_mask), ctypes.byref(dev_mask)))
        if code != 0:
            raise KernelUnavailable(f"kdtree_verify_capabilities failed: {_ERR_NAMES.get(code, code)}")
        self.serves = Serves.from_masks(io_mask.value, kv_mask.value, dev_mask.value)
        # The host device only from the host test double, which says so twice (capabilities + build info).
        self.host_double = HOST_DOUBLE_INFO in meta.get("build_info", "").split()
        lib.kdtree_verify_run.restype = ctypes.c_int
        lib.kdtree_verify_run.argtypes = [ctypes.POINTER(_Args), ctypes.c_void_p]
        lib.kdtree_verify_prepare.restype = ctypes.c_int
        lib.kdtree_verify_prepare.argtypes = [ctypes.c_int]
        lib.kdtree_verify_num_splits.restype = ctypes.c_int
        lib.kdtree_verify_num_splits.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int64,
            ctypes.c_int,
        ]
        lib.kdtree_verify_min_split_tiles.restype = ctypes.c_int
        lib.kdtree_verify_min_split_tiles.argtypes = [ctypes.c_int] * 3
        lib.kdtree_verify_workspace_bytes.restype = ctypes.c_int64
        lib.kdtree_verify_workspace_bytes.argtypes = [ctypes.c_int] * 4
        lib.kdtree_verify_max_workspace_bytes.restype = ctypes.c_int64
        lib.kdtree_verify_max_workspace_bytes.argtypes = [ctypes.c_int]
        lib.kdtree_verify_partition.restype = ctypes.c_int64
        lib.kdtree_verify_partition.argtypes = [ctypes.c_int] * 6 + [ctypes.c_void_p] * 5
        self._lock = threading.Lock()
        self._prepared: dict[int, str | None] = {}
        self._workspace: dict[int, Any] = {}
        self._num_sms: dict[int, int] = {}
        # ABI 4 call counters: device index (-1: the host double's CPU tensor) -> int64[1] (a uint64 to
        # the library; 2^63 launches are out of reach). Allocated outside capture, never freed.
        self._call_counter: dict[int, Any] = {}
        self.count_calls = True  # False passes NULL (the library does not count; bench comparison)
        self._copy_stream: dict[int, Any] = {}  # device_calls(): side stream and pinned buffer per device
        self._copy_host: dict[int, Any] = {}

    # -- support checks -------------------------------------------------------------------
    def unsupported_reason(self, device: Any) -> str | None:
        """None when this GPU (or, for the host test double, the CPU) can run the library, else a reason."""
        torch = self._torch
        dev = torch.device(device)
        if dev.type == "cpu" and "host" in self.serves.devices:
            if not self.host_double:
                return f"library claims host memory without {HOST_DOUBLE_INFO} in its build info"
            return None
        if "cuda" not in self.serves.devices:
            return f"device {dev} is not served: library serves {self.serves.describe()}"
        if not torch.cuda.is_available():
            return f"CUDA is not available (library serves {self.serves.describe()})"
        if dev.type != "cuda":
            return f"device {dev} is not a CUDA device (library serves {self.serves.describe()})"
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        arch = arch_of_capability(major, minor)
        if arch not in self.archs:
            return f"library built for {','.join(self.archs) or '?'}, device is {arch}"
        return self._prepare(index)

    def _prepare(self, index: int) -> str | None:
        """Once per device, outside CUDA graph capture: set the kernels' shared-memory attribute
        and allocate the workspace at its upper bound for this GPU (it never grows afterwards)."""
        with self._lock:
            if index not in self._prepared:
                torch = self._torch
                if torch.cuda.is_current_stream_capturing():
                    return "kernel not prepared before CUDA graph capture (run one eager call first)"
                with torch.cuda.device(index):
                    code = int(self.lib.kdtree_verify_prepare(index))
                if code != 0:
                    self._prepared[index] = f"prepare failed: {_ERR_NAMES.get(code, code)}"
                    return self._prepared[index]
                num_sms = int(torch.cuda.get_device_properties(index).multi_processor_count)
                nbytes = int(self.lib.kdtree_verify_max_workspace_bytes(num_sms))
                self._workspace[index] = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
                self._call_counter[index] = torch.zeros(1, dtype=torch.int64, device=f"cuda:{index}")
                self._num_sms[index] = num_sms
                self._prepared[index] = None
                log.debug(
                    "kdtree_verify prepared cuda:%d (%d SMs, workspace %d bytes)", index, num_sms, nbytes
                )
            return self._prepared[index]

    # -- launch ---------------------------------------------------------------------------
    def run(
        self,
        *,
        q,
        k_extend,
        v_extend,
        kv_buffer,
        qo_indptr,
        kv_indptr,
        kv_indices,
        custom_mask,
        mask_indptr,
        batch_size: int,
        max_extend_len: int,
        sm_scale: float,
        k_scale: float = 1.0,
        v_scale: float = 1.0,
        block_m: int = 0,
        out,
    ) -> None:
        """Enqueue one verify attention on torch's current stream (no sync, no allocation).

        The dtypes are the ones the library serves (``self.serves``; the real library: bf16 as below,
        the host test double: float32 everywhere, CPU tensors, computed before run returns).
        q bf16 [T, H, HEAD_DIM_QK]; k_extend bf16 [>=T, 1, HEAD_DIM_QK]; v_extend bf16 [>=T, 1, HEAD_DIM_V];
        kv_buffer bf16 or float8_e4m3fn [P, 1, HEAD_DIM_QK]; qo_indptr, kv_indptr, mask_indptr
        int32/int64 [>=B+1]; kv_indices int32/int64 [>=kv_indptr[B]]; custom_mask bool/uint8 flat, or
        None for causal draft blocks (then mask_indptr may be None too); out bf16 [T, H, HEAD_DIM_V].
        k_scale / v_scale multiply the prefix scores / prefix P.V terms, as SGLang's k/v_descale.
        block_m 0 lets the library pick its CTA layout (32 rows when H * max_extend_len <= 32, else 64);
        32 or 64 force one (tests compare the two).
        """
        torch = self._torch
        validate_args(
            torch,
            serves=self.serves,
            q=q,
            k_extend=k_extend,
            v_extend=v_extend,
            kv_buffer=kv_buffer,
            qo_indptr=qo_indptr,
            kv_indptr=kv_indptr,
            kv_indices=kv_indices,
            custom_mask=custom_mask,
            mask_indptr=mask_indptr,
            batch_size=batch_size,
            max_extend_len=max_extend_len,
            out=out,
        )
        dev = q.device
        host = dev.type == "cpu" and "host" in self.serves.devices and self.host_double
        if not host and dev.type != "cuda":
            raise KernelUnavailable(f"tensors are on {dev}, not on a CUDA device")
        if host:
            index, num_sms, ws_ptr, ws_numel = -1, 1, None, 0
            with self._lock:  # no capture on the CPU: allocating at the first call is safe
                if -1 not in self._call_counter:
                    self._call_counter[-1] = torch.zeros(1, dtype=torch.int64)
        else:
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            reason = self._prepare(index)
            if reason:
                raise KernelUnavailable(reason)
            num_sms = self._num_sms[index]
            ws_ptr, ws_numel = self._workspace[index].data_ptr(), self._workspace[index].numel()
        num_tokens, num_heads = int(q.shape[0]), int(q.shape[1])
        causal = custom_mask is None
        if batch_size == 0 or num_tokens == 0 or max_extend_len == 0:
            return
        kv_dtype = dtype_code(str(kv_buffer.dtype).replace("torch.", ""))
        io_dtype = dtype_code(str(q.dtype).replace("torch.", ""))
        splits = int(
            self.lib.kdtree_verify_num_splits(
                num_sms, batch_size, num_heads, max_extend_len, int(kv_indices.numel()), kv_dtype
            )
        )
        ws_bytes = int(self.lib.kdtree_verify_workspace_bytes(batch_size, num_heads, max_extend_len, splits))
        if ws_bytes > ws_numel:  # cannot happen with kdtree_verify_num_splits; never allocate here
            raise RuntimeError(f"kdtree_verify workspace {ws_numel} < {ws_bytes} bytes")
        # A batch with no prefix key (every kv_indptr entry 0) may come with an empty kv_indices, whose
        # data pointer torch leaves null, and the library refuses a null pointer: it gets a valid stand-in
        # (the call counter), which the kernel never reads since no request has a key to look up.
        args = _Args(
            struct_size=ctypes.sizeof(_Args),
            kv_dtype=kv_dtype,
            qo_indptr_i64=int(qo_indptr.dtype == torch.int64),
            kv_indptr_i64=int(kv_indptr.dtype == torch.int64),
            kv_indices_i64=int(kv_indices.dtype == torch.int64),
            mask_indptr_i64=int(mask_indptr is not None and mask_indptr.dtype == torch.int64),
            q=q.data_ptr(),
            q_stride_t=q.stride(0),
            q_stride_h=q.stride(1),
            k_extend=k_extend.data_ptr(),
            k_extend_stride_t=k_extend.stride(0),
            v_extend=v_extend.data_ptr(),
            v_extend_stride_t=v_extend.stride(0),
            kv_buffer=kv_buffer.data_ptr(),
            kv_stride_t=kv_buffer.stride(0),
            qo_indptr=qo_indptr.data_ptr(),
            kv_indptr=kv_indptr.data_ptr(),
            kv_indices=kv_indices.data_ptr() or self._call_counter[index].data_ptr(),
            mask_indptr=None if causal else mask_indptr.data_ptr(),
            custom_mask=None if causal else custom_mask.data_ptr(),
            out=out.data_ptr(),
            out_stride_t=out.stride(0),
            out_stride_h=out.stride(1),
            workspace=ws_ptr,
            workspace_bytes=ws_numel,
            batch_size=batch_size,
            num_heads=num_heads,
            max_extend_len=max_extend_len,
            num_tokens=num_tokens,
            num_splits=splits,
            mask_mode=MASK_CAUSAL if causal else MASK_TREE,
            sm_scale=float(sm_scale),
            k_scale=float(k_scale),
            v_scale=float(v_scale),
            block_m=int(block_m),
            io_dtype=io_dtype,
            call_counter=self._call_counter[index].data_ptr() if self.count_calls else None,
        )
        if host:  # the host test double computes on this thread; it ignores the stream
            code = int(self.lib.kdtree_verify_run(ctypes.byref(args), None))
        else:
            stream = torch.cuda.current_stream(dev).cuda_stream
            with torch.cuda.device(index):
                code = int(self.lib.kdtree_verify_run(ctypes.byref(args), ctypes.c_void_p(stream)))
        if code != 0:
            raise RuntimeError(f"kdtree_verify_run failed: {_ERR_NAMES.get(code, code)} (code {code})")

    # -- the work plan (ABI 6) -------------------------------------------------------------------
    def partition(
        self,
        prefix_lens: list[int],
        draft_lens: list[int],
        *,
        num_heads: int,
        max_extend_len: int,
        num_splits: int,
        kv_dtype: str = "bfloat16",
        block_m: int = 0,
    ) -> Partition:
        """The work plan kdtree_verify_run launches for these lengths (kdtree_verify_partition: host
        memory only, no device). ValueError for arguments the library refuses."""
        batch = len(prefix_lens)
        units = num_splits
        prefixes = (ctypes.c_int64 * max(batch, 1))(*prefix_lens)
        drafts = (ctypes.c_int32 * max(batch, 1))(*draft_lens)
        tiles = (ctypes.c_int64 * max(units, 1))()
        segments = (ctypes.c_int32 * max(units, 1))()
        min_tiles = ctypes.c_int64(0)
        kv_code = dtype_code(kv_dtype)
        total = int(
            self.lib.kdtree_verify_partition(
                batch,
                num_heads,
                max_extend_len,
                num_splits,
                kv_code,
                block_m,
                prefixes,
                drafts,
                tiles,
                segments,
                ctypes.byref(min_tiles),
            )
        )
        if total < 0 or len(draft_lens) != batch:
            raise ValueError(
                f"kdtree_verify_partition refused batch={batch} H={num_heads} n={max_extend_len} "
                f"splits={num_splits} block_m={block_m}"
            )
        bm = int(self.lib.kdtree_verify_block_m(num_heads, max_extend_len, block_m))
        return Partition(
            total_tiles=total,
            unit_tiles=list(tiles[:units]),
            unit_segments=list(segments[:units]),
            min_unit_tiles=int(min_tiles.value),
            block_n=int(self.lib.kdtree_verify_block_n(bm)),
            m_blocks=-(-num_heads * max_extend_len // bm),
        )

    # -- the device call counter (ABI 4) --------------------------------------------------------
    def device_calls(self) -> int:
        """Library runs counted on the device so far, all devices of this process together (CUDA graph
        replays included; runs with nothing to do are not counted). For the status publisher: on CUDA
        a non-blocking copy on a side stream into pinned memory and a wait for that copy only (the
        forward stream is never synchronised, so the value may lag by the launches still queued
        before it), as ValidateStats.snapshot. The caller skips it while a graph is being captured.
        Call it from one thread."""
        torch = self._torch
        total = 0
        for index, counter in list(self._call_counter.items()):
            if index < 0:
                total += int(counter[0])
                continue
            if index not in self._copy_stream:
                self._copy_stream[index] = torch.cuda.Stream(device=index)
                self._copy_host[index] = torch.empty(1, dtype=torch.int64, pin_memory=True)
            stream, host = self._copy_stream[index], self._copy_host[index]
            with torch.cuda.device(index), torch.cuda.stream(stream):
                host.copy_(counter, non_blocking=True)
                done = torch.cuda.Event()
                done.record(stream)
            done.synchronize()
            total += int(host[0])
        return total


def dtype_code(name: str) -> int:
    """The enum kdtree_dtype value of a torch dtype name ("bfloat16", "float32"...); ValueError if none."""
    for code, torch_name in DTYPE_TORCH_NAMES.items():
        if torch_name == name:
            return code
    raise ValueError(f"dtype {name} has no kdtree_dtype value")


# What the real (CUDA) library serves: the default of validate_args for callers that pass no `serves`.
CUDA_LIBRARY_SERVES = Serves(["bfloat16"], ["bfloat16", "float8_e4m3fn"], ["cuda"])


def _is_index(torch: Any, t: Any) -> bool:
    return t.dtype in (torch.int32, torch.int64)


def validate_args(
    torch: Any,
    *,
    serves: Serves | None = None,
    q,
    k_extend,
    v_extend,
    kv_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    custom_mask,
    mask_indptr,
    batch_size: int,
    max_extend_len: int,
    out,
) -> None:
    """Check shapes, dtypes, devices and strides against the contract; raise ValueError.

    The dtypes are checked against `serves` (default: the real library's, bf16 with a bf16 or fp8-e4m3
    KV cache): q, k_extend, v_extend and out one served q/k/v dtype, kv_buffer a served KV dtype."""
    serves = serves or CUDA_LIBRARY_SERVES
    io_names = sorted(serves.io_dtypes, key=lambda n: (n != "bfloat16", n))
    io_dtypes = tuple(getattr(torch, n) for n in io_names)
    io_text = " or ".join(io_names)
    kv_names = sorted(serves.kv_dtypes, key=lambda n: (n != "bfloat16", n))
    kv_dtypes = tuple(getattr(torch, n) for n in kv_names)
    kv_text = " or ".join(kv_names)
    problems: list[str] = []

    def need(cond: bool, msg: str) -> None:
        if not cond:
            problems.append(msg)

    need(q.dim() == 3 and q.shape[2] == HEAD_DIM_QK, f"q must be [T, H, {HEAD_DIM_QK}], got {tuple(q.shape)}")
    need(q.dtype in io_dtypes, f"q must be {io_text}, got {q.dtype}")
    if problems:
        raise ValueError("; ".join(problems))
    num_tokens, num_heads = int(q.shape[0]), int(q.shape[1])
    need(
        k_extend.dim() == 3
        and tuple(k_extend.shape[1:]) == (1, HEAD_DIM_QK)
        and k_extend.shape[0] >= num_tokens,
        f"k_extend must be [T, 1, {HEAD_DIM_QK}], got {tuple(k_extend.shape)}",
    )
    need(
        v_extend.dim() == 3
        and tuple(v_extend.shape[1:]) == (1, HEAD_DIM_V)
        and v_extend.shape[0] >= num_tokens,
        f"v_extend must be [T, 1, {HEAD_DIM_V}], got {tuple(v_extend.shape)}",
    )
    q_name = str(q.dtype).replace("torch.", "")
    need(k_extend.dtype == q.dtype, f"k_extend must be {q_name} like q, got {k_extend.dtype}")
    need(v_extend.dtype == q.dtype, f"v_extend must be {q_name} like q, got {v_extend.dtype}")
    need(
        kv_buffer.dim() == 3 and tuple(kv_buffer.shape[1:]) == (1, HEAD_DIM_QK),
        f"kv_buffer must be [P, 1, {HEAD_DIM_QK}], got {tuple(kv_buffer.shape)}",
    )
    need(kv_buffer.dtype in kv_dtypes, f"kv_buffer must be {kv_text}, got {kv_buffer.dtype}")
    need(
        out.dim() == 3 and tuple(out.shape) == (num_tokens, num_heads, HEAD_DIM_V),
        f"out must be [{num_tokens}, {num_heads}, {HEAD_DIM_V}], got {tuple(out.shape)}",
    )
    need(out.dtype == q.dtype, f"out must be {q_name} like q, got {out.dtype}")
    indptrs = [("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr)]
    if custom_mask is not None:  # causal draft blocks (custom_mask None) read no mask_indptr
        need(mask_indptr is not None, "mask_indptr is required with a custom_mask")
        if mask_indptr is not None:
            indptrs.append(("mask_indptr", mask_indptr))
    for name, t in indptrs:
        need(_is_index(torch, t), f"{name} must be int32 or int64, got {t.dtype}")
        need(t.dim() == 1 and t.shape[0] >= batch_size + 1, f"{name} needs >= batch_size+1 entries")
        need(t.dim() != 1 or t.stride(0) == 1, f"{name} must be contiguous")
    need(_is_index(torch, kv_indices), f"kv_indices must be int32 or int64, got {kv_indices.dtype}")
    need(kv_indices.dim() == 1 and kv_indices.stride(0) == 1, "kv_indices must be a contiguous 1-d tensor")
    if custom_mask is not None:
        need(
            custom_mask.dtype in (torch.bool, torch.uint8),
            f"custom_mask must be bool or uint8, got {custom_mask.dtype}",
        )
        need(
            custom_mask.dim() == 1 and custom_mask.stride(0) == 1,
            "custom_mask must be a contiguous 1-d tensor",
        )
    need(batch_size >= 0, "batch_size must be >= 0")
    need(max_extend_len >= 0, "max_extend_len must be >= 0")
    need(num_heads >= 1, "need at least one head")
    tensors = {
        "q": q,
        "k_extend": k_extend,
        "v_extend": v_extend,
        "kv_buffer": kv_buffer,
        "out": out,
        "qo_indptr": qo_indptr,
        "kv_indptr": kv_indptr,
        "kv_indices": kv_indices,
        "custom_mask": custom_mask,
        "mask_indptr": mask_indptr,
    }
    devices = {t.device for t in tensors.values() if t is not None}
    need(len(devices) == 1, f"all tensors must be on one device, got {sorted(map(str, devices))}")
    # 16-byte vector loads: last dim contiguous, row strides and bases 16-byte aligned.
    for name in ("q", "k_extend", "v_extend", "kv_buffer", "out"):
        t = tensors[name]
        if t.dim() != 3:
            continue
        need(t.stride(2) == 1, f"{name} must have a contiguous last dimension")
        elems16 = 16 // t.element_size()
        outer = [t.stride(0)] + ([t.stride(1)] if name in ("q", "out") else [])
        need(all(s % elems16 == 0 for s in outer), f"{name} row strides must be multiples of 16 bytes")
        need(t.data_ptr() % 16 == 0, f"{name} must be 16-byte aligned")
    if problems:
        raise ValueError("; ".join(problems))


def load(path: str) -> VerifyKernel:
    """Load the library for launching (imports torch). Raises KernelUnavailable."""
    lib, meta = _open(path)
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise KernelUnavailable(f"torch is not importable: {exc}") from exc
    # All of _LAUNCH_SYMBOLS: VerifyKernel binds every one of them (kdtree_verify_max_workspace_bytes
    # was missing from this list, so a library without it escaped as AttributeError, not KernelUnavailable).
    for sym in _LAUNCH_SYMBOLS:
        if not hasattr(lib, sym):
            raise KernelUnavailable(f"library lacks symbol {sym}")
    return VerifyKernel(lib, meta)
