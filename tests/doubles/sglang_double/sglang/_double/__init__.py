"""TEST DOUBLE internals: the process model of `python -m sglang.launch_server` (sglang==0.5.23).

Not the real SGLang engine. Everything here exists so that kdtree-fleet can be tested on hosts
without a GPU: the parent/child process layout, process titles, log prefixes, the HTTP health
behaviour and the way the real engine dies when a child fails. See `engine.py` for what is
mirrored and which environment knobs (SGLANG_DOUBLE_*) inject failures.
"""
