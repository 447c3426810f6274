"""Property-based (hypothesis): any input to the lock reader, the history reader and checks, the small
file reader, a restored environment, and the traffic client's answer parser gives a verdict or a clear
refusal, never a traceback; the API key never comes out of the redaction in any form."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import tempfile
import time

from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils import _lock as lock
from ansible_collections.kdtree.fleet.plugins.module_utils import _small_file as small_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
LOCK_KEYS = ("run_id", "owner", "play", "started", "started_epoch", "pid", "problem")
lock_docs = st.dictionaries(st.sampled_from(LOCK_KEYS) | st.text(max_size=8), json_values, max_size=8)
raw_lock = (
    st.binary(max_size=400)
    | lock_docs.map(lambda d: json.dumps(d).encode())
    | json_values.map(lambda v: json.dumps(v).encode())
)


SCRATCH = tempfile.mkdtemp(prefix="kdtree-prop-")


def _scratch() -> str:
    """A fresh directory for one example (all under SCRATCH, removed at the end of the module)."""
    return tempfile.mkdtemp(dir=SCRATCH)


def teardown_module() -> None:
    shutil.rmtree(SCRATCH, ignore_errors=True)


@SETTINGS
@given(raw=raw_lock)
def test_any_lock_file_reads_as_a_holder_or_a_named_problem(raw):
    path = os.path.join(_scratch(), "lock.json")
    with open(path, "wb") as handle:
        handle.write(raw)
    seen = lock.observe(path)
    assert seen is not None
    assert all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in seen.holder.values())
    text = lock.describe(seen.holder)
    assert isinstance(text, str) and "\n" not in text
    try:
        lock.acquire(path, {"run_id": "prop"}, break_lock=False, check_mode=True)
    except lock.LockHeld as exc:
        assert str(exc)
    out = lock.acquire(path, {"run_id": "prop"}, break_lock=True, check_mode=False, since=time.time() + 5)
    assert out["changed"] or seen.holder.get("run_id") == "prop"
    assert lock.read(path)["run_id"] == "prop"


@SETTINGS
@given(holder=json_values)
def test_describe_takes_any_value(holder):
    assert isinstance(lock.describe(holder if isinstance(holder, dict) else {"owner": holder}), str)


history_docs = st.fixed_dictionaries(
    {
        "format": st.sampled_from([1, 1, 2, "1", None]),
        "entries": st.lists(json_values, max_size=4) | json_values,
    }
)


@SETTINGS
@given(raw=st.binary(max_size=300) | history_docs.map(lambda d: json.dumps(d).encode()))
def test_any_history_file_gives_entries_or_a_clear_refusal(raw):
    directory = _scratch()
    os.chmod(directory, 0o700)
    path = os.path.join(directory, "state.json")
    with open(path, "wb") as handle:
        handle.write(raw)
    os.chmod(path, 0o600)
    try:
        entries = history.load(path)
    except history.HistoryError as exc:
        assert str(exc)
        return
    assert all(isinstance(e, dict) for e in entries)
    history.last_good(entries, "")
    history.referenced(history.trim(entries, 2))


entry_fields = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "build_id": st.sampled_from(["sm_120a-x", "../x", ""]) | json_values,
        "lib_path": st.sampled_from(["/opt/kdtree/builds/sm_120a-x/libkdtree_verify.so", "/tmp/x"])
        | json_values,
        "patch_dir": st.sampled_from(["/opt/kdtree/patches/abc", "/opt/kdtree/patches/a/b"]) | json_values,
        "mode": st.sampled_from(["on", "validate", "off", "debug"]) | json_values,
        "nccl_env": json_values,
        "exec_start_replaced": json_values,
        "dropin_fields": st.fixed_dictionaries(
            {},
            optional={
                "env": st.lists(st.lists(st.text(max_size=20), min_size=0, max_size=3), max_size=6)
                | json_values,
                "argv": st.lists(st.text(max_size=10), max_size=4) | json_values,
                "secret_names": st.lists(st.text(max_size=8), max_size=3) | json_values,
            },
        )
        | json_values,
    },
)


@SETTINGS
@given(entry=entry_fields)
def test_any_history_entry_is_restorable_or_refused_with_a_reason(entry):
    try:
        fields = history.restore_fields(
            entry, "/opt/kdtree", "/opt/kdtree/patches", "/run/kdtree-sglang", ["X"]
        )
    except history.HistoryError as exc:
        assert str(exc).startswith("the last good deploy")
        return
    assert set(fields) == {"env", "argv", "secret_names"}
    assert all(isinstance(k, str) and "\n" not in k + v for k, v in fields["env"])


def _parse(raw: bytes, secrets=()) -> http_client.Answer | http_client.HttpFailure:
    server, client = socket.socketpair()
    try:
        server.sendall(raw)
        server.shutdown(socket.SHUT_WR)
        limits = http_client.Limits(max_headers=20, max_header_bytes=2048, max_body=4096)
        try:
            return http_client.read_answer(
                client, "POST", time.monotonic() + 5, limits=limits, secrets=secrets
            )
        except http_client.HttpFailure as exc:
            return exc
    finally:
        server.close()
        client.close()


status_lines = st.sampled_from(
    [
        b"HTTP/1.1 200 OK\r\n",
        b"HTTP/1.0 302 Found\r\n",
        b"HTTP/1.1 500 x\r\n",
        b"HTTP/1.1 99 x\r\n",
        b"junk\r\n",
        b"",
    ]
)
HEADERS = [
    b"Content-Length: 5\r\n",
    b"Content-Length: -1\r\n",
    b"Content-Length: x\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Location: http://x/\r\n",
    b"X: " + b"y" * 300 + b"\r\n",
]
header_lines = st.lists(st.sampled_from(HEADERS) | st.binary(max_size=40), max_size=12)


@SETTINGS
@given(
    raw=st.binary(max_size=600)
    | st.tuples(status_lines, header_lines, st.binary(max_size=200)).map(
        lambda t: t[0] + b"".join(t[1]) + b"\r\n" + t[2]
    )
)
def test_any_answer_is_an_answer_or_a_one_line_reason(raw):
    got = _parse(raw)
    if isinstance(got, http_client.HttpFailure):
        assert got.reason and "\n" not in got.reason
    else:
        assert 200 <= got.status < 300 and len(got.body) <= 4096


KEYS = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=10, max_size=40)


@SETTINGS
@given(key=KEYS, before=st.text(max_size=40), after=st.text(max_size=40), form=st.integers(0, 5))
def test_the_key_never_survives_the_redaction(key, before, after, form):
    raw = key.encode()
    shown = [
        key,
        base64.b64encode(before.encode()[:2] + raw).decode(),
        raw.hex(),
        "\n".join(key[i : i + 4] for i in range(0, len(key), 4)),
        http_client.secret_forms(key)[-1],
        base64.urlsafe_b64encode(raw).decode(),
    ][form]
    body = f"{before}{shown}{after}".encode()
    got = _parse(f"HTTP/1.1 403 no\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body, [key])
    assert isinstance(got, http_client.HttpFailure)
    assert key not in got.reason and key.lower() not in got.reason.lower()
    squeezed = "".join(got.reason.split())
    assert "".join(key.split()) not in squeezed


@SETTINGS
@given(data=st.binary(max_size=300), cap=st.integers(min_value=0, max_value=300))
def test_the_small_file_reader_returns_the_whole_file_or_refuses_it_by_size(data, cap):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f")
        with open(path, "wb") as handle:
            handle.write(data)
        try:
            got = small_file.read_small(path, max_bytes=cap)
        except small_file.SmallFileRefused as exc:
            assert len(data) > cap and f"{len(data)} bytes" in str(exc)
            return
        assert got == data and len(data) <= cap


env_names = st.sampled_from(
    ["PYTHONPATH", "KDTREE_VERIFY", "NCCL_P2P_LEVEL", "LD_PRELOAD", "X", "GCONV_PATH"]
)


@SETTINGS
@given(key=env_names | st.text(max_size=12), extra=st.lists(st.text(max_size=8), max_size=3))
def test_a_restored_variable_is_allowed_only_by_the_allowlist(key, extra):
    allowed = history.owned_key(key, extra)
    assert allowed == (key in history.FIXED_ENV or key.startswith("NCCL_") or key in extra)
    if key in ("LD_PRELOAD", "GCONV_PATH") and key not in extra:
        assert not allowed
