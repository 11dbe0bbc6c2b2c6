"""The comparison peers of `ts/src/transport/bench.ts` (a benchmark, not the transport).

    python -m lego_rl.transport.bench_peer json-http PORT_FILE   JSON over HTTP: json.loads each POST body
    python -m lego_rl.transport.bench_peer raw-tcp PORT_FILE     plain TCP sink: recv_into one reused buffer

Each binds an ephemeral loopback port, writes it to PORT_FILE, serves until
the client closes, then prints one JSON line with its peak RSS.
"""

from __future__ import annotations

import json
import resource
import socket
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path


def _announce(port: int, port_file: str) -> None:
    tmp = Path(port_file + ".tmp")
    tmp.write_text(str(port))
    tmp.rename(port_file)


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        rows = json.loads(body)
        reply = json.dumps({"rows": len(rows)}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
        if self.headers.get("X-Last") == "1":
            self.server.done = True  # type: ignore[attr-defined]

    def log_message(self, *_: object) -> None:
        pass


def json_http(port_file: str) -> None:
    server = HTTPServer(("127.0.0.1", 0), _JsonHandler)
    server.done = False  # type: ignore[attr-defined]
    _announce(server.server_address[1], port_file)
    while not server.done:  # type: ignore[attr-defined]
        server.handle_request()
    print(json.dumps({"peer": "json-http", "peak_rss": _peak_rss()}), flush=True)


def raw_tcp(port_file: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    _announce(listener.getsockname()[1], port_file)
    conn, _ = listener.accept()
    buffer = bytearray(4 * 1024 * 1024)
    total = 0
    while n := conn.recv_into(buffer):
        total += n
    conn.close()
    print(json.dumps({"peer": "raw-tcp", "bytes": total, "peak_rss": _peak_rss()}), flush=True)


if __name__ == "__main__":
    {"json-http": json_http, "raw-tcp": raw_tcp}[sys.argv[1]](sys.argv[2])
