"""Continuous traffic through SGLang's router during a rollout, and what the hosts saw of it (issue 25).

  traffic.py router-start --state DIR --worker URL... [--disable-retries]
      start sglang-router 0.3.2 (KDTREE_ROUTER_VENV, default .cache/router-venv) on 127.0.0.1 (free
      ports; key from $KDTREE_TRAFFIC_KEY), wait until it lists every worker healthy; DIR/router.json
  traffic.py router-stop --state DIR
  traffic.py start --state DIR [--threads N] [--max-s S]
      a bounded client in the background: N threads, one POST /generate at a time each, through the
      router of DIR, until `stop` or S seconds (default 1800); it also samples the router's
      GET /workers every 0.1 s
  traffic.py stop --state DIR     -> prints DIR/traffic.json (sent, answered, failed, membership)
  traffic.py check --state DIR --log URL=PATH...
      read each host's request log (the double's SGLANG_DOUBLE_REQUEST_LOG, fetched to PATH) against
      the traffic: per host the requests that arrived, those cut (arrived, never answered: stopped in
      flight) and those that reached it while the router did not list it (between its drain and its
      rejoin); prints JSON

Standard library only; every request has a timeout. Times are epoch seconds: the test hosts are
containers on this machine's clock.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

LOG = logging.getLogger("traffic")
ROOT = Path(__file__).resolve().parents[2]
KEY_ENV = "KDTREE_TRAFFIC_KEY"
SAMPLE_S = 0.1
# a request the router sent just before its removal showed in GET /workers may arrive after the
# sample that saw it gone; it is still one the drain's in-flight wait covers
GRACE_S = 0.5


def _key() -> str:
    return os.environ.get(KEY_ENV, "")


def _headers() -> dict[str, str]:
    key = _key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def norm(url: str) -> str:
    """A worker URL as the router lists it and the checks compare it."""
    return url.strip().rstrip("/").lower()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listed(router_url: str, timeout_s: float = 5) -> dict[str, bool]:
    """The router's GET /workers as {worker URL: healthy}; OSError/ValueError when it cannot tell."""
    req = urllib.request.Request(router_url + "/workers", headers=_headers())
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        data = json.loads(resp.read())
    return {norm(w["url"]): bool(w.get("is_healthy")) for w in data["workers"]}


def router_start(state: Path, workers: list[str], disable_retries: bool) -> dict:
    venv = Path(os.environ.get("KDTREE_ROUTER_VENV", ROOT / ".cache" / "router-venv"))
    port = _free_port()
    cmd = [str(venv / "bin" / "sglang-router"), "launch", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(_free_port())]
    cmd += ["--policy", "round_robin", "--worker-urls", *workers]
    cmd += ["--api-key", _key()] if _key() else []
    cmd += ["--disable-retries"] if disable_retries else []
    state.mkdir(parents=True, exist_ok=True)
    with (state / "router.log").open("a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    info = {"url": f"http://127.0.0.1:{port}", "pid": proc.pid, "retries": not disable_retries}
    deadline = time.monotonic() + 60
    while True:
        try:
            seen = listed(info["url"], 2)
            if all(seen.get(norm(w)) for w in workers):
                break
        except (OSError, ValueError, KeyError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
            tail = (state / "router.log").read_text()[-2000:]
            raise SystemExit(f"traffic: router did not list {workers} healthy within 60 s:\n{tail}")
        time.sleep(0.2)
    (state / "router.json").write_text(json.dumps(info))
    return info


def router_stop(state: Path) -> None:
    path = state / "router.json"
    if not path.exists():
        return
    pid = json.loads(path.read_text())["pid"]
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    path.unlink()


class Traffic:
    """The bounded client: `threads` loops of one POST /generate at a time, counted, and a sampler of
    the router's worker list (membership changes with the times of the samples around them)."""

    def __init__(
        self,
        router_url: str,
        threads: int = 4,
        request_timeout_s: float = 30,
        payload: dict | None = None,
        backoff_s: float = 0.0,
    ) -> None:
        """`payload`: the POST /generate body (default: one token, not streamed); `backoff_s`: a pause
        after a failed request (a host restarting: no busy loop)."""
        self.url = router_url.rstrip("/")
        self.threads = threads
        self.request_timeout_s = request_timeout_s
        self.payload = payload or {"text": "hi", "sampling_params": {"max_new_tokens": 1}}
        self.backoff_s = backoff_s
        self.sent = 0
        self.answered = 0
        self.failures: Counter[str] = Counter()
        self.changes: list[dict] = []
        self.sample_errors = 0
        self.started = self.ended = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._running: list[threading.Thread] = []

    def _loop(self) -> None:
        body = json.dumps(self.payload).encode()
        headers = {**_headers(), "Content-Type": "application/json"}
        while not self._stop.is_set():
            with self._lock:
                self.sent += 1
            req = urllib.request.Request(self.url + "/generate", data=body, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.request_timeout_s) as resp:
                    resp.read()
                with self._lock:
                    self.answered += 1
            except urllib.error.HTTPError as exc:
                with self._lock:
                    self.failures[f"HTTP {exc.code}"] += 1
            except (OSError, ValueError) as exc:
                with self._lock:
                    self.failures[type(exc).__name__ + ": " + str(exc)[:80]] += 1
            else:
                continue
            if self.backoff_s:
                time.sleep(self.backoff_s)

    def _sample(self) -> None:
        before: set[str] | None = None
        prev_t = 0.0
        while not self._stop.is_set():
            asked = time.time()
            try:
                now = set(listed(self.url, 2))
            except (OSError, ValueError, KeyError):
                self.sample_errors += 1
                time.sleep(SAMPLE_S)
                continue
            # the list was true at some moment between asked and answered: a change is recorded with
            # the answer's time ("t", the latest it can have happened) and the time the sample before it
            # was asked ("prev_t", the earliest moment the list before the change was still seen)
            if before is None or now != before:
                self.changes.append({"t": time.time(), "prev_t": prev_t, "listed": sorted(now)})
            before, prev_t = now, asked
            time.sleep(SAMPLE_S)

    def __enter__(self) -> Traffic:
        self.started = time.time()
        for target in [self._sample] + [self._loop] * self.threads:
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._running.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._running:
            thread.join(timeout=self.request_timeout_s + 5)
        self.ended = time.time()

    def summary(self) -> dict:
        return {
            "router": self.url,
            "started": self.started,
            "ended": self.ended,
            "sent": self.sent,
            "answered": self.answered,
            "failed": sum(self.failures.values()),
            "failures": dict(self.failures.most_common(5)),
            "sample_errors": self.sample_errors,
            "changes": self.changes,
        }


def out_windows(summary: dict, worker: str) -> list[tuple[float, float]]:
    """When the router did not list `worker`, as [first sample without it, last sample without it]
    (it may have left up to one sample earlier and come back up to one sample later). A window still
    open at the end closes at the traffic's end."""
    want = norm(worker)
    windows: list[tuple[float, float]] = []
    gone_at: float | None = None
    for change in summary["changes"]:
        there = want in change["listed"]
        if not there and gone_at is None:
            gone_at = change["t"]
        elif there and gone_at is not None:
            windows.append((gone_at, change["prev_t"]))
            gone_at = None
    if gone_at is not None:
        windows.append((gone_at, summary["ended"]))
    return windows


def check(summary: dict, logs: dict[str, Path], grace_s: float = GRACE_S) -> dict:
    """Per host: the routed requests that arrived during the traffic, those cut, the out windows, and
    the requests that arrived in a window later than grace_s after it opened. Refuses (SystemExit) when
    the sampler could not tell the router's list or a log is missing: odd evidence is never zero."""
    if not summary["changes"]:
        raise SystemExit("traffic: the router's worker list was never sampled; nothing can be checked")
    hosts = {}
    for worker, path in logs.items():
        if not path.is_file():
            raise SystemExit(f"traffic: no request log for {worker} at {path}")
        arrived: dict[str, float] = {}
        answered: set[str] = set()
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if not entry["ready"]:
                continue  # the server's own warm-up request, not routed traffic
            if not summary["started"] <= entry["t"] <= summary["ended"] + 60:
                continue
            if entry["event"] == "arrived":
                arrived[entry["id"]] = entry["t"]
            elif entry["event"] == "answered":
                answered.add(entry["id"])
        windows = out_windows(summary, worker)
        late = [t for t in arrived.values() if any(start + grace_s <= t <= end for start, end in windows)]
        hosts[worker] = {
            "arrived": len(arrived),
            "cut": len(set(arrived) - answered),
            "out_windows": [round(end - start, 2) for start, end in windows],
            "reached_while_out": len(late),
        }
    return {
        "sent": summary["sent"],
        "answered": summary["answered"],
        "failed": summary["failed"],
        "failures": summary["failures"],
        "cut": sum(h["cut"] for h in hosts.values()),
        "reached_while_out": sum(h["reached_while_out"] for h in hosts.values()),
        "hosts": hosts,
    }


def _run(state: Path, threads: int, max_s: float) -> None:
    router = json.loads((state / "router.json").read_text())
    stop = state / "traffic.stop"
    with Traffic(router["url"], threads) as traffic:
        (state / "traffic.started").write_text(str(os.getpid()))
        deadline = time.monotonic() + max_s
        while not stop.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    (state / "traffic.json.tmp").write_text(json.dumps(traffic.summary()))
    (state / "traffic.json.tmp").rename(state / "traffic.json")


def start(state: Path, threads: int, max_s: float) -> None:
    for name in ("traffic.stop", "traffic.json", "traffic.started"):
        (state / name).unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "_run", "--state", str(state), "--threads", str(threads)]
    cmd += ["--max-s", str(max_s)]
    with (state / "traffic.log").open("a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(100):
        if (state / "traffic.started").exists():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"traffic: the client did not start:\n{(state / 'traffic.log').read_text()[-2000:]}")


def stop(state: Path) -> dict:
    (state / "traffic.stop").touch()
    for _ in range(600):
        if (state / "traffic.json").exists():
            return json.loads((state / "traffic.json").read_text())
        time.sleep(0.1)
    raise SystemExit("traffic: the client did not stop within 60 s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("router-start", "router-stop", "start", "_run", "stop", "check"):
        p = sub.add_parser(name)
        p.add_argument("--state", type=Path, required=True)
        if name == "router-start":
            p.add_argument("--worker", action="append", required=True)
            p.add_argument("--disable-retries", action="store_true")
        if name in ("start", "_run"):
            p.add_argument("--threads", type=int, default=4)
            p.add_argument("--max-s", type=float, default=1800)
        if name == "check":
            p.add_argument("--log", action="append", required=True, help="WORKER_URL=PATH")
            p.add_argument("--grace-s", type=float, default=GRACE_S)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="traffic: %(message)s")
    if args.cmd == "router-start":
        print(json.dumps(router_start(args.state, args.worker, args.disable_retries)))
    elif args.cmd == "router-stop":
        router_stop(args.state)
    elif args.cmd == "start":
        start(args.state, args.threads, args.max_s)
    elif args.cmd == "_run":
        _run(args.state, args.threads, args.max_s)
    elif args.cmd == "stop":
        print(json.dumps(stop(args.state)))
    else:
        logs = dict(item.split("=", 1) for item in args.log)
        summary = json.loads((args.state / "traffic.json").read_text())
        print(json.dumps(check(summary, {k: Path(v) for k, v in logs.items()}, args.grace_s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
