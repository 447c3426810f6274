"""Faults around the patch, each in a real child interpreter on Debian's python (its distro
sitecustomize in the chain, as on a host): a broken stderr, the hook directory reached twice, an
unsafe or unwritable status directory, a cut or foreign library, a non-finite tolerance.

Every test checks that the child survives (exit 0, its own output), that the message is the right
one (the marker state, the reason, the status line), and that no file outside the status
directory changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from extlib import DOUBLE_DIR, EXT_DIR, clean_env
from kdtree_verify.kernel import libfile
from kdtree_verify.telemetry import marker

DEBIAN_PYTHON = Path("/usr/bin/python3.11")
DEBIAN_SITECUSTOMIZE = Path("/usr/lib/python3.11/sitecustomize.py")
HOOK = str(EXT_DIR / "sitecustomize.py")
# The child imports the backend (the patch installs itself there) and prints status() as JSON.
IMPORT_BACKEND = (
    "import json, sys, sglang.srt.layers.attention.triton_backend as tb, kdtree_verify, sitecustomize\n"
    "st = kdtree_verify.status()\n"
    "st['ran'] = list(getattr(sitecustomize, 'KDTREE_RAN', []))\n"
    "print(json.dumps(st))\n"
)


@pytest.fixture(scope="module", autouse=True)
def _debian_python():
    if not (DEBIAN_PYTHON.is_file() and DEBIAN_SITECUSTOMIZE.is_file()):
        pytest.fail(
            f"{DEBIAN_PYTHON} with {DEBIAN_SITECUSTOMIZE} missing: not the Debian these tests are about"
        )


def child_env(lib: Path | str, *path: Path, **extra: str) -> dict[str, str]:
    pythonpath = ":".join(str(p) for p in (*(path or (EXT_DIR,)), DOUBLE_DIR))
    env = clean_env(PYTHONPATH=pythonpath, KDTREE_VERIFY="on", KDTREE_LIB=str(lib))
    env.update(extra)
    return env


def run_child(env: dict[str, str], code: str = IMPORT_BACKEND, stderr=subprocess.PIPE, **popen):
    """(returncode, stdout, stderr or '') of Debian's python running `code`."""
    proc = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=60,
        check=False,
        **popen,
    )
    return proc.returncode, proc.stdout, proc.stderr or ""


def status_of(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def markers(stderr: str) -> list[tuple[int, str]]:
    return [found for line in stderr.splitlines() if (found := marker.match_marker(line))]


def tree(root: Path, skip: Path | None = None) -> dict[str, str]:
    """Every file under `root` (symlinks as their target text) with a digest of its bytes."""
    out = {}
    for path in sorted(root.rglob("*")):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        if path.is_symlink():
            out[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# --- a broken stderr -------------------------------------------------------------------------


def _stderr_dev_full():
    return {"stderr": open("/dev/full", "w")}  # closed by the caller


def _stderr_closed_pipe():
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write gets EPIPE
    return {"stderr": write_end}


def _stderr_closed_descriptor():
    return {"stderr": subprocess.DEVNULL, "preexec_fn": lambda: os.close(2)}  # sys.stderr is None


SINKS = {
    "dev-full": _stderr_dev_full,
    "closed-pipe": _stderr_closed_pipe,
    "no-fd-2": _stderr_closed_descriptor,
}


def _run_with_broken_stderr(sink: str, env: dict[str, str], code: str = IMPORT_BACKEND):
    kwargs = SINKS[sink]()
    try:
        return run_child(env, code, **kwargs)
    finally:
        if hasattr(kwargs["stderr"], "close"):
            kwargs["stderr"].close()
        elif isinstance(kwargs["stderr"], int) and kwargs["stderr"] > 2:
            os.close(kwargs["stderr"])


@pytest.mark.parametrize("sink", sorted(SINKS))
def test_a_broken_stderr_costs_the_marker_line_never_the_import(libs, tmp_path, sink):
    status_dir = tmp_path / "status"
    status_dir.mkdir(mode=0o755)
    rc, out, _ = _run_with_broken_stderr(sink, child_env(libs["good"], KDTREE_STATUS_DIR=str(status_dir)))
    assert rc == 0, out
    st = status_of(out)
    assert (st["state"], st["marker_printed"]) == ("active", False)
    (written,) = status_dir.glob("*.json")  # the status file still says what the line would have
    assert json.loads(written.read_text())["state"] == "active"
    assert st["status_file"] == str(written)


@pytest.mark.parametrize("sink", sorted(SINKS))
@pytest.mark.parametrize(
    ("module", "error", "code", "alive"),
    [
        pytest.param(
            "lifecycle.py",
            "raise ImportError('lifecycle module broken')\n",
            "import sglang.srt.layers.attention.triton_backend as t; "
            "print('alive', t.TritonAttnBackend.__name__)",
            "alive TritonAttnBackend",
            id="hook-error",
        ),
        pytest.param(
            "importhook.py",
            "raise RuntimeError('broken on purpose')\n",
            "print('alive')",
            "alive",
            id="sitecustomize-error",
        ),
    ],
)
def test_a_broken_stderr_while_reporting_a_patch_error_leaves_python_running(
    libs, tmp_path, sink, module, error, code, alive
):
    """A hook module (lifecycle.py, reported by the hook) or the import hook itself (importhook.py,
    reported by sitecustomize) raises while stderr is broken: Python runs on."""
    broken = tmp_path / "ext"
    shutil.copytree(EXT_DIR, broken)
    (broken / "kdtree_verify" / "inject" / module).write_text(error)
    rc, out, _ = _run_with_broken_stderr(sink, child_env(libs["good"], broken), code)
    assert (rc, out.strip()) == (0, alive)


# --- the hook directory twice; the chain ----------------------------------------------------

RECORD_RUN = "import builtins\nbuiltins.RUNS = [*getattr(builtins, 'RUNS', []), {name!r}]\n"
# An older or foreign chaining hook: it runs the first other sitecustomize.py on sys.path, blindly.
NAIVE_CHAINER = RECORD_RUN + (
    "import os, sys\n"
    "here = os.path.dirname(os.path.abspath(__file__))\n"
    "for entry in sys.path:\n"
    "    d = os.path.abspath(entry or os.curdir)\n"
    "    f = os.path.join(d, 'sitecustomize.py')\n"
    "    if d != here and os.path.isfile(f):\n"
    "        m = type(sys)('sitecustomize'); m.__file__ = f\n"
    "        exec(compile(open(f).read(), f, 'exec'), m.__dict__)\n"
    "        break\n"
)
CHAIN_REPORT = (
    "import builtins, json, sys, sitecustomize\n"
    "from kdtree_verify.inject import importhook\n"
    "print(json.dumps({'ran': sys.modules['_kdtree_sitecustomize_record'].ran,\n"
    "  'runs': getattr(builtins, 'RUNS', []),\n"
    "  'finders': sum(isinstance(f, importhook.PostImportFinder) for f in sys.meta_path)}))\n"
)


def hook_dir_twice(tmp_path: Path, how: str) -> Path:
    second = tmp_path / f"hook-{how}"
    if how == "symlink":
        second.symlink_to(EXT_DIR, target_is_directory=True)
    else:
        shutil.copytree(EXT_DIR, second)
    return second


@pytest.mark.parametrize("how", ["symlink", "copy"])
def test_the_hook_directory_reached_twice_runs_once_and_the_distro_hook_still_runs(libs, tmp_path, how):
    second = hook_dir_twice(tmp_path, how)
    for order in ((EXT_DIR, second), (second, EXT_DIR)):
        rc, out, err = run_child(child_env(libs["good"], *order), CHAIN_REPORT)
        assert rc == 0 and "error in sitecustomize" not in err, err
        report = json.loads(out)
        first = str(order[0] / "sitecustomize.py")
        assert report["ran"] == [first, str(DEBIAN_SITECUSTOMIZE)]
        assert report["finders"] == 1


@pytest.mark.parametrize("how", ["symlink", "copy"])
def test_the_hook_directory_reached_twice_patches_once_and_prints_one_marker(libs, tmp_path, how):
    rc, out, err = run_child(child_env(libs["good"], EXT_DIR, hook_dir_twice(tmp_path, how)))
    assert rc == 0, err
    assert status_of(out)["state"] == "active"
    assert [state for _, state in markers(err)] == ["active"]


def test_the_chain_runs_the_next_sitecustomize_not_a_later_one(libs, tmp_path):
    dirs = []
    for name in ("next", "later"):
        d = tmp_path / name
        d.mkdir()
        (d / "sitecustomize.py").write_text(RECORD_RUN.format(name=name))
        dirs.append(d)
    rc, out, err = run_child(child_env(libs["good"], EXT_DIR, *dirs), CHAIN_REPORT)
    assert rc == 0, err
    report = json.loads(out)
    assert report["runs"] == ["next"]
    assert report["ran"] == [HOOK, str(dirs[0] / "sitecustomize.py")]


@pytest.mark.parametrize("first", ["kdtree", "naive"])
def test_a_naive_chaining_hook_next_to_ours_cannot_make_the_chain_recurse(libs, tmp_path, first):
    naive = tmp_path / "naive"
    naive.mkdir()
    (naive / "sitecustomize.py").write_text(NAIVE_CHAINER.format(name="naive"))
    order = (EXT_DIR, naive) if first == "kdtree" else (naive, EXT_DIR)
    rc, out, err = run_child(child_env(libs["good"], *order), CHAIN_REPORT)
    assert rc == 0 and "Error" not in err, err
    report = json.loads(out)
    assert report["runs"] == ["naive"] and report["finders"] == 1
    if first == "naive":  # ours knows the naive one ran (it is importing us) and goes on to Debian's
        assert report["ran"] == [str(naive / "sitecustomize.py"), HOOK, str(DEBIAN_SITECUSTOMIZE)]


# --- the status directory ---------------------------------------------------------------------

PLANT_THEN_IMPORT = (
    "import os, sys\n"
    "d = os.environ['KDTREE_STATUS_DIR']\n"
    "os.symlink(sys.argv[1], os.path.join(d, f'{os.getpid()}.json.tmp'))\n"
    "os.symlink(sys.argv[2], os.path.join(d, f'{os.getpid()}.json'))\n"
)


def test_symlinks_planted_in_the_status_directory_are_replaced_never_followed(libs, tmp_path):
    status_dir = tmp_path / "status"
    status_dir.mkdir(mode=0o755)
    outside = {name: tmp_path / name for name in ("precious-tmp.txt", "precious-final.txt")}
    for path in outside.values():
        path.write_text("must not change\n")
    before = tree(tmp_path, skip=status_dir)
    code = PLANT_THEN_IMPORT + IMPORT_BACKEND
    proc = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", code, *map(str, outside.values())],
        env=child_env(libs["good"], KDTREE_STATUS_DIR=str(status_dir)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    st = status_of(proc.stdout)
    assert tree(tmp_path, skip=status_dir) == before
    final = status_dir / f"{st['pid']}.json"
    assert not final.is_symlink() and json.loads(final.read_text())["state"] == "active"
    # no .tmp left behind; the status publisher wrote <pid>.prom beside it (at exit at the latest)
    assert sorted(p.name for p in status_dir.iterdir()) == [final.name, f"{st['pid']}.prom"]
    assert st["status_file"] == str(final)


def _symlinked_dir(tmp_path: Path) -> Path:
    real = tmp_path / "real-status"
    real.mkdir(mode=0o755)
    link = tmp_path / "status-link"
    link.symlink_to(real, target_is_directory=True)
    return link


def _world_writable_dir(tmp_path: Path) -> Path:
    d = tmp_path / "status-777"
    d.mkdir()
    d.chmod(0o777)
    return d


def _foreign_owned_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    d = tmp_path / "status-nobody"
    d.mkdir(mode=0o755)
    os.chown(d, 65534, 65534)
    return d


def _not_a_directory(tmp_path: Path) -> Path:
    f = tmp_path / "a-file"
    f.write_text("")
    return f / "status"


UNSAFE = {
    "a symlink": (_symlinked_dir, "symlink"),
    "world-writable": (_world_writable_dir, "group- or world-writable"),
    "owned by another user": (_foreign_owned_dir, "owned by uid 65534"),
    "below a file": (_not_a_directory, "Not a directory"),
    "relative": (lambda tmp_path: Path("relative/status"), "not an absolute path"),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_an_unsafe_or_unwritable_status_directory_is_its_own_state_not_a_fallback(libs, tmp_path, case):
    make, reason_part = UNSAFE[case]
    status_dir = make(tmp_path)
    before = tree(tmp_path)
    rc, out, err = run_child(child_env(libs["good"], KDTREE_STATUS_DIR=str(status_dir)), cwd=tmp_path)
    assert rc == 0, err
    st = status_of(out)
    assert st["state"] == "active" and st["status_file"].startswith("unwritable: ")
    assert markers(err) == [(st["pid"], "active")]
    assert not any(marker.match_runtime_fallback(line) for line in err.splitlines())
    (line,) = [line for line in err.splitlines() if line.startswith(marker.STATUS_PREFIX)]
    assert marker.match_status_problem(line) == (st["pid"], "unwritable")
    assert reason_part in marker.unescape(line.split(" reason=", 1)[1])
    assert tree(tmp_path) == before  # nothing written anywhere


# --- the library file -------------------------------------------------------------------------


def _cut(src: Path, dst: Path, size: int) -> Path:
    dst.write_bytes(src.read_bytes()[:size])
    return dst


def _patched(src: Path, dst: Path, offset: int, value: bytes) -> Path:
    data = bytearray(src.read_bytes())
    data[offset : offset + len(value)] = value
    dst.write_bytes(bytes(data))
    return dst


LIBRARY_FAULTS = {
    "cut in half": (lambda good, d: _cut(good, d, good.stat().st_size // 2), "truncated"),
    "one byte short": (lambda good, d: _cut(good, d, good.stat().st_size - 1), "truncated"),
    "only the ELF header": (lambda good, d: _cut(good, d, 64), "truncated"),
    "built for AArch64": (
        lambda good, d: _patched(good, d, 18, (183).to_bytes(2, "little")),
        "built for AArch64",
    ),
    "built for i386": (lambda good, d: _patched(good, d, 18, (3).to_bytes(2, "little")), "built for i386"),
    "32-bit": (lambda good, d: _patched(good, d, 4, b"\x01"), "32-bit ELF"),
    "an executable": (
        lambda good, d: _patched(good, d, 16, (2).to_bytes(2, "little")),
        "not a shared object",
    ),
}


@pytest.mark.parametrize("case", sorted(LIBRARY_FAULTS))
def test_a_cut_or_foreign_library_is_a_clear_fallback_before_dlopen(libs, tmp_path, case):
    make, reason_part = LIBRARY_FAULTS[case]
    lib = make(Path(libs["good"]), tmp_path / "libkdtree_verify.so")
    before = tree(tmp_path)
    rc, out, err = run_child(child_env(lib))
    assert rc == 0, err  # not killed by SIGBUS (-7)
    st = status_of(out)
    assert st["state"] == "fallback" and reason_part in st["reason"] and "dlopen" not in st["reason"], st
    assert markers(err) == [(st["pid"], "fallback")]
    assert tree(tmp_path) == before


def test_a_real_shared_object_of_this_machine_passes_the_elf_check():
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    if os.uname().machine != "x86_64" or not libc.is_file():
        pytest.skip("the x86-64 libc of Debian is the known-good file here")
    assert libfile.problem(str(libc)) == ""


def test_a_real_shared_object_without_our_symbols_passes_the_elf_check_and_fails_later(tmp_path):
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    if os.uname().machine != "x86_64" or not libc.is_file():
        pytest.skip("the x86-64 libc of Debian is the known-good file here")
    rc, out, err = run_child(child_env(libc))
    assert rc == 0, err
    st = status_of(out)
    assert st["state"] == "fallback" and "missing symbol" in st["reason"], st


# --- the tolerance ----------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["nan", "inf", "-1"])
def test_a_non_finite_or_negative_tolerance_is_refused_with_its_own_reason(libs, raw):
    for mode in ("on", "validate"):
        rc, out, err = run_child(child_env(libs["good"], KDTREE_VERIFY=mode, KDTREE_VERIFY_TOL=raw))
        assert rc == 0, err
        st = status_of(out)
        assert st["state"] == "fallback" and st["tol"] == 0.02
        assert re.search(rf"KDTREE_VERIFY_TOL='{re.escape(raw)}' is not a finite number", st["reason"]), st
        assert markers(err) == [(st["pid"], "fallback")]


def test_a_bad_tolerance_does_not_turn_off_into_fallback(libs):
    rc, out, err = run_child(child_env(libs["good"], KDTREE_VERIFY="off", KDTREE_VERIFY_TOL="nan"))
    assert rc == 0, err
    assert status_of(out)["state"] == "off"
