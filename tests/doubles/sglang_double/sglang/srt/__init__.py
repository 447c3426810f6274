"""TEST DOUBLE: `sglang.srt` of sglang==0.5.23 (only what kdtree-fleet touches)."""
