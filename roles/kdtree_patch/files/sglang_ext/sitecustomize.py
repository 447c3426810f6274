"""kdtree-verify start-up hook. Put the directory of this file on PYTHONPATH.

Runs in every interpreter started with that environment, SGLang's spawned schedulers included.
It only (1) installs a post-import hook that applies the kdtree patch when SGLang's triton backend
module is imported (nothing of SGLang, torch or CUDA is imported here), and (2) chains to the
`sitecustomize` this file shadows (on Debian/Ubuntu /usr/lib/python3.X/sitecustomize.py), so that
one still runs. Errors are printed with a full traceback on stderr; start-up carries on.

`KDTREE_RAN` lists the sitecustomize files that ran in this process (this one first); the probe
reads it.
"""

import os
import sys

KDTREE_RAN = [__file__]


def _report(what: str) -> None:
    import traceback

    print(f"kdtree-verify: error in sitecustomize ({what}); Python carries on:", file=sys.stderr, flush=True)
    traceback.print_exc()
    sys.stderr.flush()


def _install_hook() -> None:
    from kdtree_verify import importhook

    importhook.install_patch_hook()


def _chain() -> None:
    """Run the next `sitecustomize.py` on sys.path after this file's directory.

    A plain scan and exec (no importlib.util: it would pull contextlib, functools, ... into every
    start-up). The chained file runs as a module named `sitecustomize` with its own `__file__`.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        directory = os.path.abspath(entry or os.curdir)
        if directory == here:
            continue
        candidate = os.path.join(directory, "sitecustomize.py")
        if os.path.isfile(candidate):
            break
    else:
        return
    with open(candidate, "rb") as fh:
        code = compile(fh.read(), candidate, "exec")
    module = type(sys)("sitecustomize")
    module.__file__ = candidate
    KDTREE_RAN.append(candidate)
    exec(code, module.__dict__)


try:
    _install_hook()
except Exception:
    _report("installing the kdtree post-import hook")
try:
    _chain()
except Exception:
    _report("running the shadowed sitecustomize")
