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
