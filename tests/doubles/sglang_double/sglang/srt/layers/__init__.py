"""TEST DOUBLE: `sglang.srt.layers`."""
