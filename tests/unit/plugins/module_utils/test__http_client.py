"""The one HTTP client (plugins/module_utils/_http_client.py) against real local socket servers that
misbehave: a bad status line, a short body, huge headers, a huge body, a trickle (1 byte per 0.2 s),
a redirect with the key, servers that echo the key in many encodings. Every failure is a reason
string (never a traceback), the deadline holds across slow reads, a redirect is never followed and
the key never appears in any form in what comes back (through send_requests, the smoke check's use)."""

from __future__ import annotations

import base64
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils import _unit_procs as unit_procs
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import traffic

KEY = "sk-live-4f9a2c7e1b8d6053aa91-secret"

Script = Callable[[bytes], Iterator[bytes | float]]


class RawServer:
    """A TCP server on 127.0.0.1 that answers each connection with what `script(request)` yields:
    bytes are sent, a float is a pause. Records every request's raw bytes."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/generate"

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _peer = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _sep, rest = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            while len(rest) < length:
                rest += conn.recv(65536)
            self.requests.append(data)
            for item in self.script(data):
                if self.stop.is_set():
                    return
                if isinstance(item, float):
                    time.sleep(item)
                else:
                    conn.sendall(item)
        except OSError:
            pass
        finally:
            conn.close()

    def __enter__(self) -> RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.sock.close()


def answer(status: str = "200 OK", body: bytes = b'{"text": "ok"}', headers: tuple[str, ...] = ()) -> Script:
    def script(_request: bytes) -> Iterator[bytes | float]:
        lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close", *headers]
        yield ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    return script


def trickling(length: int) -> Script:
    """A RawServer answer: 200 with a body of `length` bytes, sent one byte each 0.2 s."""

    def answer_slowly(_request: bytes) -> Iterator[bytes | float]:
        for byte in f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n".encode() + b"x" * length:
            yield bytes([byte])
            yield 0.2

    return answer_slowly


def fails(url: str, **kwargs) -> http_client.HttpFailure:
    kwargs.setdefault("timeout_s", 3)
    with pytest.raises(http_client.HttpFailure) as info:
        http_client.request("POST", url, body=b"{}", **kwargs)
    assert "\n" not in info.value.reason and "Traceback" not in info.value.reason
    return info.value


def test_a_2xx_answer_comes_back_with_its_body():
    with RawServer(answer()) as server:
        got = http_client.request("POST", server.url, body=b"{}", timeout_s=3)
    assert (got.status, got.body) == (200, b'{"text": "ok"}')


def test_a_bad_status_line_is_a_reason():
    def script(_r):
        yield b"HTCPCP/9 teapot\r\n\r\n"

    with RawServer(script) as server:
        assert "malformed answer" in fails(server.url).reason


def test_a_body_shorter_than_its_length_is_a_reason():
    def script(_r):
        yield b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nonly this"

    with RawServer(script) as server:
        assert "short body: 9 bytes, 91 more expected" in fails(server.url).reason


def test_huge_headers_are_refused():
    many = tuple(f"X-Pad-{i}: {'y' * 50}" for i in range(90))
    with RawServer(answer(headers=many)) as server:
        assert "header lines" in fails(server.url).reason

    def endless(_r):
        yield b"HTTP/1.1 200 OK\r\n"
        for i in range(2000):
            yield f"X-{i}: {'z' * 200}\r\n".encode()

    with RawServer(endless) as server:
        reason = fails(server.url).reason
    assert "malformed answer" in reason or "larger than its bounds" in reason


def test_a_huge_body_is_refused_declared_or_not():
    limits = http_client.Limits(max_body=1000)
    with RawServer(answer(body=b"x" * 5000)) as server:
        assert "body of 5000 bytes, at most 1000" in fails(server.url, limits=limits).reason

    def undeclared(_r):
        yield b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
        for _attempt in range(50):
            yield b"x" * 1000

    with RawServer(undeclared) as server:
        assert "body larger than 1000 bytes" in fails(server.url, limits=limits).reason


def test_a_trickling_server_cannot_outlast_the_deadline():
    with RawServer(trickling(50)) as server:
        started = time.monotonic()
        failure = fails(server.url, timeout_s=1.0)
        took = time.monotonic() - started
    assert failure.timed_out and "timeout" in failure.reason
    assert took < 1.6  # per-read timeouts alone would let it run for ~18 s


def test_a_redirect_is_a_failure_and_is_never_followed_with_the_key():
    with RawServer(answer()) as target:
        location = f"Location: http://127.0.0.1:{target.port}/steal?k={KEY}"
        with RawServer(answer("302 Found", b"", (location,))) as server:
            failure = fails(server.url, headers={"Authorization": f"Bearer {KEY}"}, secrets=[KEY])
        assert target.requests == []
    assert failure.status == 302 and "redirects are not followed" in failure.reason
    assert KEY not in failure.reason


def _forms(key: str) -> list[str]:
    raw = key.encode()
    b64 = base64.b64encode(b"Bearer " + raw).decode()
    return [
        key,
        f"  padded--{key}--padded  ",
        base64.b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        b64,  # the key at another base64 alignment
        base64.b64encode(b"x" + raw + b"y").decode(),
        base64.urlsafe_b64encode(b"xy" + raw).decode(),
        urllib.parse.quote(key, safe=""),
        urllib.parse.quote_plus(f"Bearer {key}"),
        raw.hex(),
        raw.hex().upper(),
        key[:12] + "\r\n" + key[12:],
        "\n".join(key[i : i + 5] for i in range(0, len(key), 5)),
    ]


@pytest.mark.parametrize("index", range(len(_forms(KEY))))
def test_a_server_echoing_the_key_in_any_form_never_gets_it_out(index):
    form = _forms(KEY)[index]
    body = f'{{"error": "denied", "you_sent": "{form}"}}'.encode()
    with RawServer(answer("401 Unauthorized", body)) as server:
        req = traffic.Requests(count=1, health_url=server.url, api_key=KEY, timeout_s=3)
        with pytest.raises(traffic.TrafficError) as info:
            traffic.send_requests(req)
    assert b"Bearer " + KEY.encode() in server.requests[0]
    text = str(info.value)
    assert "answered 401" in text
    squeezed = "".join(text.split()).lower()
    for other in _forms(KEY):
        assert "".join(other.split()).lower() not in squeezed, (form, text)
    assert KEY[:8].lower() not in squeezed


def test_a_long_error_body_never_leaks_a_prefix_of_the_key():
    for cut in range(150, 260, 7):  # the key straddles the body head's cut at every offset
        text = "e" * cut + KEY + "tail"
        shown = http_client.head(text.encode(), [KEY])
        assert KEY[: http_client.MIN_PREFIX] not in shown, (cut, shown)
    body = ("e" * (http_client.ERROR_BODY - 10) + KEY).encode()  # cut while it is read
    with RawServer(answer("500 Internal Server Error", body)) as server:
        failure = fails(server.url, secrets=[KEY])
    assert KEY[: http_client.MIN_PREFIX] not in failure.reason


def test_the_total_bound_holds_across_trickling_requests():
    with RawServer(trickling(40)) as server:
        started = time.monotonic()
        req = traffic.Requests(count=5, health_url=server.url, timeout_s=30, total_timeout_s=1.0)
        with pytest.raises(traffic.TrafficError, match=r"1 s in total"):
            traffic.send_requests(req)
    assert time.monotonic() - started < 1.6


def test_health_reads_a_redirect_as_its_code_and_refused_as_refused():
    with RawServer(answer("301 Moved Permanently", b"", ("Location: http://example.invalid/",))) as server:
        assert unit_procs.health_status(server.url) == "301"
    with RawServer(answer()) as server:
        assert unit_procs.health_status(server.url) == "200"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    assert unit_procs.health_status(f"http://127.0.0.1:{port}/health") == "refused"


def test_a_url_that_is_not_http_is_a_reason():
    assert "not an http(s) URL" in fails("ftp://127.0.0.1/x").reason
    assert "bad port" in fails("http://127.0.0.1:99999999/x").reason


def test_a_server_that_goes_silent_mid_answer_is_cut_at_the_deadline_not_a_read_timeout_later():
    def stall(_r):
        for byte in b"HTTP/":
            yield bytes([byte])
            yield 0.2
        yield 3.0  # silent: only a socket timeout of the time left ends the read in time

    with RawServer(stall) as server:
        started = time.monotonic()
        failure = fails(server.url, timeout_s=1.2)
        took = time.monotonic() - started
    assert failure.timed_out
    assert took < 1.7  # a per-read timeout (1.2 s after the last byte) would end at ~2.2 s
