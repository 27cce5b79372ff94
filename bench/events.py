#!/usr/bin/python3
"""bench/events.py - what delivery events cost, and how a backlog drains.

PURPOSE   Two measurements of docs/EVENTS.md's events:
          1. events off vs on (an HTTP receiver on loopback), 1 KiB
             messages, 20 sessions, interleaved runs (off, on, off, on, ...)
             of one fresh mtad each: the end-to-end rate and mtad's CPU per
             message (master, workers and log process).
          2. the backlog: the receiver down for --down seconds while the
             load runs at full rate; then the events' bytes on the spool per
             event, and the time until the receiver has every event once it
             is back.
CONTRACT  Run as root after `make` (the harness's mtad runs workers as its
          own user).  Prints one line per run and a summary in Markdown
          for bench/RESULTS.md.  Exit 0 when every run delivered what it
          accepted and the backlog drained, 1 otherwise.  The receiver
          counts records (newlines) and answers 200; it does not parse.
FAILURE   mtad and the sink are stopped by pid in finally blocks; every
          wait is bounded.
"""

import argparse
import http.server
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class Receiver:
    """Counts the records POSTed to it; down() refuses connections."""

    def __init__(self):
        self.port = harness.free_port()
        self.count = 0
        self.posts = 0
        self.lock = threading.Lock()
        self.srv = None

    def up(self):
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with rec.lock:
                    rec.count += body.count(b"\n")
                    rec.posts += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def down(self):
        if self.srv is not None:
            self.srv.shutdown()
            self.srv.server_close()
            self.srv = None


def events_yaml(port):
    return ("events:\n  http:\n    url: \"http://127.0.0.1:%d/ev\"\n"
            "    timeout: 5s\n" % port)


def one_run(sink, work, recv, sessions, msgs, size, on):
    run_dir = tempfile.mkdtemp(prefix="run.", dir=work)
    os.chmod(run_dir, 0o755)
    mta = harness.Mtad(run_dir, os.path.join(run_dir, "queue"), False,
                       sink.port, extra=events_yaml(recv.port) if on else "")
    try:
        mta.start()
        harness.measure(mta, sink, "ours", sessions, max(500, msgs // 10), 1,
                        size)
        return harness.measure(mta, sink, "ours", sessions, msgs, 1, size)
    finally:
        mta.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def du(path):
    total = 0
    for name in os.listdir(path):
        if name.endswith(".ev"):
            total += os.path.getsize(os.path.join(path, name))
    return total


def backlog_run(sink, work, recv, sessions, size, down_s):
    """Load at full rate with the receiver down for down_s seconds."""
    run_dir = tempfile.mkdtemp(prefix="backlog.", dir=work)
    os.chmod(run_dir, 0o755)
    spool = os.path.join(run_dir, "queue")
    mta = harness.Mtad(run_dir, spool, False, sink.port,
                       extra=events_yaml(recv.port) +
                       "  max_backlog: 20G\n")
    recv.down()
    out = {}
    try:
        mta.start()
        before = recv.count
        t0 = time.time()
        delivered = 0
        # bounded: one measure() per chunk of messages until the time is up
        while time.time() - t0 < down_s:
            r = harness.measure(mta, sink, "ours", sessions, 20000, 1, size)
            delivered += r["delivered"]
        loaded = time.time() - t0
        evdir = os.path.join(spool, "events")
        events = 2 * delivered              # a reception and a delivery each
        out["down_s"] = loaded
        out["messages"] = delivered
        out["events"] = events
        out["bytes"] = du(evdir)
        recv.up()
        t1 = time.time()
        deadline = t1 + max(600, 4 * loaded)
        while recv.count - before < events and time.time() < deadline:
            time.sleep(0.05)
        out["drain_s"] = time.time() - t1
        out["received"] = recv.count - before
        out["posts"] = recv.posts
        return out
    finally:
        mta.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3, help="pairs of runs")
    ap.add_argument("-c", type=int, default=20, help="sessions")
    ap.add_argument("-m", type=int, default=20000, help="messages a run")
    ap.add_argument("-z", type=int, default=1024, help="message size")
    ap.add_argument("--down", type=float, default=60,
                    help="seconds the receiver is down in the backlog run "
                    "(the issue asks for 600)")
    ap.add_argument("--skip-backlog", action="store_true")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mtad-events.", dir="/dev/shm")
    os.chmod(work, 0o755)
    sink = harness.Sink("ours", harness.free_port(), work)
    recv = Receiver()
    recv.up()
    res = {False: [], True: []}
    ok = True
    try:
        sink.start()
        print("load before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
        for i in range(a.n):
            for on in (False, True):
                seen = recv.count
                r = one_run(sink, work, recv, a.c, a.m, a.z, on)
                r["events"] = recv.count - seen
                ok = ok and r["e2e_complete"]
                res[on].append(r)
                print("pair %d events %s: e2e %.0f msgs/s, cpu %.3f ms/msg, "
                      "delivered %d/%d, events received %d" % (
                          i + 1, "on " if on else "off", r["e2e_rate"],
                          r["cpu_per_1000"] or 0, r["delivered"],
                          r["accepted"], r["events"]),
                      flush=True)
        med = {on: (statistics.median(r["e2e_rate"] for r in res[on]),
                    statistics.median((r["cpu_per_1000"] or 0)
                                      for r in res[on]))
               for on in (False, True)}
        print("\n| events | e2e msgs/s (median) | CPU ms/msg (median) |")
        print("|---|---:|---:|")
        for on in (False, True):
            print("| %s | %.0f | %.3f |" % ("on (HTTP, loopback)" if on
                                           else "off", med[on][0],
                                           med[on][1]))
        print("\nthroughput on/off: %.1f%%, CPU on/off: %+.1f%%" % (
            100 * med[True][0] / med[False][0],
            100 * (med[True][1] / med[False][1] - 1)))
        if not a.skip_backlog:
            b = backlog_run(sink, work, recv, a.c, a.z, a.down)
            ok = ok and b["received"] >= b["events"]
            print("\nbacklog: receiver down %.0f s at full rate: %d messages, "
                  "%d events, %.1f MB on the spool (%.0f bytes/event); "
                  "drained in %.1f s once back (%d of %d received, %d POSTs)"
                  % (b["down_s"], b["messages"], b["events"],
                     b["bytes"] / 1e6, b["bytes"] / max(1, b["events"]),
                     b["drain_s"], b["received"], b["events"], b["posts"]))
        print("load after: %.2f %.2f %.2f" % os.getloadavg())
    finally:
        recv.down()
        sink.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
