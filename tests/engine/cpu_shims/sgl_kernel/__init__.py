"""CPU shim (test hosts only, not product code): a stand-in for the `sgl_kernel` package.

Only `sgl_kernel.speculative` exists (see `speculative.py`). The package itself exports nothing, so
`from sgl_kernel import <op>` still fails with ImportError, and SGLang's probe
`_is_intel_amx_backend_available()` (which imports sgl_kernel, then looks for
`torch.ops.sgl_kernel.convert_weight_packed`) still answers False.
"""
