"""The bake between batches: one host's figures over a window of real traffic, and the verdict that
compares a baked host with its reference hosts (docs/bake.md).

A window's figures (FIGURES, each defined here once):

requests       requests SGLang finished in the window: the increase of `sglang:num_requests_total`
               (REQUESTS_METRIC), summed over its series.
error_rate     aborted / finished requests in the window: the increase of
               `sglang:num_aborted_requests_total` (ABORTED_METRIC) over `requests`; absent aborted
               series with requests published count as no abort (SGLang creates the series on the
               first abort). None without a finished request.
itl_samples    inter-token latencies observed in the window (the histogram's count increase): the
               generated tokens the latency figures stand on.
itl_mean_s     mean inter-token latency: sum increase / count increase of
               `sglang:inter_token_latency_seconds` (module_utils/_decode.itl_mean, its one owner).
itl_high_s     the high quantile (the `quantile` threshold, 0.99 by default) of the same histogram's
               bucket increases, interpolated within a bucket as PromQL's histogram_quantile does.
accept_length  `sglang:spec_accept_length` at the window's end (module_utils/_decode.accept_length).
fallbacks      kdtree runtime fallbacks in the window: the increase of
               `kdtree_verify_runtime_fallbacks_total` (the patch publishes it at 0 from its first write).
mismatches     validate mismatches in the window: the increase of
               `kdtree_verify_validate_mismatches_total` (published in mode validate only).

A window is a Window: the raw increases (so that the reference hosts pool into one window: sums of
counters and buckets, never a mean of means) and why a part is missing. Two sources fill it, one
owner each: window_from_scrapes() here (two /metrics texts read through the host, as the smoke check
does) and plugin_utils/_bake_prom.window() (the operator's Prometheus; the PromQL lives there).

judge() is the verdict, pure: a baked host's window against its reference window and the thresholds
(THRESHOLDS, documented in kdtree_deploy's argument spec). Its verdicts (VERDICTS):

pass                 every check holds.
fail                 a check does not hold: more fallbacks or mismatches than allowed (judged even on
                     little traffic: one is evidence), or, with enough traffic, a higher error rate,
                     a slower mean or high-quantile inter-token latency, a shorter accept length than
                     the reference's beyond its threshold.
not_enough_traffic   the baked host or the reference served fewer than min_requests requests or
                     min_tokens inter-token samples: nothing to judge, never a pass.
refused              evidence is missing or odd (a counter that fell, a NaN, a series that vanished, no
                     reference host, a figure a check needs that is not published): never a pass.

Controller only (kdtree_deploy's bake, the kdtree_bake_* filters); stdlib and module_utils.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _bake_record as bake_record
from ansible_collections.kdtree.fleet.plugins.module_utils import _decode as decode

REQUESTS_METRIC = "sglang:num_requests_total"
ABORTED_METRIC = "sglang:num_aborted_requests_total"
ITL_BUCKET_METRIC = f"{decode.ITL_METRIC}_bucket"
FALLBACKS_METRIC = "kdtree_verify_runtime_fallbacks_total"
MISMATCHES_METRIC = "kdtree_verify_validate_mismatches_total"

FIGURES = bake_record.FIGURES
VERDICTS = bake_record.VERDICTS

# The thresholds and their defaults; kdtree_deploy's argument spec documents each (the role's
# defaults pass these values; a test pins that they agree).
THRESHOLDS: dict[str, float] = {
    "min_requests": 20,  # requests each side must have served in the window
    "min_tokens": 200,  # inter-token samples each side must have observed
    "error_rate_pp": 1.0,  # error rate at most this many percentage points above the reference's
    "itl_mean_pct": 10.0,  # mean inter-token latency at most this % above the reference's
    "itl_high_pct": 20.0,  # the high quantile at most this % above the reference's
    "quantile": 0.99,  # which quantile itl_high_s is
    "accept_length_pct": 5.0,  # accept length at most this % below the reference's
    "max_fallbacks": 0,  # runtime fallbacks the baked host may have in the window
    "max_mismatches": 0,  # validate mismatches the baked host may have in the window
}
_COUNT_THRESHOLDS = ("min_requests", "min_tokens", "max_fallbacks", "max_mismatches")

_LE = re.compile(r'(?:^|[{,])\s*le="([^"]*)"')


class BakeInputError(ValueError):
    """An input the bake cannot read (never guessed)."""


@dataclass
class Window:
    """The raw increases of one host (or of the pooled reference hosts) over a bake window.

    A counter part is None when it is not published (why[part] says why); `refused` names odd
    evidence (the whole window is then no evidence)."""

    requests: float | None = None
    aborted: float | None = None
    itl_sum: float | None = None
    itl_count: float | None = None
    buckets: dict[float, float] | None = None  # upper bound (inf included) -> cumulative increase
    accept_lengths: list[float] = field(default_factory=list)
    fallbacks: float | None = None
    mismatches: float | None = None
    hosts: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)
    refused: str = ""
    # False: the host's /metrics answered with no SGLang series at all (a serving group's node of rank
    # > 0 serves none; its rank 0 serves the group's traffic): pool() leaves it out of a reference
    serves: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "aborted": self.aborted,
            "itl_sum": self.itl_sum,
            "itl_count": self.itl_count,
            "buckets": None
            if self.buckets is None
            else {("+Inf" if math.isinf(le) else repr(le)): v for le, v in sorted(self.buckets.items())},
            "accept_lengths": list(self.accept_lengths),
            "fallbacks": self.fallbacks,
            "mismatches": self.mismatches,
            "hosts": list(self.hosts),
            "why": dict(self.why),
            "refused": self.refused,
            "serves": self.serves,
        }

    @classmethod
    def from_dict(cls, value: Any) -> Window:
        """A window as as_dict() wrote it (through Ansible facts); BakeInputError otherwise."""
        if not isinstance(value, dict):
            raise BakeInputError(f"a bake window must be a dict, not {type(value).__name__}")
        out = cls(
            hosts=[str(h) for h in value.get("hosts") or []],
            refused=str(value.get("refused") or ""),
            serves=value.get("serves", True) is not False,
        )
        for key in ("requests", "aborted", "itl_sum", "itl_count", "fallbacks", "mismatches"):
            setattr(out, key, _number(value.get(key), key, optional=True))
        raw = value.get("buckets")
        if raw is not None:
            if not isinstance(raw, dict):
                raise BakeInputError(f"bake window buckets must map bounds to counts, got {raw!r}")
            out.buckets = {bound(le): _number(v, f"bucket {le}") for le, v in raw.items()}
        lengths = value.get("accept_lengths") or []
        if not isinstance(lengths, list):
            raise BakeInputError(f"bake window accept_lengths must be a list, got {lengths!r}")
        out.accept_lengths = [_number(v, "accept_length") for v in lengths]
        why = value.get("why") or {}
        if not isinstance(why, dict):
            raise BakeInputError(f"bake window why must be a dict, got {why!r}")
        out.why = {str(k): str(v) for k, v in why.items()}
        return out


def _number(value: Any, what: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise BakeInputError(f"bake figure {what} {value!r} is not a finite number >= 0")
    return float(value)


def bound(text: str) -> float:
    """A histogram upper bound (le) as a number (+Inf included); BakeInputError otherwise."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise BakeInputError(f"histogram bound {text!r} is not a number") from None
    if math.isnan(value):
        raise BakeInputError(f"histogram bound {text!r} is not a number")
    return value


# ---------------------------------------------------------------------------------------------
# the window from two /metrics texts


def _counter_increase(
    before: dict[str, float], after: dict[str, float], name: str
) -> tuple[float | None, str]:
    """(the increase summed over the series, "" ) or (None, why refused); (None, "") when absent."""
    if not after and not before:
        return None, ""
    total = 0.0
    for labels in sorted({*before, *after}):
        if labels not in after:
            return None, f"{name}{labels} vanished (a restart?)"
        new, old = after[labels], before.get(labels, 0.0)
        for value in (new, old):
            if not math.isfinite(value) or value < 0:
                return None, f"{name}{labels} {value} is not a finite number >= 0"
        if new < old:
            return None, f"{name}{labels} fell {old:g} -> {new:g} (a reset)"
        total += new - old
    return total, ""


def _bucket_increases(
    before: dict[str, float], after: dict[str, float]
) -> tuple[dict[float, float] | None, str]:
    """The histogram's cumulative bucket increases by upper bound, summed over its other labels."""
    increases, why = {}, ""
    for labels in sorted({*before, *after}):
        match = _LE.search(labels)
        if match is None:
            return None, f"{ITL_BUCKET_METRIC}{labels} has no le label"
        try:
            upper = bound(match.group(1))
        except BakeInputError as err:
            return None, str(err)
        one, why = _counter_increase(
            {labels: before[labels]} if labels in before else {},
            {labels: after[labels]} if labels in after else {},
            ITL_BUCKET_METRIC,
        )
        if one is None:
            return None, why
        increases[upper] = increases.get(upper, 0.0) + one
    return (increases or None), ""


def _is_sglang(line: str) -> bool:
    return line.startswith("sglang:")


def window_from_scrapes(host: str, before: str | None, after: str | None, unread: str = "") -> Window:
    """The window of one host from its /metrics texts at the start and end of the bake (None: that
    read failed, `unread` says why)."""
    out = Window(hosts=[host])
    if before is None or after is None:
        when = "start" if before is None else "end"
        out.refused = f"/metrics not read at the bake's {when}" + (f": {unread}" if unread else "")
        return out
    names = [REQUESTS_METRIC, ABORTED_METRIC, FALLBACKS_METRIC, MISMATCHES_METRIC, ITL_BUCKET_METRIC]
    if not any(_is_sglang(line) for line in (before + "\n" + after).splitlines()):
        out.serves = False
        out.why["serves"] = "/metrics has no SGLang series (a serving group's node of rank > 0)"
        return out
    old, new = decode.samples(before, names), decode.samples(after, names)
    for part, name in (
        ("requests", REQUESTS_METRIC),
        ("aborted", ABORTED_METRIC),
        ("fallbacks", FALLBACKS_METRIC),
        ("mismatches", MISMATCHES_METRIC),
    ):
        value, why = _counter_increase(old[name], new[name], name)
        if why:
            out.refused = why
            return out
        setattr(out, part, value)
        if value is None:
            out.why[part] = f"{decode.NOT_PUBLISHED} ({name} absent)"
    itl, samples_n = decode.itl_mean(before, after)
    if itl.why.startswith("refused"):
        out.refused = itl.why.removeprefix("refused: ")
        return out
    if itl.value is not None or samples_n == 0:
        sums = (
            decode.samples(before, [f"{decode.ITL_METRIC}_sum"]),
            decode.samples(after, [f"{decode.ITL_METRIC}_sum"]),
        )
        total, _why = _counter_increase(
            sums[0][f"{decode.ITL_METRIC}_sum"], sums[1][f"{decode.ITL_METRIC}_sum"], decode.ITL_METRIC
        )
        out.itl_sum, out.itl_count = total or 0.0, float(samples_n or 0)
    else:
        out.why["itl"] = itl.why
    buckets, why = _bucket_increases(old[ITL_BUCKET_METRIC], new[ITL_BUCKET_METRIC])
    if why:
        out.refused = why
        return out
    out.buckets = buckets
    if buckets is None:
        out.why["itl_high"] = f"{decode.NOT_PUBLISHED} ({ITL_BUCKET_METRIC} absent)"
    accept = decode.accept_length(after)
    if accept.why.startswith("refused"):
        out.refused = accept.why.removeprefix("refused: ")
        return out
    if accept.value is None:
        out.why["accept_length"] = accept.why
    else:
        out.accept_lengths = [accept.value]
    return out


def pool(windows: list[Window]) -> Window:
    """The reference hosts as one window: counters and buckets summed, accept lengths listed. A part
    one host lacks is missing from the pool (never a partial sum); a refused host refuses the pool."""
    out = Window()
    idle = [",".join(w.hosts) for w in windows if not w.serves and not w.refused]
    windows = [w for w in windows if w.serves or w.refused]
    if idle:
        out.why["idle"] = f"left out (no SGLang series): {', '.join(idle)}"
    if not windows:
        out.refused = "no reference host" + (
            f" serving SGLang's series ({', '.join(idle)} serve none)" if idle else ""
        )
        return out
    for window in windows:
        out.hosts.extend(window.hosts)
        if window.refused:
            out.refused = f"{','.join(window.hosts)}: {window.refused}"
            return out
    for part in ("requests", "aborted", "itl_sum", "itl_count", "fallbacks", "mismatches"):
        values = [getattr(w, part) for w in windows]
        if all(v is not None for v in values):
            setattr(out, part, sum(values))
        else:
            lacking = [",".join(w.hosts) for w in windows if getattr(w, part) is None]
            whys = {w.why.get(part, "") for w in windows if getattr(w, part) is None} - {""}
            out.why[part] = f"{'; '.join(sorted(whys)) or decode.NOT_PUBLISHED} on {', '.join(lacking)}"
    if all(w.buckets is not None for w in windows):
        bounds = set().union(*(w.buckets or {} for w in windows))
        if any(set(w.buckets or {}) != bounds for w in windows):
            out.why["itl_high"] = "the reference hosts' histograms have different buckets"
        else:
            out.buckets = {b: sum((w.buckets or {})[b] for w in windows) for b in bounds}
    else:
        out.why["itl_high"] = "; ".join(sorted({w.why.get("itl_high", "") for w in windows} - {""}))
    for w in windows:
        out.accept_lengths.extend(w.accept_lengths)
    if any(not w.accept_lengths for w in windows):
        out.accept_lengths = []
        out.why["accept_length"] = "; ".join(sorted({w.why.get("accept_length", "") for w in windows} - {""}))
    return out


# ---------------------------------------------------------------------------------------------
# the figures of a window


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """PromQL's histogram_quantile over cumulative bucket counts by upper bound: None without an
    observation; the +Inf bucket answers the highest finite bound."""
    if "inf" not in {str(b) for b in buckets}:
        raise BakeInputError("an inter-token histogram without its +Inf bucket")
    ordered = sorted(buckets.items())
    total = ordered[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in ordered:
        if count >= rank:
            if math.isinf(upper):
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


def figures(window: Window, q: float) -> dict[str, Any]:
    """The window's FIGURES (None and why when missing)."""
    why = dict(window.why)
    out: dict[str, Any] = dict.fromkeys(FIGURES)
    out["requests"] = window.requests
    if window.requests is not None:
        if window.requests > 0:
            out["error_rate"] = round((window.aborted or 0.0) / window.requests, 6)
        else:
            why["error_rate"] = "no request finished"
    out["itl_samples"] = window.itl_count
    if window.itl_count:
        out["itl_mean_s"] = round((window.itl_sum or 0.0) / window.itl_count, 6)
    else:
        why.setdefault("itl_mean_s", why.pop("itl", "") or "no inter-token sample")
    if window.buckets is not None:
        high = quantile(q, window.buckets)
        if high is None:
            why["itl_high_s"] = "no inter-token sample"
        else:
            out["itl_high_s"] = round(high, 6)
    else:
        why["itl_high_s"] = why.pop("itl_high", "") or decode.NOT_PUBLISHED
    if window.accept_lengths:
        out["accept_length"] = round(sum(window.accept_lengths) / len(window.accept_lengths), 3)
    out["fallbacks"] = window.fallbacks
    out["mismatches"] = window.mismatches
    out["why"] = {k: v for k, v in why.items() if k in FIGURES and out.get(k) is None}
    return out


# ---------------------------------------------------------------------------------------------
# the verdict


def thresholds_of(value: Any) -> dict[str, float]:
    """THRESHOLDS with the caller's values over them; BakeInputError for an unknown key or a value
    that is not a number >= 0 (a quantile outside (0, 1), a count that is not whole)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise BakeInputError(f"the bake thresholds must be a dict, got {value!r}")
    unknown = sorted(set(value) - set(THRESHOLDS))
    if unknown:
        raise BakeInputError(f"unknown bake thresholds {unknown} (known: {sorted(THRESHOLDS)})")
    out = dict(THRESHOLDS)
    for key, raw in value.items():
        number = _number(raw, f"threshold {key}")
        if key in _COUNT_THRESHOLDS and number != int(number):
            raise BakeInputError(f"bake threshold {key} {raw!r} is not a whole count")
        if key == "quantile" and not 0 < number < 1:
            raise BakeInputError(f"bake threshold quantile {raw!r} is not between 0 and 1")
        out[key] = number
    return out


def _pct(now: float, ref: float) -> float:
    return round((now - ref) / ref * 100.0, 1)


def judge(
    host: str,
    baked: Window,
    reference: Window,
    thresholds: Any = None,
    expect_mismatches: bool = False,
) -> dict[str, Any]:
    """The verdict on one baked host (see the module's docstring): {host, verdict, message, checks,
    figures: {baked, reference}, reference_hosts, thresholds}. `expect_mismatches`: the host runs in
    validate mode, so its mismatch counter must be published. Pure."""
    limits = thresholds_of(thresholds)
    q = limits["quantile"]
    mine = {} if baked.refused else figures(baked, q)
    theirs = {} if reference.refused else figures(reference, q)
    checks: list[dict[str, Any]] = []

    def out(verdict: str, why: str) -> dict[str, Any]:
        line = f"bake {verdict.replace('_', ' ')} on {host}: {why}"
        return {
            "host": host,
            "verdict": verdict,
            "message": line,
            "checks": checks,
            "figures": {"baked": mine, "reference": theirs},
            "reference_hosts": list(reference.hosts),
            "thresholds": limits,
        }

    if baked.refused:
        return out("refused", baked.refused)
    if reference.refused:
        return out("refused", f"reference {reference.refused}")
    if not reference.hosts:
        return out("refused", "no reference host to compare with")
    for name in ("requests", "fallbacks"):
        if mine[name] is None:
            return out("refused", f"{name} {mine['why'].get(name, decode.NOT_PUBLISHED)}")
    if expect_mismatches and mine["mismatches"] is None:
        return out(
            "refused", f"mismatches {mine['why'].get('mismatches', decode.NOT_PUBLISHED)} in validate mode"
        )

    def check(name: str, ok: bool, text: str, **extra: Any) -> None:
        checks.append({"figure": name, "ok": ok, "text": text, **extra})

    # absolute: one fallback or mismatch is evidence whatever the traffic
    check(
        "fallbacks",
        mine["fallbacks"] <= limits["max_fallbacks"],
        f"fallbacks {mine['fallbacks']:g} (at most {limits['max_fallbacks']:g})",
    )
    if mine["mismatches"] is not None:
        check(
            "mismatches",
            mine["mismatches"] <= limits["max_mismatches"],
            f"mismatches {mine['mismatches']:g} (at most {limits['max_mismatches']:g})",
        )
    failed = [c["text"] for c in checks if not c["ok"]]
    if failed:
        return out("fail", "; ".join(failed))

    # enough traffic on both sides
    if theirs["requests"] is None:
        return out("refused", f"reference requests {theirs['why'].get('requests', decode.NOT_PUBLISHED)}")
    short = []
    for side, fig in (("baked", mine), ("reference", theirs)):
        if fig["requests"] < limits["min_requests"]:
            short.append(f"{side} {fig['requests']:g} requests (at least {limits['min_requests']:g})")
        elif (fig["itl_samples"] or 0) < limits["min_tokens"]:
            short.append(
                f"{side} {fig['itl_samples'] or 0:g} inter-token samples (at least {limits['min_tokens']:g})"
            )
    if short:
        return out("not_enough_traffic", "; ".join(short))

    # every compared figure present on both sides
    for name in ("error_rate", "itl_mean_s", "itl_high_s", "accept_length"):
        for side, fig in (("baked", mine), ("reference", theirs)):
            if fig[name] is None:
                return out("refused", f"{side} {name} {fig['why'].get(name, decode.NOT_PUBLISHED)}")
    for name in ("itl_mean_s", "itl_high_s", "accept_length"):
        if theirs[name] <= 0:
            return out("refused", f"reference {name} is {theirs[name]:g}")

    rise = round((mine["error_rate"] - theirs["error_rate"]) * 100.0, 2)
    check(
        "error_rate",
        rise <= limits["error_rate_pp"],
        f"error rate {mine['error_rate'] * 100:.2f}% vs {theirs['error_rate'] * 100:.2f}% "
        f"({rise:+.2f} pp, at most +{limits['error_rate_pp']:g})",
        change=rise,
    )
    for name, label, limit in (
        ("itl_mean_s", "mean ITL", "itl_mean_pct"),
        ("itl_high_s", f"p{q * 100:g} ITL", "itl_high_pct"),
    ):
        pct = _pct(mine[name], theirs[name])
        check(
            name,
            pct <= limits[limit],
            f"{label} {mine[name] * 1000:.1f} ms vs {theirs[name] * 1000:.1f} ms "
            f"({pct:+.1f}%, at most +{limits[limit]:g}%)",
            change=pct,
        )
    pct = _pct(mine["accept_length"], theirs["accept_length"])
    check(
        "accept_length",
        -pct <= limits["accept_length_pct"],
        f"accept length {mine['accept_length']:.2f} vs {theirs['accept_length']:.2f} "
        f"({pct:+.1f}%, at least -{limits['accept_length_pct']:g}%)",
        change=pct,
    )
    failed = [c["text"] for c in checks if not c["ok"]]
    vs = f"vs {len(reference.hosts)} reference host(s), {mine['requests']:g} requests"
    if failed:
        return out("fail", f"{'; '.join(failed)} ({vs})")
    return out("pass", f"{'; '.join(c['text'] for c in checks if c['figure'] != 'fallbacks')} ({vs})")


def reference_hosts(play_hosts_all: Any, batch: Any, failed: Any) -> tuple[list[str], str]:
    """(the hosts a batch is compared with, what they are): the hosts of the play after this batch
    (not yet deployed), or, for the last batch, the hosts of the earlier batches less those that
    failed (`failed`, the canary stop's list); none when the run has no other host (the role then
    takes the host's own pre-restart window). Batches run in the play's order (serial)."""
    for value, what in (
        (play_hosts_all, "ansible_play_hosts_all"),
        (batch, "ansible_play_batch"),
        (failed, "failed"),
    ):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise BakeInputError(f"{what} must be a list of host names, got {value!r}")
    every, mine = list(play_hosts_all), set(batch)
    if not mine or not mine <= set(every):
        raise BakeInputError(f"the batch {sorted(mine)} is not part of the play's hosts")
    last = max(every.index(h) for h in mine)
    first = min(every.index(h) for h in mine)
    later = [h for h in every[last + 1 :] if h not in mine]
    if later:
        return later, "not yet deployed"
    earlier = [h for h in every[:first] if h not in set(failed)]
    if not earlier:
        return [], "no reference host: its own figures before its restart"
    return earlier, "earlier batches that passed"


def batch_message(failed_members: Any, posts: Any) -> str:
    """Why a host whose own bake passed fails with its batch: the siblings that failed and what each
    said (kdtree_rendezvous's failed_members and posts); a sibling with no word failed or timed out
    before its verdict."""
    if not isinstance(failed_members, list) or not isinstance(posts, dict):
        raise BakeInputError(
            f"a rendezvous result must give failed_members and posts, got {failed_members!r}"
        )
    said = []
    for host in failed_members:
        post = posts.get(host)
        data = post.get("data") if isinstance(post, dict) else None
        message = data.get("message") if isinstance(data, dict) else None
        said.append(str(message) if message else f"{host}: no bake verdict (its deploy failed or timed out)")
    return f"the bake of the batch failed on {', '.join(map(str, failed_members))}: {'; '.join(said)}"


def scrape_text(result: Any) -> tuple[str | None, str]:
    """(the /metrics text, "") of one ansible.builtin.uri result, or (None, why) when the read failed
    (no answer, a status other than 200, no content)."""
    if not isinstance(result, dict):
        return None, f"no read result ({result!r})"
    status = result.get("status")
    if status != 200:
        return None, f"HTTP {status}: {str(result.get('msg') or '')[:200]}".strip()
    content = result.get("content")
    if not isinstance(content, str):
        return None, "no content"
    return content, ""


def record(verdict: Any) -> dict[str, Any]:
    """A verdict (judge()) as the deploy's history entry keeps it (module_utils/_bake_record)."""
    if not isinstance(verdict, dict):
        raise BakeInputError(f"a bake verdict must be a dict, got {verdict!r}")
    figures = verdict.get("figures") or {}
    try:
        return bake_record.checked(
            {
                "verdict": verdict.get("verdict"),
                "message": verdict.get("message"),
                "reference_hosts": verdict.get("reference_hosts"),
                "baked": {k: v for k, v in (figures.get("baked") or {}).items() if k in FIGURES},
                "reference": {k: v for k, v in (figures.get("reference") or {}).items() if k in FIGURES},
            }
        )
    except ValueError as exc:
        raise BakeInputError(str(exc)) from exc
