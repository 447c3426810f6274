"""CPU shim for tensor parallelism (`--tp-size 2`) on SGLang 0.5.23's generic platform.

Test-host setup, never shipped. `srt/distributed/parallel_state.py` `init_model_parallel_group` (called by
`initialize_model_parallel` for the TP, attention-TP, MoE and PP groups) turns PyNccl on whenever its
caller leaves `use_pynccl` unset, and the attention-TP group asks for it explicitly; `GroupCoordinator`
then builds a `PyNcclCommunicator`, which opens `torch.cuda.device(cpu)` and dies with "Expected a cuda
device, but got: cpu" in every scheduler. On the generic platform the AROUND hook below runs SGLang's
own function with `use_pynccl=False`: the groups' collectives go over torch.distributed's gloo, as the
CPU device group already does. The unit must also set `SGLANG_CPU_OMP_THREADS_BIND` (one core list per
rank, else an assertion allows no more ranks than NUMA nodes) and `--disable-custom-all-reduce`
(tests/engine/spec/*tp2.conf). At TP 1 the hook changes nothing that runs: a group of one rank never
builds a communicator. Facts: /work/shared/reference/sglang-cpu-engine.md ("TP 2 on the CPU").
Registered by `kdtree_cpu_shims.register()`.
"""

from __future__ import annotations

from typing import Any

MODEL_PARALLEL_GROUP = "sglang.srt.distributed.parallel_state.init_model_parallel_group"

HOOKS: dict[str, Any] = {}


def init_model_parallel_group_around(original, *args, **kwargs):
    import kdtree_cpu_shims as shims

    if not shims.generic_platform():
        return original(*args, **kwargs)
    a = shims.bind(original, args, kwargs)
    if a.get("use_pynccl") is not False:
        shims.count(MODEL_PARALLEL_GROUP, "SGLang's init_model_parallel_group with use_pynccl=False (gloo)")
    a["use_pynccl"] = False
    return original(**a)


HOOKS[MODEL_PARALLEL_GROUP] = init_model_parallel_group_around
