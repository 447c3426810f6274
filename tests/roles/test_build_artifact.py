"""roles/kdtree_build's artifact path through ansible-playbook on localhost (build once, install
everywhere): the first build is compiled and shared through the controller's cache; a host without nvcc
installs the artifact; a tampered artifact is refused on the host; another nvcc version compiles anew; the
driver is checked against the toolkit (files/csrc/build.sh --min-driver-for); check mode says the path.
The kernel is the host test double (tests/doubles/hostlib, g++ in seconds, the build role's interface);
nvcc is a wrapper script that prints a version (only nvcc 13.0 exists on these machines). The build root
is a scratch directory the role accepts from any clone, /tmp/<clone> included (helpers/scratch_root.py: the
clone's build/ when its path is root-owned and not group/world-writable, else a safe parent of its own)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.tests.roles.helpers.scratch_root import safe_parent
from conftest import PLAYBOOK_BIN, ROOT, run_play

pytestmark = [
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv"),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("g++") is None, reason="needs root and g++"),
]

HOSTLIB = ROOT / "tests" / "doubles" / "hostlib"


def _make_fleet(tmp: Path) -> dict:
    """A base for a build root per "host" (all on this machine), a controller cache, fake nvcc, nvidia-smi."""
    base = Path(tempfile.mkdtemp(prefix="test-artifact-", dir=safe_parent()))
    base.chmod(0o755)
    fake = tmp / "bin"
    fake.mkdir(parents=True)
    for name, release in (("nvcc-13.0", "13.0, V13.0.88"), ("nvcc-12.9", "12.9, V12.9.86")):
        (fake / name).write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}'\n")
    (fake / "nvidia-smi").write_text(
        '#!/bin/sh\ncase "$*" in *compute_cap*) echo 12.0 ;;\n'
        '  *driver_version*) echo "${FAKE_DRIVER:-580.65.06}" ;; esac\n'
    )
    for tool in fake.iterdir():
        tool.chmod(0o755)
    return {"base": base, "cache": tmp / "cache", "bin": fake, "tmp": tmp}


@pytest.fixture(scope="module")
def first_build(tmp_path_factory):
    """host1 compiles the build (nvcc 13.0) and shares it: the cache every test starts from."""
    fleet = _make_fleet(tmp_path_factory.mktemp("first"))
    rc, out, facts = _deploy_build(fleet, "host1")
    assert rc == 0, out[-3000:]
    yield fleet, out, facts
    shutil.rmtree(fleet["base"], ignore_errors=True)


@pytest.fixture
def fleet(tmp_path, first_build):
    """A fresh fleet whose controller cache is a copy of first_build's."""
    fleet = _make_fleet(tmp_path)
    shutil.copytree(first_build[0]["cache"], fleet["cache"])
    yield fleet
    shutil.rmtree(fleet["base"], ignore_errors=True)


def _deploy_build(fleet, host: str, *extra: str, **role_vars) -> tuple[int, str, dict]:
    """The build role (check + apply, as the deploy runs it) for one "host" root; its published facts."""
    root = fleet["base"] / host
    out_json = fleet["tmp"] / f"{host}.json"
    play = {
        "name": "Build role",
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": {
            "kdtree.fleet.kdtree_history": {"path": str(fleet["tmp"] / f"{host}-state.json")}
        },
        "vars": {
            "kdtree_build_root": str(root),
            "kdtree_build_source_dir": str(HOSTLIB),
            "kdtree_build_cache_dir": str(fleet["cache"]),
            "kdtree_build_nvidia_smi": str(fleet["bin"] / "nvidia-smi"),
            "kdtree_build_nvcc": str(fleet["bin"] / "nvcc-13.0"),
            **role_vars,
        },
        "tasks": [
            {
                "name": "Check",
                "ansible.builtin.import_role": {"name": "kdtree.fleet.kdtree_build", "tasks_from": "check"},
            },
            {
                "name": "Apply",
                "ansible.builtin.import_role": {"name": "kdtree.fleet.kdtree_build", "tasks_from": "apply"},
            },
            {
                "name": "Record",
                "ansible.builtin.copy": {
                    "content": "{{ {'id': kdtree_build_id, 'path': kdtree_build_path} | to_json }}",
                    "dest": str(out_json),
                    "mode": "0644",
                },
                "changed_when": False,
                "check_mode": False,  # the facts of a check-mode run too
            },
        ],
    }
    proc = run_play(fleet["tmp"] / f"{host}.yml", play, *extra)
    text = re.sub(r"\s+", " ", proc.stdout + proc.stderr)
    facts = json.loads(out_json.read_text()) if proc.returncode == 0 and out_json.exists() else {}
    if out_json.exists():
        out_json.unlink()
    return proc.returncode, text, facts


def _lib(fleet, host: str, build_id: str) -> Path:
    return fleet["base"] / host / "builds" / build_id / "libkdtree_verify.so"


def test_a_build_is_compiled_once_and_a_host_without_nvcc_installs_it(first_build, fleet):
    _, out, first = first_build
    assert first["path"] == "compile_host", out[-2000:]
    assert (
        "kdtree_build on localhost: build "
        + first["id"]
        + " (host, CUDA 13.0): compile on the host, then share it"
        in out
    )
    cached = fleet["cache"] / first["id"]
    record = json.loads((cached / "artifact.json").read_text())
    assert record["built_on"] == "localhost" and record["nvcc_release"] == "13.0"
    assert (
        record["sha256"]
        == subprocess.check_output(["sha256sum", str(cached / "libkdtree_verify.so")], text=True).split()[0]
    )
    assert not list(fleet["cache"].glob(".claim-*")), "the claim on the compile is released"

    # check mode says which path the next host takes, and changes nothing
    rc, out, _ = _deploy_build(fleet, "host2", "--check", "--diff", kdtree_build_nvcc="/nonexistent/bin/nvcc")
    assert rc == 0, out[-3000:]
    assert (
        f"kdtree_build on localhost: build {first['id']} (host, CUDA 13.0): install the artifact from" in out
    )
    assert not (fleet["base"] / "host2" / "builds").exists()

    rc, out, second = _deploy_build(fleet, "host2", kdtree_build_nvcc="/nonexistent/bin/nvcc")
    assert rc == 0, out[-3000:]
    assert second == {"id": first["id"], "path": "artifact"}
    lib = _lib(fleet, "host2", first["id"])
    assert lib.read_bytes() == (cached / "libkdtree_verify.so").read_bytes()
    assert not (lib.parent / "build.log").exists(), "installed, not compiled"
    assert "from=artifact built on localhost" in (lib.parent / "BUILD_INFO").read_text()
    assert (fleet["base"] / "host2" / "current").resolve() == lib.parent.resolve()

    # the second run is a no-op: the build is present
    rc, out, again = _deploy_build(fleet, "host2", kdtree_build_nvcc="/nonexistent/bin/nvcc")
    assert rc == 0 and again["path"] == "present" and "changed=0" in out, out[-2000:]


def test_a_tampered_artifact_is_refused_on_the_host(first_build, fleet):
    first = first_build[2]
    cached_lib = fleet["cache"] / first["id"] / "libkdtree_verify.so"
    cached_lib.write_bytes(cached_lib.read_bytes() + b"\0")
    rc, out, _ = _deploy_build(fleet, "host2")
    assert rc != 0
    assert f"kdtree_build: refusing the artifact {fleet['cache']}/{first['id']} on localhost" in out, out[
        -3000:
    ]
    assert "the digest recorded when the build was made" in out
    builds = fleet["base"] / "host2" / "builds"
    assert not _lib(fleet, "host2", first["id"]).exists() and not list(builds.glob(".*.partial"))


def test_another_nvcc_version_compiles_anew(first_build, fleet):
    first = first_build[2]
    rc, out, other = _deploy_build(fleet, "host2", kdtree_build_nvcc=str(fleet["bin"] / "nvcc-12.9"))
    assert rc == 0, out[-3000:]
    assert other["path"] == "compile_host" and other["id"] != first["id"]
    assert (_lib(fleet, "host2", other["id"]).parent / "build.log").exists(), "compiled on the host"
    releases = sorted(
        json.loads(p.read_text())["nvcc_release"] for p in fleet["cache"].glob("*/artifact.json")
    )
    assert releases == ["12.9", "13.0"]
    # with two toolkits cached, a host without nvcc cannot tell which one it is meant to run: refused
    rc, out, _ = _deploy_build(fleet, "host3", kdtree_build_nvcc="/nonexistent/bin/nvcc")
    assert rc != 0 and "holds 2 artifacts of this source for different toolkits" in out, out[-3000:]


def _refused_without_nvcc(fleet, host: str, message: str) -> str:
    """The build role on `host` with no compiler fails naming `message` and leaves no builds directory:
    its output."""
    rc, out, _ = _deploy_build(fleet, host, kdtree_build_nvcc="/nonexistent/bin/nvcc")
    assert rc != 0
    assert message in out, out[-3000:]
    assert not (fleet["base"] / host / "builds").exists()
    return out


def test_a_host_without_nvcc_and_no_artifact_is_refused_before_anything_changes(fleet):
    shutil.rmtree(fleet["cache"])
    missing = "nvcc is missing or broken on localhost (/nonexistent/bin/nvcc)"
    out = _refused_without_nvcc(fleet, "host1", missing)
    assert "No artifact of this source, arch and flags is in the build cache" in out


def test_a_relative_kernel_source_is_refused_before_anything_changes(fleet):
    rc, out, _ = _deploy_build(fleet, "host1", kdtree_build_source_dir=str(HOSTLIB.relative_to(ROOT)))
    assert rc != 0
    assert "kdtree_build_source_dir must be an absolute path on the controller" in out, out[-3000:]
    assert not (fleet["base"] / "host1" / "builds").exists()


def test_a_driver_too_old_for_the_toolkit_is_refused(fleet, monkeypatch):
    monkeypatch.setenv("FAKE_DRIVER", "575.57.08")
    rc, out, _ = _deploy_build(fleet, "host1", kdtree_build_compute_capability="")
    assert rc != 0
    assert (
        "driver '575.57.08' on localhost cannot run a library built with CUDA 13.0 (needs driver >= 580"
        in out
    ), out[-3000:]
    assert not (fleet["base"] / "host1" / "builds").exists()


def test_the_controller_compiles_for_hosts_without_nvcc(fleet):
    shutil.rmtree(fleet["cache"])
    rc, out, first = _deploy_build(
        fleet,
        "host1",
        kdtree_build_builder="controller",
        kdtree_build_controller_nvcc=str(fleet["bin"] / "nvcc-13.0"),
        kdtree_build_nvcc="/nonexistent/bin/nvcc",
    )
    assert rc == 0, out[-3000:]
    assert first["path"] == "compile_controller", out[-2000:]
    assert (
        json.loads((fleet["cache"] / first["id"] / "artifact.json").read_text())["built_on"] == "controller"
    )
    assert _lib(fleet, "host1", first["id"]).exists()


def test_per_host_neither_reads_nor_writes_the_cache(first_build, fleet):
    before = sorted(p.name for p in fleet["cache"].iterdir())
    rc, out, got = _deploy_build(fleet, "host1", kdtree_build_builder="per_host")
    assert rc == 0 and got == {"id": first_build[2]["id"], "path": "compile_host"}, out[-2000:]
    assert (_lib(fleet, "host1", got["id"]).parent / "build.log").exists()
    assert sorted(p.name for p in fleet["cache"].iterdir()) == before


def test_a_host_waits_for_the_sibling_that_claimed_the_compile_and_installs_its_artifact(fleet, tmp_path):
    # the 12.9 build, compiled elsewhere (another cache): what the claiming sibling will share
    elsewhere = _make_fleet(tmp_path / "elsewhere")
    try:
        rc, out, other = _deploy_build(
            elsewhere, "host1", kdtree_build_nvcc=str(elsewhere["bin"] / "nvcc-12.9")
        )
        assert rc == 0 and other["path"] == "compile_host", out[-3000:]
    finally:
        shutil.rmtree(elsewhere["base"], ignore_errors=True)
    claim = fleet["cache"] / f".claim-{other['id']}"
    claim.mkdir()
    (claim / "host").write_text("sibling\n")

    def sibling_shares_it():
        # once host2 waits on the claim (it says so in the claim), the sibling shares its build
        deadline = time.time() + 600
        while not (claim / "waiting").exists() and time.time() < deadline:
            time.sleep(0.5)
        staged = fleet["cache"] / f".{other['id']}.sibling"
        shutil.copytree(elsewhere["cache"] / other["id"], staged)
        staged.rename(fleet["cache"] / other["id"])  # published whole, as publish.yml does
        shutil.rmtree(claim)

    sibling = threading.Thread(target=sibling_shares_it)
    sibling.start()
    try:
        rc, out, got = _deploy_build(fleet, "host2", kdtree_build_nvcc=str(fleet["bin"] / "nvcc-12.9"))
    finally:
        sibling.join()
    assert rc == 0 and got == {"id": other["id"], "path": "compile_host"}, out[-3000:]
    lib = _lib(fleet, "host2", other["id"])
    assert lib.exists() and not (lib.parent / "build.log").exists(), "installed the sibling's build"
    assert "from=artifact built on localhost" in (lib.parent / "BUILD_INFO").read_text()


OTHER_UID = 4242  # another local user of the controller / the host


def test_a_cache_planted_by_another_user_is_refused_before_anything_changes(first_build, fleet):
    """A library and a matching artifact.json planted in a cache another user owns (or can write to)
    are never installed: refused on the controller, naming the path and why, before the host changes."""
    first = first_build[2]
    os.chown(fleet["cache"], OTHER_UID, -1)
    _refused_without_nvcc(
        fleet,
        "host2",
        f"kdtree_build: refusing the build cache {fleet['cache']} on the controller: "
        f"{fleet['cache']} is owned by uid {OTHER_UID}, not root",
    )
    # the cache is ours again, but the artifact's library is another user's
    os.chown(fleet["cache"], 0, -1)
    os.chown(fleet["cache"] / first["id"] / "libkdtree_verify.so", OTHER_UID, -1)
    _refused_without_nvcc(
        fleet,
        "host2",
        f"kdtree_build: refusing the artifact {fleet['cache']}/{first['id']} of the build cache:"
        f" {fleet['cache']}/{first['id']}/libkdtree_verify.so is owned by uid {OTHER_UID}",
    )


def test_a_library_on_the_host_that_is_not_root_s_is_not_taken_as_present(first_build, fleet):
    first = first_build[2]
    rc, out, _ = _deploy_build(fleet, "host2")
    assert rc == 0, out[-3000:]
    lib = _lib(fleet, "host2", first["id"])
    os.chown(lib, OTHER_UID, -1)
    rc, out, _ = _deploy_build(fleet, "host2")
    assert rc != 0
    assert (
        f"kdtree_build: refusing build {first['id']} already on localhost: "
        f"{lib} is owned by uid {OTHER_UID}, not root" in out
    ), out[-3000:]
    os.chown(lib, 0, -1)
    lib.chmod(0o666)
    rc, out, _ = _deploy_build(fleet, "host2")
    assert rc != 0 and f"{lib} is group- or world-writable (mode 666)" in out, out[-3000:]


def test_an_unknown_toolkit_is_refused(fleet):
    nvcc = fleet["bin"] / "nvcc-12.4"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    nvcc.chmod(0o755)
    rc, out, _ = _deploy_build(fleet, "host1", kdtree_build_nvcc=str(nvcc))
    assert rc != 0
    assert "is made with a toolkit files/csrc/build.sh does not know (CUDA 12.4)" in out, out[-3000:]
    assert "unknown CUDA toolkit release '12.4'" in out
    assert not (fleet["base"] / "host1" / "builds").exists()


def test_the_controller_s_lock_is_never_opened_through_a_symlink(fleet):
    shutil.rmtree(fleet["cache"])
    fleet["cache"].mkdir(mode=0o755)
    controller = {
        "kdtree_build_builder": "controller",
        "kdtree_build_controller_nvcc": str(fleet["bin"] / "nvcc-13.0"),
        "kdtree_build_nvcc": "/nonexistent/bin/nvcc",
    }
    rc, out, probe = _deploy_build(fleet, "host0", **controller)  # names the build (and its lock)
    assert rc == 0 and probe["path"] == "compile_controller", out[-3000:]
    shutil.rmtree(fleet["cache"] / probe["id"])
    lock = fleet["cache"] / f".lock-{probe['id']}"
    assert lock.is_file() and not lock.is_symlink()
    lock.unlink()
    victim = fleet["tmp"] / "root-only"
    victim.write_text("precious\n")
    lock.symlink_to(victim)
    rc, out, _ = _deploy_build(fleet, "host1", **controller)
    assert rc != 0
    assert f"the lock {lock} is a symlink (never followed)" in out, out[-3000:]
    assert victim.read_text() == "precious\n"
    assert not (fleet["base"] / "host1" / "builds").exists()


def test_a_claim_left_by_a_killed_run_is_broken_at_once(fleet, tmp_path):
    # the 12.9 build is not in the cache: host2 compiles it, after the claim of a run that is gone
    killed = subprocess.Popen(["sleep", "60"])
    start = Path(f"/proc/{killed.pid}/stat").read_text().rpartition(")")[2].split()[19]
    killed.kill()
    killed.wait()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    run = {"host": os.uname().nodename, "boot": boot, "pid": killed.pid, "start": start}
    rc, out, probe = _deploy_build(
        fleet, "probe", "--check", kdtree_build_nvcc=str(fleet["bin"] / "nvcc-12.9")
    )
    assert rc == 0, out[-3000:]
    claim = fleet["cache"] / f".claim-{probe['id']}"
    claim.mkdir()
    (claim / "host").write_text("killed\n")
    (claim / "run").write_text(json.dumps(run))
    began = time.monotonic()
    rc, out, got = _deploy_build(fleet, "host2", kdtree_build_nvcc=str(fleet["bin"] / "nvcc-12.9"))
    assert rc == 0 and got == {"id": probe["id"], "path": "compile_host"}, out[-3000:]
    assert time.monotonic() - began < 120, "broken at once, not after 20 minutes"
    assert (_lib(fleet, "host2", probe["id"]).parent / "build.log").exists(), "compiled here"
    assert (fleet["cache"] / probe["id"] / "artifact.json").exists() and not claim.exists()


SLOW_S = 3


def progress_lines(out: str, what: str) -> list[tuple[int, int]]:
    """(waited, limit) of each progress line about `what` (the output's whitespace is squeezed)."""
    found = re.findall(rf"\[localhost\] {re.escape(what)}: waiting (\d+) s of (\d+) s", out)
    return [(int(waited), int(limit)) for waited, limit in found]


def test_a_slow_compile_and_a_host_waiting_for_its_artifact_print_progress_lines(
    fleet, tmp_path, monkeypatch
):
    """A compile that takes seconds prints a line per kdtree_build_progress_s (1 s here; 10 s by default),
    and so does a host waiting for the artifact of the sibling that claimed its compile; both end as
    before. The compiler is the host double's g++ behind a wrapper that first sleeps."""
    slow = tmp_path / "slow-g++"
    slow.write_text(f'#!/bin/sh\nsleep {SLOW_S}\nexec g++ "$@"\n')
    slow.chmod(0o755)
    monkeypatch.setenv("CXX", str(slow))  # the compile runs on this machine: it inherits the controller's
    nvcc = str(fleet["bin"] / "nvcc-12.9")  # a build the cache does not hold: compiled here
    rc, out, got = _deploy_build(fleet, "host2", kdtree_build_nvcc=nvcc, kdtree_build_progress_s=1)
    assert rc == 0 and got["path"] == "compile_host", out[-3000:]
    compiled = progress_lines(out, f"compile host ({got['id']})")
    assert len(compiled) >= 2 and {limit for _w, limit in compiled} == {630}, out[-3000:]
    assert [w for w, _l in compiled] == sorted(w for w, _l in compiled)
    assert _lib(fleet, "host2", got["id"]).exists()

    # the artifact taken out of the cache again and its compile claimed by a sibling: host3 waits
    artifact = fleet["cache"] / got["id"]
    aside = tmp_path / "aside"
    shutil.move(artifact, aside)
    claim = fleet["cache"] / f".claim-{got['id']}"
    claim.mkdir()
    (claim / "host").write_text("sibling\n")

    def sibling_shares_it_late():
        deadline = time.time() + 300
        while not (claim / "waiting").exists() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(SLOW_S)
        shutil.move(aside, artifact)
        shutil.rmtree(claim)

    sibling = threading.Thread(target=sibling_shares_it_late)
    sibling.start()
    try:
        rc, out, got3 = _deploy_build(fleet, "host3", kdtree_build_nvcc=nvcc, kdtree_build_progress_s=1)
    finally:
        sibling.join()
    assert rc == 0 and got3 == got, out[-3000:]
    waited = progress_lines(
        out, f"the compile of {got['id']} (claimed, or the artifact of the host that claimed it)"
    )
    assert len(waited) >= 2 and {limit for _w, limit in waited} == {1230}, out[-3000:]
    assert "from=artifact" in (_lib(fleet, "host3", got["id"]).parent / "BUILD_INFO").read_text()
