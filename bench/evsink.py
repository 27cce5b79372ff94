#!/usr/bin/python3
"""bench/evsink.py - the events target of bench/events*.py: an HTTP receiver.

PURPOSE   Stands for a sender's webhook on loopback, as cheaply as Python
          allows, in a process of its own so that its CPU is not mtad's
          and not the load driver's: it counts the records (newlines) of
          every POST, checks that the count matches X-Mtad-Events and that
          the first and last records of the batch are JSON of schema v1,
          and answers 200 with an empty body (HTTP/1.1 keep-alive).
CONTRACT  evsink.py PORT STATSFILE.  Serves 127.0.0.1:PORT until SIGTERM.
          After every POST (and once at the start) it rewrites STATSFILE
          with one line "records=N posts=N bytes=N bad=N reception=N
          delivery=N" (the last two: records whose line has that type,
          counted with a substring search, not a parse); the rewrite is a
          rename, so a reader sees a whole line.  "ready" on stdout once
          it listens.  bad counts batches whose count or JSON was wrong
          (answered 400, so mtad offers them again).
FAILURE   A malformed request is answered 400 and counted in bad; the
          process exits only on SIGTERM/SIGINT.
"""

import http.server
import json
import os
import signal
import sys
import threading


class Stats:
    def __init__(self, path):
        self.path = path
        self.tmp = path + ".tmp"
        self.lock = threading.Lock()
        self.v = dict(records=0, posts=0, bytes=0, bad=0, reception=0,
                      delivery=0)
        self.write()

    def write(self):
        line = " ".join("%s=%d" % kv for kv in self.v.items()) + "\n"
        with open(self.tmp, "w") as f:
            f.write(line)
        os.rename(self.tmp, self.path)


def batch_ok(body, n):
    """The count matches and the first and last records parse as v1."""
    if n <= 0 or not body.endswith(b"\n"):
        return False
    first = body[:body.index(b"\n")]
    last = body[body.rindex(b"\n", 0, len(body) - 1) + 1:-1] \
        if n > 1 else first
    try:
        return all(json.loads(x).get("v") == 1 for x in (first, last))
    except ValueError:
        return False


def handler(stats):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            try:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                claimed = int(self.headers.get("X-Mtad-Events", "-1"))
            except (TypeError, ValueError):
                body, claimed = b"", -1
            n = body.count(b"\n")
            ok = n == claimed and batch_ok(body, n)
            with stats.lock:
                if ok:
                    stats.v["records"] += n
                    stats.v["bytes"] += len(body)
                    stats.v["reception"] += body.count(b'"type":"reception"')
                    stats.v["delivery"] += body.count(b'"type":"delivery"')
                else:
                    stats.v["bad"] += 1
                stats.v["posts"] += 1
                stats.write()
            self.send_response(200 if ok else 400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    return H


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    stats = Stats(path)
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler(stats))
    srv.daemon_threads = True

    def stop(signum, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    srv.serve_forever()
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
