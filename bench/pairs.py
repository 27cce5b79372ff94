#!/usr/bin/python3
"""bench/pairs.py - two mtad builds, interleaved, on the same load.

PURPOSE   Tells whether a change moved the hot path: runs build A and build
          B in turn (A, B, A, B, ...), each a fresh mtad on a tmpfs spool
          relaying to our smtpsink, and prints per run the end-to-end rate
          and mtad's CPU per message.  Interleaving keeps a box that drifts
          (a VM's neighbours, thermal state) from being read as the change.
CONTRACT  Run as root after `make`.  Arguments: --a BIN --b BIN [-n PAIRS]
          [-c SESSIONS] [-m MSGS] [-z SIZE].  Prints one line per run and
          the medians of each build.  Exit 0 when every run delivered all
          it accepted, 1 otherwise.
FAILURE   Each mtad and sink is stopped by pid in a finally block
          (harness.kill_tree); every wait is bounded (harness.measure).
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def one_run(binary, sink, work, sessions, msgs, size):
    """One fresh mtad of BINARY: a warm-up, then the measured run."""
    run_dir = tempfile.mkdtemp(prefix="run.", dir=work)
    os.chmod(run_dir, 0o755)
    harness.MTAD = binary
    mta = harness.Mtad(run_dir, os.path.join(run_dir, "queue"), False, sink.port)
    try:
        mta.start()
        harness.measure(mta, sink, "ours", sessions, max(500, msgs // 10), 1, size)
        return harness.measure(mta, sink, "ours", sessions, msgs, 1, size)
    finally:
        mta.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="mtad binary A (e.g. the old build)")
    ap.add_argument("--b", required=True, help="mtad binary B (e.g. the new build)")
    ap.add_argument("-n", type=int, default=3, help="pairs")
    ap.add_argument("-c", type=int, default=20, help="sessions")
    ap.add_argument("-m", type=int, default=20000, help="messages a run")
    ap.add_argument("-z", type=int, default=1024, help="message size")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mtad-pairs.", dir="/dev/shm")
    os.chmod(work, 0o755)
    # private copies: a make elsewhere may relink the build in place
    bins = {k: shutil.copy2(p, os.path.join(work, "mtad-" + k))
            for k, p in (("A", a.a), ("B", a.b))}
    sink = harness.Sink("ours", harness.free_port(), work)
    res = {"A": [], "B": []}
    ok = True
    try:
        sink.start()
        print("load before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
        for i in range(a.n):
            for k in ("A", "B"):
                r = one_run(bins[k], sink, work, a.c, a.m, a.z)
                ok = ok and r["e2e_complete"]
                res[k].append(r)
                print("pair %d %s: e2e %.0f msgs/s, cpu %.3f ms/msg, delivered %d/%d"
                      % (i + 1, k, r["e2e_rate"], (r["cpu_per_1000"] or 0),
                         r["delivered"], r["accepted"]), flush=True)
        for k in ("A", "B"):
            print("%s median: e2e %.0f msgs/s, cpu %.3f ms/msg" % (
                k, statistics.median(r["e2e_rate"] for r in res[k]),
                statistics.median((r["cpu_per_1000"] or 0) for r in res[k])))
        print("load after: %.2f %.2f %.2f" % os.getloadavg())
    finally:
        sink.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
