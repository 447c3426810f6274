"""The one HTTP client of the kdtree checks (stdlib `http.client` only; no Ansible imports).

Used by the smoke check's traffic (POST /generate) and by the health GET that the smoke check and the
report make (module_utils/_smoke/host.py). Every failure is an HttpFailure whose `reason` is one line
of text, never a traceback that escapes:

- one deadline per request, enforced across slow reads: before each read of the socket the time left
  is checked and the socket timeout set to it (a server that trickles its answer one byte at a time
  cannot keep the request alive past its deadline; the caller passes the earlier of its own bound and
  the bound of all its requests);
- no redirects: a 3xx answer is a failure naming its status (the API key is never sent elsewhere);
- bounded answers: at most Limits.max_headers header lines of Limits.max_header_bytes in all, a body
  of at most Limits.max_body bytes; a malformed status line or a body shorter than its
  Content-Length is a failure with its reason;
- secrets (the API key) never leave the client in any form: redact() removes them, raw,
  base64 (any alignment), url-encoded, hex, split across lines, from every text before it leaves.
"""

from __future__ import annotations

import base64
import http.client
import io
import logging
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass

LOG = logging.getLogger(__name__)
REDACTED = "***"
# a trailing piece of a secret at least this long is redacted too (a text cut in the middle of one)
MIN_PREFIX = 6
READ_CHUNK = 65536
ERROR_BODY = 4096


@dataclass(frozen=True)
class Limits:
    """Bounds of one answer."""

    max_headers: int = 64
    max_header_bytes: int = 32 * 1024
    max_body: int = 1024 * 1024


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Answer:
    """A 2xx answer: status, its body (bounded), seconds it took."""

    status: int
    body: bytes
    seconds: float


class HttpFailure(Exception):
    """The request failed; `reason` (already redacted) says why, `status` is the answer's status or 0,
    `timed_out` whether the deadline cut it short."""

    def __init__(self, reason: str, status: int = 0, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.timed_out = timed_out


# ---------------------------------------------------------------------------------------------
# redaction


def secret_forms(secret: str) -> list[str]:
    """Every form of `secret` a server could echo: raw, url-encoded, hex, base64 of it at any of the
    three alignments (the stable middle of base64 of x+secret for x of 0, 1, 2 bytes) with and without
    padding, url-safe base64. Longest first."""
    if not secret:
        return []
    raw = secret.encode("utf-8", "surrogatepass")
    forms = {
        secret,
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
        raw.hex(),
    }
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * pad + raw).decode("ascii").rstrip("=")
            # the characters that depend on the bytes before the secret: the first ceil(pad*4/3);
            # those after it: the last group when the length is not a multiple of 3
            start = -(-pad * 4 // 3)
            stable = encoded[start:] if (pad + len(raw)) % 3 == 0 else encoded[start:-1]
            if pad == 0:
                forms.add(encode(raw).decode("ascii"))
                forms.add(encoded)
            if len(stable) >= MIN_PREFIX:
                forms.add(stable)
    return sorted((form for form in forms if form), key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every form of each secret replaced by ***; forms are matched ignoring case and
    whitespace (a secret split across lines), and a text ending in the start of one loses that too."""
    needles = [form.lower() for secret in secrets if secret for form in secret_forms(secret)]
    if not needles or not text:
        return text
    kept = [(index, char.lower()) for index, char in enumerate(text) if not char.isspace()]
    squeezed = "".join(char for _index, char in kept)
    hidden = [False] * len(text)

    def hide(start: int, end: int) -> None:  # squeezed positions [start, end)
        for index in range(kept[start][0], kept[end - 1][0] + 1):
            hidden[index] = True

    for needle in needles:
        at = squeezed.find(needle)
        while at >= 0:
            hide(at, at + len(needle))
            at = squeezed.find(needle, at + 1)
        for size in range(min(len(needle) - 1, len(squeezed)), MIN_PREFIX - 1, -1):
            if squeezed.endswith(needle[:size]):
                hide(len(squeezed) - size, len(squeezed))
                break
    out: list[str] = []
    for index, char in enumerate(text):
        if not hidden[index]:
            out.append(char)
        elif index == 0 or not hidden[index - 1]:
            out.append(REDACTED)
    return "".join(out)


def head(raw: bytes, secrets: Iterable[str], size: int = 200) -> str:
    """The start of a body as one line of at most `size` characters, redacted before it is cut."""
    text = " ".join(raw.decode("utf-8", "replace").split())
    text = redact(text, secrets)
    return text if len(text) <= size else text[: size - 3] + "..."


# ---------------------------------------------------------------------------------------------
# the deadline on every read


class _DeadlineReader(io.RawIOBase):
    """The socket as a raw stream: before each read the time left is checked and becomes the socket's
    timeout; at most `cap` bytes are read in all (raised as the request goes on)."""

    def __init__(self, sock: socket.socket, deadline: float, clock: Callable[[], float]) -> None:
        super().__init__()
        self.sock = sock
        self.deadline = deadline
        self.clock = clock
        self.cap = 0
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self.count >= self.cap:
            raise _TooLarge(self.count)
        view = memoryview(buffer)[: max(1, min(len(buffer), self.cap - self.count))]
        got = recv_before(self.sock, view, self.deadline, self.clock)
        self.count += got
        return got


def recv_before(sock: socket.socket, view: memoryview, deadline: float, clock: Callable[[], float]) -> int:
    """One read of the socket that ends by `deadline`: the time left is checked first and becomes the
    socket's timeout (TimeoutError when none is left)."""
    left = deadline - clock()
    if left <= 0:
        raise TimeoutError("deadline passed")
    sock.settimeout(left)
    return sock.recv_into(view)


class _TooLarge(Exception):
    pass


class _Socket:
    """What http.client.HTTPResponse needs of a socket: makefile() over the deadline reader."""

    def __init__(self, reader: _DeadlineReader) -> None:
        self.reader = reader

    def makefile(self, mode: str, *args, **kwargs) -> io.BufferedReader:
        return io.BufferedReader(self.reader, buffer_size=8192)


def _target(url: str) -> tuple[type[http.client.HTTPConnection], str, int | None, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpFailure(f"not an http(s) URL: {url!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise HttpFailure(f"bad port in {url!r}: {exc}") from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls, parts.hostname, port, path


def request(
    method: str,
    url: str,
    *,
    timeout_s: float,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    secrets: Iterable[str] = (),
    limits: Limits = DEFAULT_LIMITS,
    clock: Callable[[], float] = time.monotonic,
) -> Answer:
    """One request, whole within `timeout_s` (connect, send, every read). A 2xx answer, else
    HttpFailure with a redacted reason (3xx included: redirects are never followed)."""
    secrets = [s for s in secrets if s]
    started = clock()
    deadline = started + max(0.0, timeout_s)
    try:
        return _request(method, url, body, headers or {}, limits, deadline, started, clock, secrets)
    except HttpFailure as exc:
        LOG.debug("%s %s failed: %s", method, redact(url, secrets), exc.reason)
        raise


def _request(
    method: str,
    url: str,
    body: bytes | None,
    headers: dict[str, str],
    limits: Limits,
    deadline: float,
    started: float,
    clock: Callable[[], float],
    secrets: list[str],
) -> Answer:
    cls, host, port, path = _target(url)
    left = deadline - clock()
    if left <= 0:
        raise HttpFailure("no time left to send it (timeout)", timed_out=True)
    conn = cls(host, port, timeout=left)
    try:
        try:
            conn.connect()
            conn.request(method, path, body=body, headers=headers)
        except TimeoutError:
            raise HttpFailure("no answer in time (timeout)", timed_out=True) from None
        except (OSError, ValueError, UnicodeError, http.client.HTTPException) as exc:
            raise HttpFailure(redact(f"failed: {type(exc).__name__}: {_short(str(exc))}", secrets)) from None
        return read_answer(conn.sock, method, deadline, started, limits=limits, clock=clock, secrets=secrets)
    finally:
        try:
            conn.close()
        except Exception:  # closing must not replace the answer or its failure
            pass


def read_answer(
    sock: socket.socket,
    method: str,
    deadline: float,
    started: float | None = None,
    *,
    limits: Limits = DEFAULT_LIMITS,
    clock: Callable[[], float] = time.monotonic,
    secrets: Iterable[str] = (),
) -> Answer:
    """The answer on a connected socket, read within `deadline` (a clock() time) and `limits`: a 2xx
    Answer, else HttpFailure with a redacted one-line reason (3xx: redirects are never followed)."""
    secrets = [s for s in secrets if s]
    started = clock() if started is None else started

    def fail(why: str, status: int = 0, timed_out: bool = False) -> HttpFailure:
        return HttpFailure(redact(" ".join(why.split()), secrets), status, timed_out)

    try:
        reader = _DeadlineReader(sock, deadline, clock)
        reader.cap = limits.max_header_bytes + 8192
        response = http.client.HTTPResponse(_Socket(reader), method=method)  # type: ignore[arg-type]
        response.begin()
        _check_headers(response, limits, fail)
        status = response.status
        reader.cap = reader.count + limits.max_body + 8192
        raw = _read_body(response, limits, fail, status)
        location = response.headers.get("Location", "") or "?"
    except HttpFailure:
        raise
    except TimeoutError:
        raise fail("no answer in time (timeout)", timed_out=True) from None
    except _TooLarge as exc:
        raise fail(f"answer larger than its bounds ({exc} bytes read)") from None
    except http.client.IncompleteRead as exc:
        raise fail(f"short body: {len(exc.partial)} bytes, {exc.expected} more expected") from None
    except http.client.HTTPException as exc:  # bad status line, too many headers, line too long
        raise fail(f"malformed answer: {type(exc).__name__}: {_short(str(exc))}") from None
    except (OSError, ValueError, UnicodeError, LookupError) as exc:
        raise fail(f"failed: {type(exc).__name__}: {_short(str(exc))}") from None
    seconds = round(clock() - started, 3)
    if 300 <= status < 400:
        raise fail(
            f"answered {status} (a redirect to {_short(location)}; redirects are not followed)", status
        )
    if not 200 <= status < 300:
        raise fail(f"answered {status}: {head(raw, secrets)}", status)
    return Answer(status=status, body=raw, seconds=seconds)


def _short(text: str, size: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 3] + "..."


def _check_headers(
    response: http.client.HTTPResponse, limits: Limits, fail: Callable[..., HttpFailure]
) -> None:
    items = response.headers.items()
    if len(items) > limits.max_headers:
        raise fail(f"malformed answer: {len(items)} header lines, at most {limits.max_headers}")
    size = sum(len(key) + len(value) + 4 for key, value in items)
    if size > limits.max_header_bytes:
        raise fail(f"malformed answer: headers of {size} bytes, at most {limits.max_header_bytes}")


def _read_body(
    response: http.client.HTTPResponse, limits: Limits, fail: Callable[..., HttpFailure], status: int
) -> bytes:
    """The whole body of a 2xx answer (at most limits.max_body, else a failure); of any other answer
    its first ERROR_BODY bytes (only its head is shown)."""
    if not 200 <= status < 300:
        try:
            return response.read(ERROR_BODY)
        except http.client.HTTPException:  # the status is what matters; the body is a bonus
            return b""
    length = response.getheader("Content-Length")
    if length is not None:
        try:
            wanted = int(length)
        except ValueError:
            raise fail(f"malformed answer: Content-Length {_short(length)!r}", status) from None
        if wanted > limits.max_body:
            raise fail(f"body of {wanted} bytes, at most {limits.max_body}", status)
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = response.read(min(READ_CHUNK, limits.max_body + 1 - total))
        if not chunk:
            if length is not None and total < wanted:  # read(amt) ends short without IncompleteRead
                raise fail(f"short body: {total} bytes, {wanted - total} more expected", status)
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limits.max_body:
            raise fail(f"body larger than {limits.max_body} bytes", status)
