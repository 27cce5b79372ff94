#!/usr/bin/python3
"""bench/bigqueue.py - mtad with a very large queue (issue 16).

PURPOSE   Fills a spool on /dev/shm with N deferred messages straight
          through the spool API (build/bench/bigqueue_fill: 1 KiB each, one
          recipient among 1,000 domains, next attempt an hour away), then
          measures:
            summary   `mtactl queue --summary` (by state and by domain),
                      mtad stopped: mtactl reads every file
            listing   `mtactl queue` in full, to a pipe: lines per second,
                      mtad stopped
            recovery  mtad start -> every worker's "recover: ... scheduled"
                      log line (the schedule rebuilt from the spool)
            index     recovery -> every worker's "queue index: ..." line
                      (its listing records read from the spool in the
                      background, delivery/qindex.c)
            summary and listing again with mtad running (`--daemon`: the
                      workers stream their index; the real operator case),
                      with the CPU of mtactl and of the mtad tree
            accept    msgs/s accepted and delivered end to end (smtpblast,
                      20 sessions, 1 KiB) with the queue present, against
                      an mtad on an empty spool, the two runs alternating
            flush     `mtactl flush` of everything while mtad runs, until
                      the command returns (delivery of a million messages
                      is not waited for: the route points at a sink that
                      counts them)
          and appends one section to bench/RESULTS.md, or to the file
          BENCH_RESULTS names (replacing its own earlier one).
CONTRACT  Run as root after `make` (`make bench BENCH_ONLY=bigqueue` runs
          it).  Environment: BENCH_BIGQUEUE_N (default 1000000).  Exit 0
          when every step ran, 1 otherwise.
FAILURE   Every process it starts is stopped by pid (harness.kill_tree) in a
          finally block; every wait is bounded.
"""

import os
import pwd
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

ROOT = harness.ROOT
FILL = os.path.join(harness.BUILD, "bench", "bigqueue_fill")
MTACTL = os.path.join(harness.BUILD, "mtactl")
N = int(os.environ.get("BENCH_BIGQUEUE_N", "1000000"))
SECTION = "## A million queued messages (`bench/bigqueue.py`, issue 16)"


def as_user(uid, gid):
    def drop():
        os.setgid(gid)
        os.setuid(uid)
    return drop


def child_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(argv, out=subprocess.DEVNULL, timeout=900):
    """(wall seconds, CPU seconds) of one command."""
    t0, c0 = time.time(), child_cpu()
    r = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), r.returncode,
                                                 r.stderr.decode(errors="replace")[-500:]))
    return time.time() - t0, child_cpu() - c0


def count_lines(argv, timeout=900):
    """Run argv with stdout to a pipe; (seconds, CPU seconds, lines)."""
    t0, c0 = time.time(), child_cpu()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = 0
    try:
        for chunk in iter(lambda: p.stdout.read(1 << 20), b""):
            lines += chunk.count(b"\n")
        p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            harness.kill_tree(p.pid, 2)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d" % (" ".join(argv), p.returncode))
    return time.time() - t0, child_cpu() - c0, lines


def wait_recover(logfile, nworkers, t0, timeout=600):
    """Seconds from t0 until nworkers "recover: N queued ..." lines are in
    the log; also the numbers they scheduled."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(logfile) as f:
                found = re.findall(r"recover: (\d+) queued messages of shard", f.read())
        except OSError:
            found = []
        if len(found) >= nworkers:
            return time.time() - t0, [int(x) for x in found]
        time.sleep(0.05)
    raise RuntimeError("no recover line from %d workers within %d s" % (nworkers, timeout))


def wait_index(logfile, nworkers, t0, timeout=900):
    """Seconds from t0 until nworkers "queue index: N messages" lines are
    in the log, and the counts."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(logfile) as f:
                found = re.findall(r"queue index: (\d+) messages", f.read())
        except OSError:
            found = []
        if len(found) >= nworkers:
            return time.time() - t0, [int(x) for x in found]
        time.sleep(0.05)
    raise RuntimeError("no queue index line from %d workers within %d s" % (nworkers, timeout))


def main():
    if os.getuid() != 0:
        print("bigqueue: must run as root", file=sys.stderr)
        return 1
    user, group, uid, gid = harness.mta_user()
    work = tempfile.mkdtemp(prefix="mtad-bigq.", dir="/dev/shm")
    os.chmod(work, 0o755)
    started = time.time()
    load0 = os.getloadavg()
    res = {}
    sink = mta = esink = emta = None
    try:
        bindir = os.path.join(work, "bin")
        os.makedirs(bindir)
        os.chmod(bindir, 0o755)
        harness.MTAD = shutil.copy2(harness.MTAD, bindir)
        harness.BLAST = shutil.copy2(harness.BLAST, bindir)
        harness.SINK = shutil.copy2(harness.SINK, bindir)
        global MTACTL
        MTACTL = shutil.copy2(MTACTL, bindir)
        sink = harness.Sink("ours", harness.free_port(), work)
        sink.start()
        nworkers = max(2, harness.NCPU)

        # 1. an mtad on an empty spool, for the comparison: it runs
        # until the accept runs of step 5, which alternate between the
        # two (this box's speed drifts by more than the difference
        # sought over the minutes between, and for a while after the
        # fill everything on it ran 40% slower, the empty mtad as well)
        empty = os.path.join(work, "empty-spool")
        wd0 = os.path.join(work, "mtad-empty")
        os.makedirs(wd0)
        os.chmod(wd0, 0o755)
        esink = harness.Sink("ours", harness.free_port(), work)
        esink.start()
        emta = harness.Mtad(wd0, empty, False, esink.port)
        emta.start()
        harness.measure(emta, esink, "ours", 20, 400, 1, 1024)     # warm-up
        msgs = harness.calibrate(emta, esink, "ours", 20, 1, 1024)

        # 2. the big queue, written as the workers' user
        spool = os.path.join(work, "spool")
        os.makedirs(spool, 0o700)
        os.chown(spool, uid, gid)
        t0 = time.time()
        subprocess.run([FILL, spool, str(N), str(nworkers)], check=True,
                       preexec_fn=as_user(uid, gid), timeout=3600,
                       stdout=subprocess.DEVNULL)
        res["fill_s"] = time.time() - t0
        wd = os.path.join(work, "mtad-big")
        os.makedirs(wd)
        os.chmod(wd, 0o755)
        mta = harness.Mtad(wd, spool, False, sink.port)
        mta.write_config()

        # 3. mtactl on the spool, mtad stopped (nothing locked): the
        # fallback, mtactl reads every file
        res["summary_s"] = timed([MTACTL, "-c", mta.cfg, "queue", "--summary"])
        res["list_s"], res["list_cpu"], res["list_lines"] = count_lines([MTACTL, "-c", mta.cfg, "queue"])

        # 4. start-up recovery
        t0 = time.time()
        mta.proc = harness.spawn([harness.MTAD, "-f", "-c", mta.cfg],
                                 os.path.join(wd, "mtad.out"))
        res["recover_s"], res["recovered"] = wait_recover(mta.logfile, nworkers, t0)
        # CPU of the whole tree up to now: start-up and the recovery
        res["recover_cpu"] = harness.tree_cpu(mta.root())
        if not harness.wait_banner(mta.port, 60, mta.proc):
            raise RuntimeError("mtad with the big queue does not answer")

        # 4b. the workers' index: records read in the background, then
        # summary and listing through the workers (mtad running)
        res["index_s"], res["indexed"] = wait_index(mta.logfile, nworkers, t0)
        res["index_s"] -= res["recover_s"]
        res["rss_kb"] = sum(harness.rss_kb(p) or 0 for p in harness.tree(mta.root()))
        c0 = harness.tree_cpu(mta.root())
        res["dsummary_s"] = timed([MTACTL, "-c", mta.cfg, "queue", "--summary", "--daemon"])
        res["dsummary_mtad_cpu"] = harness.tree_cpu(mta.root()) - c0
        c0 = harness.tree_cpu(mta.root())
        res["dlist_s"], res["dlist_cpu"], res["dlist_lines"] = count_lines(
            [MTACTL, "-c", mta.cfg, "queue", "--daemon"])
        res["dlist_mtad_cpu"] = harness.tree_cpu(mta.root()) - c0

        # 5. accepting with the queue present, alternating with the
        # empty spool's mtad
        harness.measure(mta, sink, "ours", 20, 400, 1, 1024)       # warm-up
        res["accept_empty"], res["accept_big"] = [], []
        for _ in range(3):
            res["accept_empty"].append(harness.measure(emta, esink, "ours", 20, msgs, 1, 1024))
            res["accept_big"].append(harness.measure(mta, sink, "ours", 20, msgs, 1, 1024))
        res["msgs"] = msgs

        # 6. flush everything while mtad runs
        res["flush_s"] = timed([MTACTL, "-c", mta.cfg, "flush"])
    finally:
        for obj in (mta, sink, emta, esink):
            if obj is not None:
                obj.stop()
        for p in harness.STARTED:
            if p.poll() is None:
                harness.kill_tree(p.pid, 2)
        shutil.rmtree(work, ignore_errors=True)
    secs = time.time() - started
    write(res, secs, load0)
    return 0


def write(res, secs, load0):
    def med(key, field):
        v = sorted(r[field] for r in res[key])
        return v[len(v) // 2]
    acc_e, acc_b = med("accept_empty", "acc_rate"), med("accept_big", "acc_rate")
    e2e_e, e2e_b = med("accept_empty", "e2e_rate"), med("accept_big", "e2e_rate")
    lines = [
        SECTION, "",
        "Measured %s UTC, %d messages, load average at start %.1f, at end %.1f "
        "(the 2-core VM is shared: times are wall clock), %.0f s in all."
        % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), N, load0[0],
           os.getloadavg()[0], secs), "",
        "| step | result |", "|---|---|",
        "| fill (bigqueue_fill, spool API, with a state file each) | %.1f s |" % res["fill_s"],
        "| `mtactl queue --summary` (by state and domain), **mtad stopped**: "
        "mtactl reads the files | %.2f s (CPU %.2f s) |"
        % res["summary_s"],
        "| `mtactl queue` full listing to a pipe, **mtad stopped** (files) | %.2f s "
        "(CPU %.2f s), %d lines, %.0f lines/s (%.0f per CPU second) |"
        % (res["list_s"], res["list_cpu"], res["list_lines"], res["list_lines"] / res["list_s"],
           res["list_lines"] / max(res["list_cpu"], 1e-3)),
        "| `mtactl queue --summary --daemon`, **mtad running**: the workers "
        "stream their index | %.2f s (mtactl CPU %.2f s, mtad CPU %.2f s) |"
        % (res["dsummary_s"][0], res["dsummary_s"][1], res["dsummary_mtad_cpu"]),
        "| `mtactl queue --daemon` full listing to a pipe, **mtad running** | "
        "%.2f s (mtactl CPU %.2f s, mtad CPU %.2f s), %d lines, %.0f lines/s |"
        % (res["dlist_s"], res["dlist_cpu"], res["dlist_mtad_cpu"], res["dlist_lines"],
           res["dlist_lines"] / res["dlist_s"]),
        "| the workers' index read in the background after recovery "
        "(recover: line -> every worker's `queue index:` line) | %.2f s (%s) |"
        % (res["index_s"], " + ".join(str(x) for x in res["indexed"])),
        "| memory of the mtad tree with the index read (sum of RSS) | %.0f MB |"
        % (res["rss_kb"] / 1024),
        "| start-up recovery (spawn -> every worker's `recover:` line, which "
        "logd writes within log.flush_interval, 100 ms) | %.2f s (mtad CPU %.2f s; %s) |"
        % (res["recover_s"], res["recover_cpu"], " + ".join(str(x) for x in res["recovered"])),
        "| accepted msgs/s, 20 sessions, empty spool / big queue | %.0f / %.0f (%.2f×) |"
        % (acc_e, acc_b, acc_b / acc_e if acc_e else 0),
        "| end-to-end msgs/s, empty spool / big queue | %.0f / %.0f (%.2f×) |"
        % (e2e_e, e2e_b, e2e_b / e2e_e if e2e_e else 0),
        "| `mtactl flush` of everything, mtad running (until the command returns) | %.2f s (CPU %.2f s) |"
        % res["flush_s"],
        "",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    # a partial run (BENCH_RESULTS) leaves bench/RESULTS.md alone, as the
    # harness does
    path = os.environ.get("BENCH_RESULTS") or os.path.join(ROOT, "bench", "RESULTS.md")
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        old = ""
    if SECTION in old:
        head, rest = old.split(SECTION, 1)
        nxt = rest.find("\n## ")
        old = head + (rest[nxt + 1:] if nxt >= 0 else "")
    with open(path, "w") as f:
        f.write(old.rstrip("\n") + "\n\n" + text)


if __name__ == "__main__":
    sys.exit(main())
