"""A slow HTTP server outside the job: each GET answers with --seconds of 32 KB chunks, one every
0.1 s (about 320 KB/s, a remote store on a busy link); with --stall it sends the headers and one
chunk, then nothing (a peer that never answers). Writes its port to PORT_FILE once it listens."""
from __future__ import annotations

import argparse
import http.server
import socketserver
import time
from pathlib import Path

CHUNK, PAUSE = 32 * 1024, 0.1

parser = argparse.ArgumentParser()
parser.add_argument("port_file", type=Path)
parser.add_argument("--seconds", type=float, default=60.0)
parser.add_argument("--stall", action="store_true")
args = parser.parse_args()


class Trickle(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        chunks = int(args.seconds / PAUSE)
        self.send_response(200)
        self.send_header("Content-Length", str(chunks * CHUNK))
        self.end_headers()
        for i in range(chunks):
            self.wfile.write(b"x" * CHUNK)
            self.wfile.flush()
            time.sleep(3600 if args.stall and i == 0 else PAUSE)

    def log_message(self, *_):
        pass


with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Trickle) as server:
    server.daemon_threads = True
    args.port_file.write_text(str(server.server_address[1]))
    server.serve_forever()
