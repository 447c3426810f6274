"""TEST DOUBLE failure and timing knobs, read from the environment (children inherit them)."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass


def _float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    return float(raw)


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def _rank(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else None


def _choice(name: str, choices: tuple[str, ...]) -> str:
    """One of `choices` (the first when unset); anything else is an error, not a silent default."""
    raw = os.environ.get(name, "").strip() or choices[0]
    if raw not in choices:
        raise ValueError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return raw


def per_host(name: str) -> str:
    """The value of a traffic knob for this host: `VALUE` for every host, or `[VALUE,]HOST=VALUE,...`
    where a HOST entry naming this host (its hostname) wins over the plain VALUE (one inventory value
    can slow one host of a batch and leave the others as they are). "" when none applies."""
    plain, mine = "", ""
    for item in os.environ.get(name, "").split(","):
        host, sep, value = item.strip().rpartition("=")
        if not sep:
            plain = value
        elif host == socket.gethostname():
            mine = value
    return (mine or plain).strip()


def _host_float(name: str, default: float, low: float, high: float = math.inf) -> float:
    raw = per_host(name)
    value = float(raw) if raw else default
    if not low <= value <= high:  # a typo must not pass as a plausible figure
        raise ValueError(f"{name}: {value:g} is outside [{low:g}, {high:g}]")
    return value


def _output_tokens() -> int | None:
    raw = per_host("SGLANG_DOUBLE_OUTPUT_TOKENS")
    if raw == "max_new_tokens":
        return None
    value = int(raw) if raw else 1
    if value < 1:
        raise ValueError(
            f"SGLANG_DOUBLE_OUTPUT_TOKENS: {value} is not a token count (>= 1 or max_new_tokens)"
        )
    return value


@dataclass(frozen=True)
class Knobs:
    load_seconds: float  # simulated weight loading per scheduler
    warmup_seconds: float  # between binding HTTP and "ready to roll"
    crash_after: float | None  # seconds after the scheduler starts; None = never
    crash_rank: int | None  # the TP rank that crashes; None: this node's first scheduler (TP 0 on one node)
    hang: bool  # one rank never becomes ready
    hang_rank: int | None  # as crash_rank
    # journal robustness (the smoke check's watcher): before the attention backend is imported
    log_bytes: bool = False  # stderr gets bytes that are not UTF-8 and a 100 KiB line
    benign_traceback: bool = False  # SGLang's logged OpenAIServingResponses init traceback
    flood_lines: int = 0  # this many lines, so journald's rate limiting drops the marker after them
    # each POST /generate takes this long (requests really in flight during a drain or a restart)
    generate_seconds: float = 0.0
    # JSON lines, one when each POST /generate arrives and one when it is answered (the request log the
    # drain tests read: which requests reached this host, and when)
    request_log: str = ""
    # multi-node (--nnodes > 1): how long a node waits for the process group to form (torch's TCPStore
    # timeout, 300 s), what node 0 does when a peer node goes away ("exit": its scheduler raises and the
    # launcher exits peer_loss_exit_seconds later, as the CPU engine over gloo; "hang": it blocks, /health
    # stops answering 200 and the process lives, as reported over NCCL)
    dist_timeout: float = 300.0
    peer_loss: str = "exit"
    peer_loss_exit_seconds: float = 5.0
    # traffic (POST /generate and what /metrics reports of it), each per host (per_host):
    # tokens each answer has (None: the request's max_new_tokens, SGLang's 128 when it sets none)
    output_tokens: int | None = 1
    token_seconds: float = 0.0  # each generated token takes this long (after generate_seconds)
    error_share: float = 0.0  # this share of the requests served once ready fails (aborted)
    accept_length: float = 0.0  # sglang:spec_accept_length (0: SGLang's value without speculative decoding)

    @classmethod
    def from_env(cls) -> Knobs:
        return cls(
            load_seconds=_float("SGLANG_DOUBLE_LOAD_SECONDS", 2.0) or 0.0,
            warmup_seconds=_float("SGLANG_DOUBLE_WARMUP_SECONDS", 0.5) or 0.0,
            # SGLANG_DOUBLE_CRASH_HOST: only that host crashes (one inventory value for a whole batch)
            crash_after=_float("SGLANG_DOUBLE_CRASH_AFTER", None)
            if os.environ.get("SGLANG_DOUBLE_CRASH_HOST", "") in ("", socket.gethostname())
            else None,
            crash_rank=_rank("SGLANG_DOUBLE_CRASH_RANK"),
            hang=os.environ.get("SGLANG_DOUBLE_HANG", "") not in ("", "0"),
            hang_rank=_rank("SGLANG_DOUBLE_HANG_RANK"),
            log_bytes=os.environ.get("SGLANG_DOUBLE_LOG_BYTES", "") not in ("", "0"),
            benign_traceback=os.environ.get("SGLANG_DOUBLE_BENIGN_TRACEBACK", "") not in ("", "0"),
            flood_lines=_int("SGLANG_DOUBLE_FLOOD_LINES", 0),
            generate_seconds=_float("SGLANG_DOUBLE_GENERATE_SECONDS", 0.0) or 0.0,
            request_log=os.environ.get("SGLANG_DOUBLE_REQUEST_LOG", "").strip(),
            dist_timeout=_float("SGLANG_DOUBLE_DIST_TIMEOUT", 300.0) or 0.0,
            peer_loss=_choice("SGLANG_DOUBLE_PEER_LOSS", ("exit", "hang")),
            peer_loss_exit_seconds=_float("SGLANG_DOUBLE_PEER_LOSS_EXIT_SECONDS", 5.0) or 0.0,
            output_tokens=_output_tokens(),
            token_seconds=_host_float("SGLANG_DOUBLE_TOKEN_SECONDS", 0.0, 0.0),
            error_share=_host_float("SGLANG_DOUBLE_ERROR_SHARE", 0.0, 0.0, 1.0),
            accept_length=_host_float("SGLANG_DOUBLE_ACCEPT_LENGTH", 0.0, 0.0),
        )
