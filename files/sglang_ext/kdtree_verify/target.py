"""What the patch replaces in SGLang: the module, the class, the method, its signature and the releases.

Stdlib-free constants (and two pure functions) only: the post-import hook imports this module at every
interpreter start-up.
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
# How a release's `forward_extend` builds the KVWriteLoc of its `save_kv_cache` branch (dispatch.py
# writes the KV cache the same way in mode on):
# KV_WRITE_FULL_LOC: `KVWriteLoc(forward_batch.out_cache_loc, forward_metadata.swa_out_cache_loc,
#   full_loc=forward_metadata.out_cache_loc_full_physical)` (0.5.21 and older);
# KV_WRITE_FOR_BATCH: `KVWriteLoc.for_batch(forward_batch, swa_loc=forward_metadata.swa_out_cache_loc)`
#   (0.5.22 on: the batch's physical mark travels with the loc).
KV_WRITE_FULL_LOC = "full_loc"
KV_WRITE_FOR_BATCH = "for_batch"
# THE supported window, oldest first: each SGLang release whose TARGET_ATTR the patch mirrors
# (dispatch.py), with the form of its KV write. tests/ext/wheels checks every entry against that
# release's own wheel; docs/operations.md ("SGLang releases") says what differs between them and why
# the window stops at 0.5.18.
SGLANG_RELEASES = {
    "0.5.18": KV_WRITE_FULL_LOC,
    "0.5.19": KV_WRITE_FULL_LOC,
    "0.5.20": KV_WRITE_FULL_LOC,
    "0.5.21": KV_WRITE_FULL_LOC,
    "0.5.22": KV_WRITE_FOR_BATCH,
    "0.5.23": KV_WRITE_FOR_BATCH,
}
# The preflight reads the venv's installed version (its dist-info METADATA) and refuses any other
# unless the operator opts in (kdtree_service_allow_untested_sglang, mode validate only).
SUPPORTED_SGLANG_VERSIONS = tuple(SGLANG_RELEASES)


def release_of(version: str) -> str:
    """The release a version string names: a local build label (PEP 440 "+...", e.g. a distro
    rebuild) keeps the release it was built from."""
    return str(version or "").split("+", 1)[0]


def window_text() -> str:
    """The window as operators read it: "0.5.18 to 0.5.23"."""
    return f"{SUPPORTED_SGLANG_VERSIONS[0]} to {SUPPORTED_SGLANG_VERSIONS[-1]}"


# The reason a process reports (state=fallback) when KDTREE_LIB is empty: the deploy's preflight probes
# before the library is built, and accepts a child patched up to exactly this point.
NO_LIBRARY_REASON = "KDTREE_LIB is not set"
