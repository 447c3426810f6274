"""Local HTTP servers of the unit tests: a handler class served on a free port of 127.0.0.1 in a thread
of its own, and a whole answer written in one call. Imported by its collection path (see
collection_tree.py)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served until the block ends: its base URL, http://127.0.0.1:PORT."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def reply(handler: http.server.BaseHTTPRequestHandler, code: int, body: bytes, content_type: str) -> None:
    """The whole answer: status, Content-Type and Content-Length, then `body`."""
    handler.send_response(code)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
