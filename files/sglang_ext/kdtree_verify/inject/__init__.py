"""How the patch gets into an SGLang process: the post-import hook (sitecustomize mode), the
install/uninstall lifecycle, the `sglang.srt.plugins` entry point and the probe.

Empty on purpose: sitecustomize imports `kdtree_verify.inject.importhook` at every interpreter start-up.
"""
