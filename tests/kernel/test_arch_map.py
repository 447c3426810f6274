"""Every consumer of the compute capability -> arch map agrees with build.sh, its one owner.

build.sh (files/csrc) answers --list-map, --list-arches and --arch-for-cc <cc>. The
consumers ask it: mk/kernel.mk (KERNEL_ARCHS), scripts/gpu-check.sh (--print-arch), the build role (a
controller task runs build.sh --arch-for-cc) and these tests (conftest.ARCHS); the binding derives the
device's arch name (kernel.arch_of_capability). No GPU, no torch: runs under the tools venv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ARCH_MAP, ARCHS, BUILD_SH, ROOT
from kdtree_verify.kernel import binding as kernel

ROLE = ROOT / "roles" / "kdtree_build"
GPU_CHECK = ROOT / "scripts" / "gpu-check.sh"
KERNEL_MK = ROOT / "mk" / "kernel.mk"
UNSUPPORTED_CC = "8.9"  # Ada: no kernel for it
ARCH_TOKEN = re.compile(r"\bsm_\d+a?\b")


def _build_sh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(BUILD_SH), *args], capture_output=True, text=True, timeout=60)


# --- the owner ---------------------------------------------------------------------------------


def test_build_sh_map_is_well_formed():
    assert ARCH_MAP, "build.sh --list-map printed nothing"
    assert UNSUPPORTED_CC not in ARCH_MAP
    for cc, arch in ARCH_MAP.items():
        assert re.fullmatch(r"\d+\.\d+", cc), cc
        assert re.fullmatch(r"sm_\d+a", arch), arch
    assert list(ARCHS) == list(ARCH_MAP.values())
    assert len(set(ARCHS)) == len(ARCHS)


@pytest.mark.parametrize("cc", sorted(ARCH_MAP))
def test_build_sh_arch_for_cc(cc):
    proc = _build_sh("--arch-for-cc", cc)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{ARCH_MAP[cc]}\n"
    # ... and it builds what it names (the flags carry that arch only).
    flags = _build_sh("--print-flags", "--arch", ARCH_MAP[cc])
    assert flags.returncode == 0, flags.stderr
    assert set(ARCH_TOKEN.findall(flags.stdout)) == {ARCH_MAP[cc]}


@pytest.mark.parametrize("cc", [UNSUPPORTED_CC, "12", "", ARCHS[0]])
def test_build_sh_refuses_an_unknown_cc_naming_the_supported_ones(cc):
    proc = _build_sh("--arch-for-cc", cc)
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert f"unsupported compute capability '{cc}'" in proc.stderr
    for known, arch in ARCH_MAP.items():
        assert f"{known} ({arch})" in proc.stderr


def test_build_sh_is_the_only_place_with_the_map():
    text = BUILD_SH.read_text(encoding="utf-8")
    block = re.search(r"^ARCH_MAP=\(\n(.*?)^\)", text, re.S | re.M)
    assert block, "ARCH_MAP=( ... ) not found in build.sh"
    assert re.findall(r'"(\S+) (\S+)"', block.group(1)) == list(ARCH_MAP.items())
    # Outside the table (comments and the usage line aside) build.sh names no arch.
    code = [line for line in text[block.end() :].splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if ARCH_TOKEN.search(line)]


# --- mk/kernel.mk --------------------------------------------------------------------------------


PRINT_RULE = "_arch-map-print-%: ; @echo $($*)"


def test_make_kernel_archs_come_from_build_sh():
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    proc = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", PRINT_RULE, "_arch-map-print-KERNEL_ARCHS"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == list(ARCHS)
    text = KERNEL_MK.read_text(encoding="utf-8")
    assert "--list-arches" in text
    assert not ARCH_TOKEN.search(text), "mk/kernel.mk names an arch itself"


# --- scripts/gpu-check.sh ----------------------------------------------------------------------


def _gpu_check_print_arch(tmp_path: Path, compute_cap: str | None) -> subprocess.CompletedProcess[str]:
    """gpu-check.sh --print-arch with a fake nvidia-smi reporting `compute_cap` (None: no nvidia-smi)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if compute_cap is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(
            "#!/bin/sh\n"
            f'case "$*" in *compute_cap*) echo "{compute_cap}" ;; *name*) echo "Fake GPU" ;; esac\n'
        )
        smi.chmod(0o755)
    # Only coreutils and bash besides the fake: no real nvidia-smi can answer.
    for tool in ("bash", "head", "tr", "timeout", "tee", "mkdir", "dirname", "cat"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    env = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        "OUT": str(tmp_path / "out"),
        "KDTREE_PYTHON": "/bin/false",  # no torch fallback
    }
    return subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(GPU_CHECK), "--print-arch"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize("cc", sorted(ARCH_MAP))
def test_gpu_check_picks_build_sh_arch(tmp_path, cc):
    proc = _gpu_check_print_arch(tmp_path, cc)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{ARCH_MAP[cc]}\n"
    assert f"compute capability {cc} -> {ARCH_MAP[cc]}" in proc.stderr
    assert not (tmp_path / "out").exists(), "--print-arch must write nothing"


def test_gpu_check_refuses_an_unknown_cc_with_build_sh_message(tmp_path):
    proc = _gpu_check_print_arch(tmp_path, UNSUPPORTED_CC)
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert f"unsupported compute capability '{UNSUPPORTED_CC}'" in proc.stderr
    assert all(f"{cc} ({arch})" in proc.stderr for cc, arch in ARCH_MAP.items())


def test_gpu_check_without_nvidia_smi_says_so(tmp_path):
    proc = _gpu_check_print_arch(tmp_path, None)
    assert proc.returncode == 3
    assert "nvidia-smi not found" in proc.stderr


def test_gpu_check_keeps_no_copy():
    text = GPU_CHECK.read_text(encoding="utf-8")
    assert "--arch-for-cc" in text
    assert not ARCH_TOKEN.search(text), "scripts/gpu-check.sh names an arch itself"


# --- the build role ----------------------------------------------------------------------------


def _role_text_files() -> list[Path]:
    """Everything of the role, its controller script files/build_inputs.sh included (the kernel source
    under files/csrc is not the role's: build.sh and its README are the owner)."""
    return [p for p in sorted(ROLE.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]


def test_role_keeps_no_copy_and_asks_build_sh():
    for path in _role_text_files():
        text = path.read_text(encoding="utf-8")
        assert not ARCH_TOKEN.search(text), f"{path.relative_to(ROOT)} names an arch itself"
        for cc in ARCH_MAP:
            assert not re.search(rf"""["']{re.escape(cc)}["']\s*:""", text), f"{path} maps {cc}"
    for path in (ROLE / "defaults" / "main.yml", ROLE / "meta" / "argument_specs.yml"):
        assert "arch_map" not in path.read_text(encoding="utf-8"), path
    # the check asks build.sh through its controller read (build_inputs.sh, a pipe lookup)
    tasks = (ROLE / "tasks" / "check.yml").read_text(encoding="utf-8")
    assert "/files/build_inputs.sh" in tasks
    assert "bash ./build.sh --arch-for-cc" in (ROLE / "files" / "build_inputs.sh").read_text(encoding="utf-8")


def _ansible_playbook() -> str:
    for candidate in (
        Path(sys.executable).parent / "ansible-playbook",
        ROOT / ".venv" / "bin" / "ansible-playbook",
    ):
        if candidate.exists():
            return str(candidate)
    pytest.skip("ansible-playbook not installed (tools venv: make venv)")


PLAYBOOK = """
- name: Run the build role's checks only and record what it derived
  hosts: all
  gather_facts: false
  tasks:
    - name: The role (its kdtree_build_check tasks - read, checks, build.sh on the controller)
      block:
        - name: Build role
          ansible.builtin.import_role:
            name: kdtree_build
      rescue:
        - name: Keep the failure
          ansible.builtin.set_fact:
            _why: "{{ ansible_failed_result.msg | default('') }}"
          tags: [always]
    - name: Record
      ansible.builtin.copy:
        content: "{{ {'arch': _kdtree_build_arch | default(''), 'why': _why | default('')} | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
      tags: [always]
"""


def test_role_derives_build_sh_arch(tmp_path):
    """The role itself, against local hosts (no GPU, nothing written): --tags kdtree_build_check."""
    playbook = _ansible_playbook()
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    first_cc = next(iter(ARCH_MAP))
    # the role also reads the driver (checked against the toolkit: build.sh --min-driver-for)
    (fake / "nvidia-smi").write_text(
        f'#!/bin/sh\ncase "$*" in *driver_version*) echo 580.65.06 ;; *) echo "{first_cc}" ;; esac\n'
    )
    for tool in fake.iterdir():
        tool.chmod(0o755)
    hosts: dict[str, dict[str, str]] = {
        f"cc_{cc}": {"kdtree_build_compute_capability": cc} for cc in ARCH_MAP
    }
    hosts["unsupported"] = {"kdtree_build_compute_capability": UNSUPPORTED_CC}
    hosts["detected"] = {
        "kdtree_build_compute_capability": "",
        "kdtree_build_nvidia_smi": str(fake / "nvidia-smi"),
    }
    inventory = {
        "all": {
            "hosts": hosts,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                # Does not exist: the role only reads it (only "/" is a parent to check).
                "kdtree_build_root": f"/nonexistent-kdtree-arch-map-test-{os.getpid()}",
                "kdtree_build_nvcc": str(fake / "nvcc"),
                "out_dir": str(tmp_path),
            },
        }
    }
    (tmp_path / "inventory.yml").write_text(json.dumps(inventory))  # JSON is YAML
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    proc = subprocess.run(
        [
            playbook,
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"),
            "--tags",
            "kdtree_build_check",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    got = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in hosts}
    for cc, arch in ARCH_MAP.items():
        assert got[f"cc_{cc}"] == {"arch": arch, "why": ""}
    assert got["detected"] == {"arch": ARCH_MAP[first_cc], "why": ""}
    why = got["unsupported"]["why"]
    assert f"compute capability {UNSUPPORTED_CC} on unsupported has no kernel target" in why
    assert all(f"{cc} ({arch})" in why for cc, arch in ARCH_MAP.items()), why
    assert not Path(inventory["all"]["vars"]["kdtree_build_root"]).exists()


# --- the binding --------------------------------------------------------------------------------


@pytest.mark.parametrize("cc", sorted(ARCH_MAP))
def test_binding_names_the_device_arch_as_build_sh_does(cc):
    major, minor = (int(part) for part in cc.split("."))
    assert kernel.arch_of_capability(major, minor) == ARCH_MAP[cc]
