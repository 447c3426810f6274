"""Read a local test host's state with `podman exec` (shared by the summary and the benchmarks)."""

from __future__ import annotations

import json
import subprocess

# Runs inside a host: the build, the unit, /health and each scheduler's marker state, as JSON.
HOST_SCRIPT = r"""
import json, os, re, subprocess, urllib.request
def sh(*a):
    return subprocess.run(a, capture_output=True, text=True).stdout.strip()
props = dict(l.split("=", 1) for l in sh("systemctl", "show", "-p",
             "ActiveState,InvocationID,DropInPaths", "sglang.service").splitlines() if "=" in l)
try:
    health = str(urllib.request.urlopen("http://127.0.0.1:30000/health", timeout=3).status)
except Exception as exc:
    health = getattr(exc, "code", None) and str(exc.code) or "down"
inv = props.get("InvocationID", "")
lines = sh("journalctl", "-o", "cat", "--no-pager", "_SYSTEMD_INVOCATION_ID=" + inv).splitlines()
states = {}
for line in lines:
    m = re.match(r"^kdtree-verify: pid=(\d+) .* state=(\w+) ", line)
    if m:
        states[int(m.group(1))] = m.group(2)
schedulers = []
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        title = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode()
    except OSError:
        continue
    if title.startswith("sglang::scheduler"):
        schedulers.append({"pid": pid, "title": title, "marker": states.get(pid, "none")})
info = {}
try:
    info = dict(l.split("=", 1) for l in open("/opt/kdtree/current/BUILD_INFO").read().split())
except OSError:
    pass
dropin = "50-kdtree.conf" in props.get("DropInPaths", "")
print(json.dumps({"active": props.get("ActiveState"), "dropin": dropin,
                  "health": health, "build": info.get("id", "-"), "arch": info.get("arch", "-"),
                  "schedulers": schedulers}))
"""


def read_host(name: str) -> dict:
    """State of one podman test host; {'error': ...} when it cannot be read."""
    proc = subprocess.run(
        ["podman", "exec", "-i", name, "python3", "-"],
        input=HOST_SCRIPT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip() or f"podman exec rc={proc.returncode}"}
    return json.loads(proc.stdout)
