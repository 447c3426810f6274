"""Real systemd test hosts (podman) running the stock sglang.service with the SGLang TEST DOUBLE.

One host is started with scripts/testhosts/fleet.sh (its own name and label, so a demo fleet is
left alone) and removed at the end. Needs podman and the image (make testhost-image).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "scripts" / "testhosts" / "fleet.sh"
PREFIX = "kdtree-pytest-host"
HOST = f"{PREFIX}1"
FLEET_ENV = {**os.environ, "KDTREE_FLEET_PREFIX": PREFIX, "KDTREE_FLEET_LABEL": "pytest"}
DROPIN = "/etc/systemd/system/sglang.service.d/pytest.conf"


def sh(script: str, check: bool = True, timeout: float = 60) -> str:
    """Run a bash script inside the test host; return stdout."""
    res = subprocess.run(
        ["podman", "exec", HOST, "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and res.returncode != 0:
        raise AssertionError(f"in {HOST}: {script!r} -> {res.returncode}\n{res.stdout}\n{res.stderr}")
    return res.stdout


def unit(prop: str) -> str:
    return sh(f"systemctl show -p {prop} --value sglang.service").strip()


def wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def health() -> str:
    return sh("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health", check=False)


def scheduler_children() -> dict[int, str]:
    """{pid: cmdline} of the unit's main process children."""
    main = unit("MainPID")
    out = sh(f"ps -o pid=,args= --ppid {main}")
    return {int(line.split(None, 1)[0]): line.split(None, 1)[1].strip() for line in out.splitlines()}


def set_dropin(env: str | None) -> None:
    """Add (or with None remove) a drop-in with extra Environment= and restart the unit."""
    if env is None:
        sh(f"rm -f {DROPIN} && systemctl daemon-reload")
    else:
        sh(f"mkdir -p {Path(DROPIN).parent} && printf '[Service]\\nEnvironment={env}\\n' > {DROPIN}")
        sh("systemctl daemon-reload")
    sh("systemctl restart sglang.service")


def restore_stock() -> None:
    set_dropin(None)
    wait(lambda: health() == "200", 30, "/health 200 after restoring the stock unit")


@pytest.fixture(scope="module", autouse=True)
def host() -> Iterator[str]:
    subprocess.run(["bash", str(FLEET), "down"], env=FLEET_ENV, check=True, timeout=120)
    subprocess.run(["bash", str(FLEET), "up", "1"], env=FLEET_ENV, check=True, timeout=600)
    yield HOST
    subprocess.run(["bash", str(FLEET), "down"], env=FLEET_ENV, check=True, timeout=120)


def test_stock_unit_is_active_healthy_and_has_no_pythonpath() -> None:
    assert unit("ActiveState") == "active"
    assert health() == "200"
    assert "PYTHONPATH" not in unit("Environment")
    assert "ready to roll" in sh(
        "journalctl -o cat --no-pager _SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID --value sglang)"
    )


def test_one_titled_scheduler_per_tp_rank_plus_detokenizer_in_cmdline() -> None:
    titles = sorted(cmd for cmd in scheduler_children().values() if cmd.startswith("sglang::"))
    assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    assert "sglang::scheduler_TP" in sh("ps -eo args")


def test_venv_sitecustomize_is_shadowed_by_debians_stdlib_one() -> None:
    py = "/opt/sglang/venv/bin/python"
    site = sh(f"{py} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'").strip()
    try:
        sh(f"echo 'print(\"VENV-SITECUSTOMIZE-RAN\")' > {site}/sitecustomize.py")
        out = sh(f"{py} -c 'import sitecustomize; print(sitecustomize.__file__)'")
        assert "VENV-SITECUSTOMIZE-RAN" not in out
        assert out.strip() == "/usr/lib/python3.11/sitecustomize.py"
    finally:
        sh(f"rm -f {site}/sitecustomize.py")


def test_setproctitle_blanks_children_environ_unless_spt_noenv() -> None:
    # setproctitle (as in the real engine) reuses the environ area for the title.
    kids = [pid for pid, cmd in scheduler_children().items() if cmd.startswith("sglang::scheduler")]
    assert kids
    assert "HF_HUB_OFFLINE=1" not in sh(f"tr '\\0' '\\n' < /proc/{kids[0]}/environ")
    assert "HF_HUB_OFFLINE=1" in sh(f"tr '\\0' '\\n' < /proc/{unit('MainPID')}/environ")
    try:
        set_dropin("SPT_NOENV=1 KDTREE_TEST_MARK=host")
        wait(lambda: health() == "200", 30, "/health 200 with the drop-in")
        children = scheduler_children()
        titled = [pid for pid, cmd in children.items() if cmd.startswith("sglang::")]
        assert len(titled) == 3, children
        for pid in titled:
            env = set(sh(f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines())
            assert {"KDTREE_TEST_MARK=host", "HF_HUB_OFFLINE=1", "NCCL_CUMEM_ENABLE=0"} <= env
            assert "CUDA_DEVICE_MAX_CONNECTIONS=8" in env
    finally:
        restore_stock()


def test_crash_after_3s_leaves_traceback_in_invocation_journal_and_unit_failed_by_sigkill() -> None:
    old_invocation = unit("InvocationID")
    try:
        set_dropin("SGLANG_DOUBLE_CRASH_AFTER=3")
        invocation = unit("InvocationID")
        assert invocation and invocation != old_invocation
        wait(lambda: unit("ActiveState") == "failed", 30, "sglang.service to fail")
        assert unit("ExecMainStatus") == "9"
        assert unit("Result") == "signal"
        journal = sh(f"journalctl -o cat --no-pager _SYSTEMD_INVOCATION_ID={invocation}")
        assert "TP0] Scheduler hit an exception: Traceback (most recent call last):" in journal
        assert "SimulatedSchedulerError" in journal
        assert "Received sigquit from a child process. It usually means the child failed." in journal
        assert journal.count("TEST DOUBLE of sglang 0.5.23 (not the real engine)") == 1  # this run only
        assert sh("pgrep -f 'sglang::|sglang.launch_server'", check=False).strip() == ""
    finally:
        restore_stock()


def test_install_double_twice_changes_nothing() -> None:
    main = unit("MainPID")
    out = sh("bash /tmp/kdtree-double/install-double.sh --wait 30")
    assert "installed" not in out and "started" not in out, out
    assert unit("MainPID") == main


def test_the_hosts_nvidia_smi_is_the_double_with_eight_healthy_gpus() -> None:
    """install-double.sh puts the nvidia-smi TEST DOUBLE where the driver puts nvidia-smi, with its state
    file; the GPU health check's query answers eight healthy GPUs in the real tool's format."""
    out = sh(
        "nvidia-smi --query-gpu=index,persistence_mode,ecc.errors.uncorrected.volatile.total,"
        "remapped_rows.pending --format=csv,noheader,nounits"
    )
    assert out.splitlines() == [f"{i}, Enabled, 0, No" for i in range(8)]
    assert sh("command -v nvidia-smi").strip() == "/usr/bin/nvidia-smi"
    assert sh("cat /etc/kdtree-testhost/nvidia-smi.json").strip() == '{"count": 8}'


@pytest.mark.skipif(not Path("/usr/local/cuda-13.0/bin/nvcc").exists(), reason="no CUDA 13.0 toolkit here")
def test_nvcc_in_host_builds_an_sm_120a_shared_library() -> None:
    assert "release 13.0" in sh("/usr/local/cuda/bin/nvcc --version")
    sh(
        'cd /tmp && printf \'extern "C" __global__ void k(float *x) { x[threadIdx.x] *= 2.f; }\\n'
        'extern "C" int kdt_probe(void) { return 42; }\\n\' > t.cu && '
        "/usr/local/cuda/bin/nvcc -shared -Xcompiler -fPIC "
        "-gencode arch=compute_120a,code=sm_120a -o libt.so t.cu",
        timeout=120,
    )
    assert " T kdt_probe" in sh("nm -D /tmp/libt.so")
    assert sh("python3 -c 'import ctypes; print(ctypes.CDLL(\"/tmp/libt.so\").kdt_probe())'").strip() == "42"
