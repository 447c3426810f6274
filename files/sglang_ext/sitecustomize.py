"""kdtree-verify start-up hook. Put the directory of this file on PYTHONPATH.

Runs in every interpreter started with that environment, SGLang's spawned schedulers included.
It only (1) installs a post-import hook that applies the kdtree patch when SGLang's triton backend
module is imported (nothing of SGLang, torch or CUDA is imported here), and (2) chains to the
`sitecustomize` this file shadows (on Debian/Ubuntu /usr/lib/python3.X/sitecustomize.py), so that
one still runs. Errors are printed with a full traceback on stderr; start-up carries on, and so
does it when stderr itself is broken (the report is lost, never the interpreter).

The chain follows file identity: the next `sitecustomize.py` on sys.path that is not a file that
already ran in this process (same inode, or the same bytes: this directory reached twice through a
symlink, or a second copy of it) runs, once. A kdtree hook file that already started in this
process does nothing when it is reached again, so the chain cannot recurse.

`KDTREE_RAN` lists the sitecustomize files that ran in this process (this one first); the probe
reads it. Every copy of this hook in the process shares one record (`KDTREE_RAN` and
`KDTREE_STARTED`, kept in `sys.modules["_kdtree_sitecustomize_record"]`), so another version of the
hook that chains back to this file does not start it twice.
"""

import os
import sys

# One record per process, whichever copy of this hook runs and whoever chained to it.
_RECORD_NAME = "_kdtree_sitecustomize_record"
_record = sys.modules.get(_RECORD_NAME)
if _record is None:
    _record = type(sys)(_RECORD_NAME)
    _record.ran, _record.started = [], []  # sitecustomize files that ran; kdtree hook files that started
    sys.modules[_RECORD_NAME] = _record
KDTREE_RAN, KDTREE_STARTED = _record.ran, _record.started
_outer = sys.modules.get("sitecustomize")
_outer_file = getattr(_outer, "__file__", None)
if _outer is not None and vars(_outer) is not globals() and isinstance(_outer_file, str):
    if _outer_file not in KDTREE_RAN:  # the file Python imported (it chained to this one) runs now
        KDTREE_RAN.append(_outer_file)
del _record, _outer, _outer_file


def _say(text: str) -> None:
    """Like kdtree_verify.telemetry.marker.say (which may be what is broken): to stderr's descriptor, never
    raising, so a failed write leaves nothing buffered to fail again at exit."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            stream.write(text)
            stream.flush()
            return
        try:
            stream.flush()
        except Exception:
            pass
        raw = text.encode("utf-8", "backslashreplace")
        while raw:
            raw = raw[os.write(fd, raw) :]
    except Exception:
        pass


def _report(what: str) -> None:
    try:
        import traceback

        detail = traceback.format_exc()
    except Exception:
        detail = f"{sys.exc_info()[1]!r}\n"
    _say(f"kdtree-verify: error in sitecustomize ({what}); Python carries on:\n{detail}")


def _same_file(a: str, b: str) -> bool:
    """The same inode, or the same bytes (a second copy)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
            return True
        if sa.st_size != sb.st_size:
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            return fa.read() == fb.read()
    except OSError:
        return False


def _in(path: str, record: list) -> bool:
    return any(_same_file(path, done) for done in record)


def _install_hook() -> None:
    from kdtree_verify.inject import importhook

    importhook.install_patch_hook()


def _next_sitecustomize() -> str | None:
    """The first `sitecustomize.py` on sys.path that did not run yet: the one Python would have
    imported had the files that ran not been there.

    A plain scan (no importlib.util: it would pull contextlib, functools, ... into every start-up).
    """
    candidates = []
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or os.curdir), "sitecustomize.py")
        if candidate not in candidates and os.path.isfile(candidate):
            candidates.append(candidate)
    fresh = [path for path in candidates if not _in(path, KDTREE_RAN)]
    return fresh[0] if fresh else None


def _chain() -> None:
    """Run the next `sitecustomize.py` as a module named `sitecustomize` with its own `__file__`."""
    candidate = _next_sitecustomize()
    if candidate is None:
        return
    with open(candidate, "rb") as fh:
        code = compile(fh.read(), candidate, "exec")
    module = type(sys)("sitecustomize")
    module.__file__ = candidate
    KDTREE_RAN.append(candidate)
    exec(code, module.__dict__)


if not _in(__file__, KDTREE_STARTED):  # a kdtree hook file runs once per process, however reached
    KDTREE_STARTED.append(__file__)
    if not _in(__file__, KDTREE_RAN):
        KDTREE_RAN.append(__file__)
    try:
        _install_hook()
    except Exception:
        _report("installing the kdtree post-import hook")
    try:
        _chain()
    except Exception:
        _report("running the shadowed sitecustomize")
