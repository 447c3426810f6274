"""TEST DOUBLE: `sglang.srt.mem_cache`."""
