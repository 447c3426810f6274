"""TEST DOUBLE: `sglang.srt.layers.attention`."""
