"""CPU shim (test hosts only, not product code): a stand-in for the `vllm` package.

Exists only so that `vllm._custom_ops` can be imported; see `_custom_ops.py`. `vllm.logger` and every
other submodule stay absent, so SGLang's `try: import ...; except ImportError` probes of them behave
as without vllm.
"""
