"""The GPU health check's decision (module_utils/_gpu_health): nvidia-smi's answers in the real tool's
format, judged before a restart; and the nvidia-smi TEST DOUBLE (tests/doubles/nvidia_smi) the CPU test
hosts run, driven by its state file. No GPU needed."""

from __future__ import annotations

import json
import subprocess

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _gpu_health as gpu_health
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import ROOT

DOUBLE = ROOT / "tests" / "doubles" / "nvidia_smi" / "nvidia-smi"
UUID = "GPU-5c2a9e4e-3a0b-1c7d-8f9e-{:012d}"


def line(index: int, **over: str) -> str:
    """One --query-gpu line of a healthy H100 (csv,noheader,nounits), fields of GPU_FIELDS."""
    fields = {
        "index": str(index),
        "uuid": UUID.format(index),
        "persistence_mode": "Enabled",
        "memory.total": "81559",
        "memory.free": "81028",
        "ecc.errors.uncorrected.volatile.total": "0",
        "retired_pages.pending": "[N/A]",
        "remapped_rows.pending": "No",
        **over,
    }
    return ", ".join(fields[name] for name in gpu_health.GPU_FIELDS)


def runner(gpus: str, apps: str = ""):
    def run(argv, timeout_s):
        assert timeout_s > 0
        assert argv[-1] == "--format=csv,noheader,nounits"
        return gpus if argv[1].startswith("--query-gpu=") else apps

    return run


def healthy(count: int = 8) -> str:
    return "\n".join(line(i) for i in range(count)) + "\n"


def test_eight_healthy_gpus_pass_and_every_gpu_is_shown():
    result = gpu_health.check(expected=8, min_free_mib=8192, runner=runner(healthy()))
    assert result["ok"] is True and result["problems"] == []
    assert (result["count"], result["expected"]) == (8, 8)
    assert [g["index"] for g in result["gpus"]] == list(range(8))
    assert result["gpus"][0]["ecc_uncorrected"] == 0 and result["gpus"][0]["retired_pending"] is None
    assert gpu_health.summary(result) == "ok 8"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("ecc.errors.uncorrected.volatile.total", "2", "2 uncorrectable ECC errors since the driver loaded"),
        ("remapped_rows.pending", "Yes", "row remapping pending (reset the GPU)"),
        ("retired_pages.pending", "Yes", "page retirement pending (reset the GPU)"),
        ("persistence_mode", "Disabled", "persistence mode off"),
        (
            "memory.free",
            "4000",
            "4000 MiB free once the unit stops (77559 MiB held by other processes), below "
            "kdtree_service_gpu_min_free_mib 8192",
        ),
    ],
)
def test_each_bad_gpu_reason_refuses_naming_the_gpu_index_uuid_and_reason(field, value, reason):
    gpus = "\n".join(line(i, **({field: value} if i == 3 else {})) for i in range(8))
    result = gpu_health.check(expected=2, min_free_mib=8192, runner=runner(gpus))
    assert result["ok"] is False
    assert result["problems"] == [f"GPU 3 ({UUID.format(3)}): {reason}"]
    assert result["gpus"][3]["problems"] == [reason] and result["gpus"][2]["problems"] == []
    assert gpu_health.summary(result) == "BAD 1 of 8"
    assert "kdtree_service_preflight_skip: [gpu]" in gpu_health.refusal(result)


def test_memory_the_units_own_processes_hold_counts_as_free_and_anyone_elses_does_not():
    """Before a restart the unit's schedulers hold most of each GPU: stopping them frees it. A process
    outside the unit (a stray from an earlier run) keeps its memory and fails SGLang's start."""
    gpus = line(0, **{"memory.free": "1000"}) + "\n" + line(1, **{"memory.free": "1000"})
    apps = f"{UUID.format(0)}, 4242, 78000\n{UUID.format(1)}, 999, 78000\n"
    result = gpu_health.check(
        expected=2, min_free_mib=8192, unit_pids=[4241, 4242], runner=runner(gpus, apps)
    )
    assert result["gpus"][0]["memory_unit_mib"] == 78000 and result["gpus"][0]["problems"] == []
    assert result["gpus"][1]["memory_unit_mib"] == 0
    assert result["problems"] == [
        f"GPU 1 ({UUID.format(1)}): 1000 MiB free once the unit stops (80559 MiB held by other processes), "
        "below kdtree_service_gpu_min_free_mib 8192"
    ]


def test_fewer_gpus_than_this_nodes_share_of_the_schedulers_refuses():
    result = gpu_health.check(expected=8, min_free_mib=0, runner=runner(healthy(4)))
    assert result["ok"] is False
    assert result["problems"] == ["4 GPUs, this node's share of the schedulers needs 8"]
    assert gpu_health.summary(result) == "BAD (4 GPUs)"
    # 0: the count is not known (the report of a host kdtree never deployed), not judged
    assert gpu_health.check(expected=0, min_free_mib=0, runner=runner(healthy(4)))["ok"] is True


def test_fields_the_gpu_does_not_report_refuse_nothing_and_stay_unknown():
    """[N/A] / [Not Supported] is the driver's answer for ECC turned off or no row remapping (before
    Ampere): shown as unknown (None), never as 0, and not a reason to refuse."""
    gpus = line(
        0, **{"ecc.errors.uncorrected.volatile.total": "[N/A]", "remapped_rows.pending": "[Not Supported]"}
    )
    result = gpu_health.check(expected=1, min_free_mib=0, runner=runner(gpus))
    assert result["ok"] is True
    assert result["gpus"][0]["ecc_uncorrected"] is None and result["gpus"][0]["remapped_pending"] is None


@pytest.mark.parametrize(
    ("gpus", "apps", "said"),
    [
        ("", "", "listed no GPU"),
        ("0, GPU-x, Enabled, 81559\n", "", "has 4 fields, not 8"),
        (line(0, **{"ecc.errors.uncorrected.volatile.total": "many"}), "", "not a count"),
        (line(0, **{"remapped_rows.pending": "Maybe"}), "", "not Yes or No"),
        (line(0, persistence_mode="[N/A]"), "", "persistence_mode not reported"),
        (line(0, **{"memory.free": "[N/A]"}), "", "memory.free is not reported"),
        (line(0), "GPU-x, 12\n", "has 2 fields, not 3"),
    ],
)
def test_an_answer_that_does_not_parse_refuses_never_counts_as_healthy(gpus, apps, said):
    result = gpu_health.check(expected=1, min_free_mib=0, runner=runner(gpus, apps))
    assert result["ok"] is False and result["count"] is None
    assert result["problems"][0].startswith("cannot read the GPUs: ") and said in result["problems"][0]
    assert gpu_health.summary(result) == "unreadable"


def test_a_missing_nvidia_smi_refuses(tmp_path):
    result = gpu_health.check(expected=1, min_free_mib=0, binary=str(tmp_path / "nvidia-smi"))
    assert result["ok"] is False
    assert "not found on the node" in result["problems"][0]


def test_a_hung_nvidia_smi_is_cut_at_the_timeout_and_refuses(tmp_path):
    slow = tmp_path / "nvidia-smi"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    result = gpu_health.check(expected=1, min_free_mib=0, binary=str(slow), timeout_s=0.5)
    assert result["ok"] is False and "no answer within 0.5 s" in result["problems"][0]


def test_a_check_that_did_not_run_is_neither_healthy_nor_bad():
    result = gpu_health.not_checked("off")
    assert result["checked"] is False and result["ok"] is None and result["problems"] == []
    assert gpu_health.summary(result) == "off" and gpu_health.summary(None) == "-"


# ---------------------------------------------------------------------------------------------
# the nvidia-smi test double, read by the real runner (the check as it runs on a CPU test host)


@pytest.fixture
def double(tmp_path, monkeypatch):
    state = tmp_path / "nvidia-smi.json"
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(state))

    def judge(content: dict | None, expected: int = 2, **kw) -> dict:
        if content is None:
            state.unlink(missing_ok=True)
        else:
            state.write_text(json.dumps(content))
        return gpu_health.check(expected=expected, min_free_mib=8192, binary=str(DOUBLE), **kw)

    return judge


def test_the_double_answers_in_the_real_tools_format(tmp_path):
    """A header and units without noheader/nounits, ", " between fields, [N/A] where a field is not
    reported; no state file: the driver is absent (rc 9, the real tool's message)."""
    state = tmp_path / "nvidia-smi.json"

    def smi(*args: str) -> subprocess.CompletedProcess:
        env = {"NVIDIA_SMI_DOUBLE_STATE": str(state), "PATH": "/usr/bin:/bin"}
        return subprocess.run(
            [str(DOUBLE), *args], capture_output=True, text=True, timeout=30, env=env, check=False
        )

    out = smi("--query-gpu=index,memory.total", "--format=csv")
    assert out.returncode == 9 and "couldn't communicate with the NVIDIA driver" in out.stdout
    state.write_text('{"count": 2}')
    out = smi("--query-gpu=index,memory.total,retired_pages.pending", "--format=csv")
    assert out.stdout.splitlines() == [
        "index, memory.total, retired_pages.pending",
        "0, 81559 MiB, [N/A]",
        "1, 81559 MiB, [N/A]",
    ]
    assert smi("--query-gpu=compute_cap", "--format=csv,noheader", "-i", "1").stdout == "12.0\n"
    assert smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").stdout == ""


def test_the_doubles_default_node_is_healthy_and_one_bad_gpu_is_refused(double):
    assert double({"count": 8})["ok"] is True
    result = double({"count": 8, "gpus": {"5": {"ecc.errors.uncorrected.volatile.total": 3}}})
    assert result["problems"] == [
        "GPU 5 (GPU-00000000-0000-4000-8000-000000000005): 3 uncorrectable ECC errors since the driver loaded"
    ]
    assert double({"count": 1}, expected=2)["problems"] == [
        "1 GPUs, this node's share of the schedulers needs 2"
    ]


def test_the_doubles_unit_processes_are_credited_by_pid(double):
    state = {
        "count": 2,
        "gpus": {"0": {"memory.free": 500}},
        "apps": [{"gpu": 0, "pid": 77, "used_memory": 80000}],
    }
    assert double(state, unit_pids=[77])["ok"] is True
    assert "500 MiB free once the unit stops" in double(state, unit_pids=[78])["problems"][0]


@pytest.mark.parametrize(
    ("state", "said"),
    [
        (None, "rc=9"),
        (
            {"fail": {"rc": 15, "message": "Unable to determine the device handle for GPU 0000:18:00.0"}},
            "rc=15",
        ),
        ({"output": "garbage\n"}, "has 1 fields, not 8"),
    ],
)
def test_the_doubles_driver_failures_refuse(double, state, said):
    result = double(state)
    assert result["ok"] is False and said in result["problems"][0]


def test_a_field_the_driver_does_not_know_refuses(tmp_path, monkeypatch):
    """An older driver without remapped_rows.pending answers rc 2: refused, never read as healthy."""
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(tmp_path / "s.json"))
    (tmp_path / "s.json").write_text('{"count": 1}')
    monkeypatch.setattr(gpu_health, "GPU_FIELDS", (*gpu_health.GPU_FIELDS[:-1], "remapped_rows.pendingx"))
    result = gpu_health.check(expected=1, min_free_mib=0, binary=str(DOUBLE))
    assert (
        result["ok"] is False
        and 'Field "remapped_rows.pendingx" is not a valid field' in result["problems"][0]
    )
