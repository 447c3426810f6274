"""A process outside the SGLang unit that answers GET /health with 200 on the unit's port for 15 s.

It waits (up to 600 s: the deploy's preflight, build and patch steps come first, slow on a loaded
machine) for the port to be free, which it is while the unit restarts and loads, then serves; the
smoke check must not take its answer for the unit's health.
"""

import http.server
import socket
import sys
import threading
import time


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"foreign\n")

    def log_message(self, *args):
        pass


deadline = time.monotonic() + 600
while True:
    try:
        server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the port never became free")
        time.sleep(0.1)
print("foreign server bound", flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
time.sleep(15)
server.shutdown()
server.server_close()
socket.socket().close()
print("foreign server gone", flush=True)
