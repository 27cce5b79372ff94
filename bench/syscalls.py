#!/usr/bin/python3
"""bench/syscalls.py - system calls per delivered message, by call.

PURPOSE   Counts what mtad's processes (master, logd, workers) ask of the
          kernel for each message relayed: one mtad and one smtpsink on
          loopback (bench/harness.py's classes), a warm-up, then
          `strace -f -c` attached to every mtad process during a bounded
          smtpblast run.  Unlike a wall-clock rate this figure holds still
          on a loaded machine, so it is what issue 16 measures changes by.
CONTRACT  Run as root after `make`.  Arguments: [-c SESSIONS] [-m MSGS]
          [-k PER_CONN] [-z SIZE] [--disk] [--mtad BIN] [--tool ours|pf].  Prints one line per system
          call (calls per delivered message, sorted) and the total.
          Exit 0 when every accepted message reached the sink, 1 otherwise.
FAILURE   Every process it starts is stopped by pid in a finally block
          (harness.kill_tree); every wait is bounded.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def strace_counts(path):
    """{syscall: calls} from strace -c output."""
    out = {}
    summary = False
    with open(path) as f:
        for line in f:
            if line.startswith("% time"):
                summary = True          # with --trace the summary comes last
            if not summary:
                continue
            parts = line.split()
            # % time, seconds, usecs/call, calls, [errors], syscall
            if len(parts) >= 5 and re.match(r"^[\d.]+$", parts[0]) and parts[-1] != "total":
                calls = int(parts[3])
                out[parts[-1]] = out.get(parts[-1], 0) + calls
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-c", type=int, default=20)
    ap.add_argument("-m", type=int, default=4000)
    ap.add_argument("-k", type=int, default=1)
    ap.add_argument("-z", type=int, default=1024)
    ap.add_argument("--mtad", default=harness.MTAD)
    ap.add_argument("--tool", default="ours", choices=("ours", "pf"),
                    help="load pair: ours (smtpblast/smtpsink) or pf "
                    "(Postfix's smtp-source/smtp-sink)")
    ap.add_argument("--extra", default="", help="extra relay.yaml text")
    ap.add_argument("--disk", action="store_true", help="durable: spool on /var/tmp, "
                    "spool.fsync: true (as make bench's durable row)")
    ap.add_argument("--trace", help="also write the full strace (no -c) to this file")
    ap.add_argument("--perf", help="instead of strace: perf record -g of the workers "
                    "into this file (perf report -i FILE)")
    a = ap.parse_args()
    shm = tempfile.mkdtemp(prefix="mtad-sys.", dir="/dev/shm")
    disk = None
    os.chmod(shm, 0o755)
    harness.MTAD = shutil.copy2(a.mtad, shm)
    sink = mta = st = None
    ok = False
    try:
        sink = harness.Sink(a.tool, harness.free_port(), shm)
        sink.start()
        spool = os.path.join(shm, "queue")
        if a.disk:
            disk = tempfile.mkdtemp(prefix="mtad-sys.", dir="/var/tmp")
            os.chmod(disk, 0o755)
            spool = os.path.join(disk, "queue")
        mta = harness.Mtad(shm, spool, a.disk, sink.port, extra=a.extra)
        mta.start()
        harness.measure(mta, sink, a.tool, 20, 400, 1, a.z)       # warm-up
        pids = [p for p in harness.tree(mta.root()) if harness.alive(p)]
        out = os.path.join(shm, "strace.out")
        argv = ["strace", "-f", "-c", "-o", out]
        if a.perf:
            wpids = pids
            argv = ["perf", "record", "-q", "-g", "-F", "1999", "-o", a.perf,
                    "-p", ",".join(str(p) for p in wpids)]
        elif a.trace:
            # -C: the summary and the full trace (-o then holds both)
            argv = ["strace", "-f", "-C", "-T", "-s", "80", "-o", out]
        if not a.perf:                   # perf takes one -p with a list
            for p in pids:
                argv += ["-p", str(p)]
        st = harness.spawn(argv, os.path.join(shm, "strace.log"))
        time.sleep(1.0)                  # attach
        r = harness.measure(mta, sink, a.tool, a.c, a.m, a.k, a.z)
        time.sleep(0.3)
        os.kill(st.pid, signal.SIGINT)
        st.wait(timeout=30)
        st = None
        if a.trace:
            shutil.copy(out, a.trace)
        got = r["delivered"]
        if a.perf:
            print("sessions=%d msgs=%d accepted=%d delivered=%d cpu_s_per_1000=%.3f" %
                  (a.c, a.m, r["accepted"], got, r["cpu_per_1000"] or -1))
            return 0 if r["e2e_complete"] else 1
        counts = strace_counts(out)
        total = sum(counts.values())
        print("sessions=%d msgs=%d per_conn=%d size=%d accepted=%d delivered=%d" %
              (a.c, a.m, a.k, a.z, r["accepted"], got))
        for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            if n / max(got, 1) >= 0.005:
                print("%-16s %7.2f" % (name, n / max(got, 1)))
        print("%-16s %7.2f" % ("TOTAL", total / max(got, 1)))
        ok = r["e2e_complete"]
    finally:
        if st is not None and st.poll() is None:
            harness.kill_tree(st.pid, 2)
        for obj in (mta, sink):
            if obj is not None:
                obj.stop()
        for p in harness.STARTED:
            if p.poll() is None:
                harness.kill_tree(p.pid, 2)
        shutil.rmtree(shm, ignore_errors=True)
        if disk is not None:
            shutil.rmtree(disk, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
