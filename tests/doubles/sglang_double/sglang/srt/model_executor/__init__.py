"""TEST DOUBLE: `sglang.srt.model_executor`."""
