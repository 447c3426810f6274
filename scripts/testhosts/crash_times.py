"""On the crashed host: when the run's traceback reached the journal, and when kdtree's drop-in was
removed (the rescue's first step; the drop-in directory's mtime), as epoch seconds, one per line."""

import json
import os
import subprocess

out = subprocess.run(
    ["journalctl", "-u", "sglang.service", "-o", "json", "--no-pager"],
    capture_output=True,
    check=True,
    timeout=60,
).stdout
for raw in out.splitlines():
    entry = json.loads(raw)
    message = entry.get("MESSAGE", "")
    if isinstance(message, list):
        message = bytes(message).decode("utf-8", "replace")
    if "Traceback (most recent call last)" in message:
        print(int(entry["__REALTIME_TIMESTAMP"]) / 1e6)
        break
else:
    print("no-traceback")
print(os.stat("/etc/systemd/system/sglang.service.d").st_mtime)
print("present" if os.path.exists("/etc/systemd/system/sglang.service.d/50-kdtree.conf") else "removed")
