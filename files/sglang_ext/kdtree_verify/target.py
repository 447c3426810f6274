"""What the patch replaces in SGLang 0.5.23: the module, the class, the method and its signature.

Stdlib-free constants only: the post-import hook imports this module at every interpreter start-up.
"""

TARGET_MODULE = "sglang.srt.layers.attention.triton_backend"
TARGET_CLASS = "TritonAttnBackend"
TARGET_ATTR = "forward_extend"
# The signature the patch was written for (sglang==0.5.23, triton_backend.py `forward_extend`).
EXPECTED_PARAMS = (
    "self",
    "q",
    "k",
    "v",
    "layer",
    "forward_batch",
    "save_kv_cache",
    "sinks",
    "score_mod",
    "aux_tensors",
)
# The `--attention-backend` value whose class is TARGET_CLASS: the deploy's preflight refuses a unit
# that runs another backend (the patch would never be called).
SERVED_BACKEND = "triton"
# SGLang releases whose TARGET_ATTR the patch mirrors (dispatch.py); the preflight reads the venv's
# installed version (importlib.metadata) and refuses any other.
SUPPORTED_SGLANG_VERSIONS = ("0.5.23",)
# The reason a process reports (state=fallback) when KDTREE_LIB is empty: the deploy's preflight probes
# before the library is built, and accepts a child patched up to exactly this point.
NO_LIBRARY_REASON = "KDTREE_LIB is not set"
