#!/usr/bin/python3
"""bench/scale.py - three mtad nodes behind HAProxy against one node direct.

PURPOSE   The cost of scaling out on one box: smtpblast -> HAProxy (the
          config of tests/integration/mtadtest.py and docs/SCALING.md,
          PROXY v2 to every node) -> three mtad nodes -> smtpsink, against
          smtpblast -> one mtad -> smtpsink, and one node behind HAProxy
          (the proxy hop alone).  1 KiB messages, 20 sessions, one message
          per connection (every message pays a proxied connection and a
          PROXY header) and 100 per connection.  Reports the end-to-end rate
          (counted at the sink) and CPU seconds per 1,000 messages of
          HAProxy and of the mtad processes (utime + stime from /proc).
CONTRACT  Run as root after `make` (bench/scale.sh).  BENCH_REPS (default
          3) repetitions, medians printed as a Markdown table on stdout and
          written into bench/RESULTS.md's "## Scale-out" section (replaced
          if present).  Each node runs `server.workers: 2`.
FAILURE   Every process is started and stopped by pid (harness.kill_tree);
          every wait is bounded.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import harness  # noqa: E402
from harness import (BLAST, MTAD, Sink, free_port, kill_tree, spawn,  # noqa: E402
                     tree_cpu, wait_banner, log)
from mtadtest import HAPROXY, haproxy_config  # noqa: E402

REPS = int(os.environ.get("BENCH_REPS", "3"))
MSGS = int(os.environ.get("BENCH_MSGS", "6000"))


def node_config(d, name, port, pport, sinkport):
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)          # root's: mtad refuses a worker-writable one
    with open(os.path.join(d, "relay.yaml"), "w") as f:
        f.write("""server:
  hostname: "%s"
  listen:
    - "127.0.0.1:%d"
    - address: "127.0.0.1:%d"
      proxy_protocol: v2
      proxy_from: [127.0.0.1/32]
  workers: 2
  pid_file: "%s/pid"
  control_socket: "%s/control.sock"
limits:
  max_connections_per_ip: 10000
spool:
  dir: "%s/spool"
routes:
  db: "%s/routes.mdb"
  default: "smtp:[127.0.0.1]:%d"
delivery:
  retry: [1s, 2s]
log:
  file: "%s/mtad.log"
  level: warn
""" % (name, port, pport, d, d, d, d, sinkport, d))
    return os.path.join(d, "relay.yaml")


class Node:
    def __init__(self, base, name, sinkport):
        self.dir = os.path.join(base, name)
        self.port, self.pport = free_port(), free_port()
        self.cfg = node_config(self.dir, name, self.port, self.pport, sinkport)

    def start(self):
        self.proc = spawn([MTAD, "-f", "-c", self.cfg],
                          os.path.join(self.dir, "stderr.log"))
        if not wait_banner(self.port, 15, self.proc):
            raise RuntimeError("mtad %s did not start" % self.dir)

    def cpu(self):
        return tree_cpu(self.proc.pid)

    def stop(self):
        kill_tree(self.proc.pid, 10)


def blast(port, per_conn):
    argv = [BLAST, "-s", "127.0.0.1:%d" % port, "-c", "20", "-m", str(MSGS),
            "-k", str(per_conn), "-z", "1024", "-T", "120"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    kv = dict(re.findall(r"(\w+)=([\d.]+)", r.stdout))
    if int(kv.get("accepted", 0)) != MSGS:
        raise RuntimeError("smtpblast: %s %s" % (r.stdout, r.stderr))
    return kv


def run(sink, target_port, nodes, hap, per_conn):
    before = sink.count()
    cpu_n0 = sum(n.cpu() for n in nodes)
    cpu_h0 = tree_cpu(hap.pid) if hap else 0.0
    t0 = time.time()
    kv = blast(target_port, per_conn)
    deadline = time.time() + 60
    while sink.count() - before < MSGS and time.time() < deadline:
        time.sleep(0.01)
    got = sink.count() - before
    if got < MSGS:
        raise RuntimeError("sink got %d of %d" % (got, MSGS))
    wall = time.time() - t0
    return dict(rate=MSGS / wall,
                cpu_mtad=(sum(n.cpu() for n in nodes) - cpu_n0) * 1000 / MSGS,
                cpu_hap=((tree_cpu(hap.pid) - cpu_h0) * 1000 / MSGS
                         if hap else 0.0),
                p50=int(kv["p50_us"]) / 1000, p99=int(kv["p99_us"]) / 1000)


def start_haproxy(base, nodes):
    front = free_port()
    cfg = os.path.join(base, "haproxy-%d.cfg" % front)
    with open(cfg, "w") as f:
        f.write(haproxy_config(front, [(os.path.basename(n.dir), n.pport,
                                        "send-proxy-v2") for n in nodes]))
    p = spawn([HAPROXY, "-db", "-f", cfg], cfg + ".out")
    if not wait_banner(front, 15, p):
        raise RuntimeError("haproxy did not start")
    # the first health checks (rise 2, inter 500ms) must mark every node up
    time.sleep(1.5)
    return p, front


def write_section(text, load0):
    """Replace (or append) the "## Scale-out" section of RESULTS.md."""
    path = os.path.join(HERE, "RESULTS.md")
    try:
        with open(path) as f:
            old = f.read()
    except OSError:
        old = "# Benchmark results\n"
    if "\n## Scale-out" in old:
        old = old[:old.index("\n## Scale-out")]
    sec = ["", "## Scale-out: three nodes behind HAProxy, one node direct", "",
           "Written by `bench/scale.sh` (bench/scale.py): %s, %d repetitions "
           "(medians), %d messages of 1 KiB per run from 20 smtpblast "
           "sessions, every node `server.workers: 2`, HAProxy %s with the "
           "configuration of docs/SCALING.md (`send-proxy-v2`), all on this "
           "one 2-core box with the sink; load average at start %.2f, at end "
           "%.2f (other work on the machine skews figures)." % (
               time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), REPS, MSGS,
               haproxy_version(), load0, os.getloadavg()[0]), "", text, "",
           "CPU ms/msg counts all three mtad nodes in every row (idle ones "
           "answer health checks) and HAProxy alone; the proxy hop is the "
           "difference between the two one-node rows.  On 2 cores three "
           "nodes cannot be faster than one: the point is the overhead.", ""]
    with open(path, "w") as f:
        f.write(old.rstrip("\n") + "\n" + "\n".join(sec))


def haproxy_version():
    r = subprocess.run([HAPROXY, "-v"], capture_output=True, text=True)
    m = re.search(r"version (\S+)", r.stdout)
    return m.group(1) if m else "?"


def main():
    load0 = os.getloadavg()[0]
    base = tempfile.mkdtemp(prefix="mtad-scale-", dir="/dev/shm")
    os.chmod(base, 0o755)
    sink = Sink("ours", free_port(), base)
    started = []
    rows = {}
    try:
        sink.start()
        nodes = [Node(base, "n%d" % i, sink.port) for i in (1, 2, 3)]
        for n in nodes:
            n.start()
            started.append(n)
        hap3, front3 = start_haproxy(base, nodes)
        hap1, front1 = start_haproxy(base, nodes[:1])
        setups = (("1 node direct", nodes[0].port, nodes[:1], None),
                  ("1 node behind HAProxy", front1, nodes[:1], hap1),
                  ("3 nodes behind HAProxy", front3, nodes, hap3))
        for per_conn in (1, 100):
            for rep in range(REPS):
                for name, port, ns, hap in setups:
                    # all three nodes' CPU counts in every setup: idle nodes
                    # still answer health checks
                    r = run(sink, port, nodes, hap, per_conn)
                    rows.setdefault((per_conn, name), []).append(r)
                    log("k=%d %s: %.0f msg/s" % (per_conn, name, r["rate"]))
    finally:
        for p in harness.STARTED:
            kill_tree(p.pid, 10)
        shutil.rmtree(base, ignore_errors=True)
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]}
           for k, v in rows.items()}
    out = ["| msgs per connection | setup | msg/s end-to-end | CPU ms/msg "
           "mtad (3 nodes) | CPU ms/msg HAProxy | p50 / p99 ms |",
           "|---|---|---|---|---|---|"]
    for (k, name), m in med.items():
        out.append("| %d | %s | %.0f | %.3f | %.3f | %.2f / %.2f |" % (
            k, name, m["rate"], m["cpu_mtad"], m["cpu_hap"], m["p50"],
            m["p99"]))
    for k in (1, 100):
        d, h = med[(k, "1 node direct")], med[(k, "1 node behind HAProxy")]
        out.append("")
        out.append("k=%d: proxy hop = %.1f µs of wall time per message "
                   "(1/rate, 1 node), HAProxy CPU %.1f µs/msg, mtad CPU "
                   "%+.1f µs/msg" % (k, (1 / h["rate"] - 1 / d["rate"]) * 1e6,
                                     h["cpu_hap"] * 1000,
                                     (h["cpu_mtad"] - d["cpu_mtad"]) * 1000))
    print("\n".join(out))
    write_section("\n".join(out), load0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
