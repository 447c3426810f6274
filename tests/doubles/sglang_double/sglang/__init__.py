"""TEST DOUBLE of SGLang's process model and backend module -- NOT the real SGLang engine.

It mirrors what kdtree-fleet depends on in sglang==0.5.23 (see shared/reference/sglang-0.5.23.md):
the `python -m sglang.launch_server` CLI, one scheduler per TP rank started with multiprocessing
spawn, process titles, the `TritonAttnBackend.forward_extend` signature, /health, and the way the
real engine dies when a child fails. Real-engine checks run against the real wheel (make test-sglang).
"""

IS_TEST_DOUBLE = True
__version__ = "0.5.23+testdouble"
