"""ops_bench.py - the 1 KiB, 20-session figure with metrics on and JSON logs
against the defaults (issue 13): `python3 bench/ops_bench.py [REPS]`.

Uses bench/harness.py's pieces (our smtpsink, smtpblast, Mtad config) on a
tmpfs work directory; the two configurations run alternately, REPS times
each (default 3), with the same message count, so that a busy moment of
this shared machine hits both alike.  With metrics on, /metrics is scraped
once a second during the run (a far shorter interval than Prometheus'
usual 15 s).  Prints medians [min-max] of msgs/s accepted and end-to-end.
Needs root (mtad's privilege drop, as bench/run.sh).
"""
import os
import shutil
import statistics
import sys
import tempfile
import threading
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MSGS = int(os.environ.get("OPS_BENCH_MSGS", "20000"))


class OpsMtad(harness.Mtad):
    """harness.Mtad with log.format: json and metrics.listen."""

    def __init__(self, *a, ops=False, **kw):
        super().__init__(*a, **kw)
        self.ops = ops
        self.mport = harness.free_port() if ops else None

    def write_config(self):
        super().write_config()
        if not self.ops:
            return
        with open(self.cfg) as f:
            text = f.read()
        text = text.replace("  level: info\n", "  level: info\n  format: json\n")
        text += "metrics:\n  listen: \"127.0.0.1:%d\"\n" % self.mport
        with open(self.cfg, "w") as f:
            f.write(text)


def scraper(port, stop, counts):
    while not stop.wait(1.0):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                    timeout=5) as r:
            r.read()
        counts[0] += 1


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = tempfile.mkdtemp(prefix="mtad-opsbench-", dir="/dev/shm")
    os.chmod(work, 0o755)
    sink = harness.Sink("ours", harness.free_port(), work)
    mtas = []
    try:
        sink.start()
        for name, ops in (("default", False), ("metrics+json", True)):
            d = os.path.join(work, name)
            os.makedirs(d)
            m = OpsMtad(d, os.path.join(d, "spool"), False, sink.port, ops=ops)
            m.label = name
            m.start()
            mtas.append(m)
        res = {m.label: [] for m in mtas}
        for rep in range(reps):
            for m in (mtas if rep % 2 == 0 else mtas[::-1]):
                stop, scrapes = threading.Event(), [0]
                t = None
                if m.ops:
                    t = threading.Thread(target=scraper, args=(m.mport, stop, scrapes))
                    t.start()
                r = harness.measure(m, sink, "ours", 20, MSGS, 1, 1024)
                stop.set()
                if t:
                    t.join()
                assert r["e2e_complete"], r
                res[m.label].append(r)
                print("%-13s rep %d: %6.0f msgs/s accepted, %6.0f end-to-end, "
                      "p99 %.2f ms, %.3f CPU s/1000 msgs%s" % (
                          m.label, rep + 1, r["acc_rate"], r["e2e_rate"],
                          r["p99"] / 1000.0, r["cpu_per_1000"],
                                         ", %d scrapes" % scrapes[0] if m.ops else ""),
                      flush=True)
        for label, rs in res.items():
            acc = [r["acc_rate"] for r in rs]
            e2e = [r["e2e_rate"] for r in rs]
            cpu = [r["cpu_per_1000"] for r in rs]
            print("%-13s median %6.0f accepted [%0.f-%0.f], %6.0f end-to-end [%0.f-%0.f], "
                  "%.3f CPU s/1000 msgs [%.3f-%.3f]"
                  % (label, statistics.median(acc), min(acc), max(acc),
                     statistics.median(e2e), min(e2e), max(e2e),
                     statistics.median(cpu), min(cpu), max(cpu)))
        ops = [m for m in mtas if m.ops][0]
        with open(ops.logfile, "rb") as f:
            lines = f.read().split(b"\n")[:-1]
        import json
        for ln in lines:
            json.loads(ln)
        print("metrics+json: %d JSON log lines, all parsed" % len(lines))
    finally:
        for m in mtas:
            m.stop()
        sink.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
