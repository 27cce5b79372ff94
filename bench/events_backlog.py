#!/usr/bin/python3
"""bench/events_backlog.py - the events backlog while the target is down
(`make bench-events-backlog`).

PURPOSE   Issue 37's third figure: mtad relays 1 KiB messages at full rate
          (smtpblast, 20 sessions, one message per connection, to our
          smtpsink) for --minutes (default 10) with events on and the HTTP
          target (bench/evsink.py) down, connections refused.  Then: the
          events' bytes on the spool per event (file sizes and the blocks
          they take), the metrics' backlog and oldest unsent age; the
          target comes back, and the script times the drain: until the
          first record arrives (mtad's back-off, at most 60 s) and until
          the last one has, with mtad's and the target's CPU meanwhile.
          While the load runs it samples the rate, the backlog and the
          spool's bytes every 10 s and prints a line a minute, to show
          whether the rate holds as the backlog grows.
CONTRACT  Run as root after `make` under the exclusive bench lock:
            flock -x /tmp/mtad-quiet.lock python3 bench/events_backlog.py
                [--minutes M] [-c SESSIONS] [-z SIZE] [--md FILE]
          (--minutes 0.5 for a smoke run).  The spool is on /dev/shm with
          events.max_backlog 16G (about 30 times what ten minutes make
          here), so nothing is dropped.  Exit 0 when every message was
          delivered, the target got every reception and delivery event
          (receptions = accepted, deliveries = delivered) and the backlog
          went back to 0; 1 otherwise.
FAILURE   mtad, the sink and the target are stopped by pid in finally
          blocks; the load is bounded by its time limit, the drain by
          max(600 s, 2 x the load's length).
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import events   # noqa: E402

SAMPLE_S = 10.0


def metrics(port):
    """mtad's events gauges and counters from /metrics (name -> float)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=5) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"^(mtad_events_\w+) ([\d.eE+-]+)$", text, re.M)}


def spool_events(spool):
    """(files, bytes, allocated bytes) of the events' segment files."""
    d = os.path.join(spool, "events")
    n = size = alloc = 0
    for name in os.listdir(d):
        if name.endswith(".ev"):
            st = os.stat(os.path.join(d, name))
            n += 1
            size += st.st_size
            alloc += st.st_blocks * 512
    return n, size, alloc


class Sampler(threading.Thread):
    """Every SAMPLE_S: time, sink count, the backlog metric, the spool."""

    def __init__(self, mta, sink, mport):
        super().__init__(daemon=True)
        self.mta, self.sink, self.mport = mta, sink, mport
        self.stop_ev = threading.Event()
        self.samples = []

    def run(self):
        t0 = time.time()
        while not self.stop_ev.wait(SAMPLE_S):
            try:
                m = metrics(self.mport)
            except OSError:
                m = {}
            files, size, _ = spool_events(self.mta.spool)
            self.samples.append(dict(t=time.time() - t0, sink=self.sink.count(),
                                     backlog=m.get("mtad_events_backlog_bytes"),
                                     age=m.get("mtad_events_oldest_unsent_age_seconds"),
                                     files=files, bytes=size,
                                     load=os.getloadavg()[0]))
            s = self.samples[-1]
            if len(self.samples) % 6 == 0:
                prev = self.samples[-7] if len(self.samples) > 6 else \
                    dict(t=0, sink=self.sink0)
                print("  %4.0f s: %6.0f msgs/s over the last minute, backlog "
                      "%s MB (metric) / %.1f MB in %d files, oldest unsent "
                      "%s s, load %.2f" % (
                          s["t"], (s["sink"] - prev["sink"]) /
                          (s["t"] - prev["t"]),
                          "%.1f" % (s["backlog"] / 1e6) if s["backlog"]
                          is not None else "?", s["bytes"] / 1e6, files,
                          "%.0f" % s["age"] if s["age"] is not None else "?",
                          s["load"]), flush=True)


def backlog_yaml(tport, mport):
    return events.events_yaml(tport, "  max_backlog: 16G\n") + \
        "metrics:\n  listen: \"127.0.0.1:%d\"\n" % mport


def run(a, work, sink, target):
    out = dict(load_before=events.loadavg())
    run_dir = tempfile.mkdtemp(prefix="backlog.", dir=work)
    os.chmod(run_dir, 0o755)
    mport = harness.free_port()
    mta = harness.Mtad(run_dir, os.path.join(run_dir, "queue"), False,
                       sink.port, extra=backlog_yaml(target.port, mport))
    secs = a.minutes * 60
    try:
        mta.start()
        rec0 = target.stats()
        sink0 = sink.count()
        cpu0 = harness.tree_cpu(mta.root())
        sampler = Sampler(mta, sink, mport)
        sampler.sink0 = sink0
        sampler.start()
        t0 = time.time()
        # one smtpblast for the whole time: a closed loop at full rate,
        # stopped by its -T limit (the messages in flight then are
        # answered or counted as errors, not lost track of)
        load = harness.run_load("ours", mta.port, a.c, 10 ** 9, 1, a.z,
                                secs)
        loaded = time.time() - t0
        deadline = time.time() + harness.E2E_TIMEOUT
        while sink.count() - sink0 < load["accepted"] and \
                time.time() < deadline:
            time.sleep(0.05)
        sampler.stop_ev.set()
        sampler.join(timeout=10)
        out["samples"] = sampler.samples
        out["sink0"] = sink0
        out["down_s"] = loaded
        out["accepted"] = load["accepted"]
        out["load_errors"] = load.get("errors", load.get("error"))
        out["delivered"] = sink.count() - sink0
        out["load_cpu"] = (harness.tree_cpu(mta.root()) - cpu0) / \
            max(1, out["delivered"]) * 1000
        # quiet: what the backlog is with the load over
        time.sleep(1.0)
        m = metrics(mport)
        out["files"], out["bytes"], out["alloc"] = spool_events(mta.spool)
        out["backlog_metric"] = m.get("mtad_events_backlog_bytes")
        out["oldest_age"] = m.get("mtad_events_oldest_unsent_age_seconds")
        out["dropped"] = m.get("mtad_events_dropped_total")
        # a reception and a delivery a message (a message smtpblast's time
        # limit cut after its DATA was accepted all the same: delivered)
        out["events"] = max(out["accepted"], out["delivered"]) + \
            out["delivered"]
        out["load_at_up"] = events.loadavg()
        # the target comes back
        cpu1 = harness.tree_cpu(mta.root())
        tcpu1 = target.cpu()
        target.up()
        t1 = time.time()
        limit = max(600.0, 2 * loaded)
        first = None
        want = rec0["records"] + out["events"]
        while time.time() - t1 < limit:
            n = target.stats()["records"]
            if first is None and n > rec0["records"]:
                first = time.time() - t1
            if n >= want:
                break
            time.sleep(0.01)
        out["drain_s"] = time.time() - t1
        out["first_s"] = first
        st = target.stats()
        out["received"] = st["records"] - rec0["records"]
        out["receptions"] = st["reception"] - rec0["reception"]
        out["deliveries"] = st["delivery"] - rec0["delivery"]
        out["posts"] = st["posts"] - rec0["posts"]
        out["bad"] = st["bad"] - rec0["bad"]
        out["drain_cpu_s"] = harness.tree_cpu(mta.root()) - cpu1
        out["target_cpu_s"] = target.cpu() - tcpu1
        # the backlog metric back to 0 and the segments gone (bounded)
        deadline = time.time() + 30
        while time.time() < deadline:
            bm = metrics(mport).get("mtad_events_backlog_bytes")
            if bm == 0:
                break
            time.sleep(0.2)
        out["backlog_after"] = bm
        out["files_after"], out["bytes_after"], _ = spool_events(mta.spool)
        return out
    finally:
        mta.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def report(a, o, t_start, t_end):
    ev = max(1, o["events"])
    drain_rate = o["received"] / max(1e-9, o["drain_s"] - (o["first_s"] or 0))
    lines = [
        "- %s–%s UTC, %s; load average (1/5/15) %s before, %s when the "
        "target came back" % (
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(t_start)),
            time.strftime("%H:%M", time.gmtime(t_end)), harness.machine(),
            o["load_before"], o["load_at_up"]),
        "- command: `flock -x /tmp/mtad-quiet.lock python3 "
        "bench/events_backlog.py --minutes %g -c %d -z %d` (one mtad, "
        "spool on /dev/shm, `events.max_backlog: 16G`, batch 500; "
        "`smtpblast -c %d -k 1 -z %d -T %d` to our smtpsink; the target, "
        "bench/evsink.py, down: connections refused)" % (
            a.minutes, a.c, a.z, a.c, a.z, a.minutes * 60),
        "",
        "| figure | value |",
        "|---|---:|",
        "| target down, load at full rate | %.0f s |" % o["down_s"],
        "| messages accepted / delivered | %d / %d (%.0f msgs/s; "
        "smtpblast errors: %s) |" % (
            o["accepted"], o["delivered"], o["delivered"] / o["down_s"],
            o["load_errors"]),
        "| events kept (a reception and a delivery a message) | %d |" %
        o["events"],
        "| events' bytes on the spool (segment files) | %.1f MB in %d "
        "files (%.1f MB allocated) |" % (o["bytes"] / 1e6, o["files"],
                                         o["alloc"] / 1e6),
        "| **bytes per event** | **%.0f** (%.0f allocated) |" % (
            o["bytes"] / ev, o["alloc"] / ev),
        "| mtad_events_backlog_bytes / oldest unsent age | %s / %s s |" % (
            "%.1f MB" % (o["backlog_metric"] / 1e6)
            if o["backlog_metric"] is not None else "?",
            "%.0f" % o["oldest_age"] if o["oldest_age"] is not None else "?"),
        "| mtad CPU per message while the target was down | %.3f ms |" %
        o["load_cpu"],
        "| target back: first record after | %s s (mtad's back-off) |" % (
            "%.1f" % o["first_s"] if o["first_s"] is not None else "never"),
        "| **drain: every event in after** | **%.1f s** (%.0f events/s "
        "once it started, %d POSTs) |" % (o["drain_s"], drain_rate,
                                          o["posts"]),
        "| mtad / target CPU during the drain | %.1f s / %.1f s |" % (
            o["drain_cpu_s"], o["target_cpu_s"]),
        "| received: receptions / deliveries / all | %d / %d / %d "
        "(duplicates %d, dropped %s) |" % (
            o["receptions"], o["deliveries"], o["received"],
            max(0, o["received"] - o["events"]),
            "%.0f" % o["dropped"] if o["dropped"] is not None else "?"),
        "| backlog after the drain | %s bytes (metric), %d files |" % (
            "%.0f" % o["backlog_after"] if o["backlog_after"] is not None
            else "?", o["files_after"]),
    ]
    if o["samples"]:
        lines += ["", "Rate while the backlog grew (per minute: msgs/s at "
                  "the sink, spool bytes of the events):", ""]
        prev = dict(t=0.0, sink=o["sink0"])
        row = []
        for i, s in enumerate(o["samples"]):
            if (i + 1) % 6 == 0 or i == len(o["samples"]) - 1:
                if s["t"] > prev["t"]:
                    row.append("%.0f s: %.0f/s, %.0f MB" % (
                        s["t"], (s["sink"] - prev["sink"]) /
                        (s["t"] - prev["t"]), s["bytes"] / 1e6))
                prev = s
        lines.append("; ".join(row) + ".")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0,
                    help="how long the target is down at full rate "
                    "(issue 37: 10)")
    ap.add_argument("-c", type=int, default=20, help="sessions")
    ap.add_argument("-z", type=int, default=1024, help="message size")
    ap.add_argument("--md", help="also write the Markdown summary here")
    ap.add_argument("--mtad", help="the mtad binary (default: the build's; "
                    "copied first, so a make meanwhile does not change it)")
    a = ap.parse_args()
    if a.minutes <= 0:
        ap.error("--minutes must be positive")
    work = tempfile.mkdtemp(prefix="mtad-evbacklog.", dir="/dev/shm")
    os.chmod(work, 0o755)
    harness.MTAD = shutil.copy2(a.mtad or harness.MTAD,
                                os.path.join(work, "mtad-bin"))
    sink = harness.Sink("ours", harness.free_port(), work)
    target = events.Target(work)
    t_start = time.time()
    try:
        sink.start()
        # the port is ours while the target is down (nothing else takes it
        # meanwhile: free_port() hands out the kernel's ephemeral ports)
        print("load before: %s" % events.loadavg(), flush=True)
        o = run(a, work, sink, target)
        t_end = time.time()
        md = report(a, o, t_start, t_end)
        print("\n" + md)
        if a.md:
            with open(a.md, "w") as f:
                f.write(md)
        ok = (o["delivered"] >= o["accepted"] > 0 and
              o["receptions"] >= max(o["accepted"], o["delivered"]) and
              o["deliveries"] >= o["delivered"] and
              o["received"] >= o["events"] and o["bad"] == 0 and
              o["backlog_after"] == 0)
        print("load after: %s" % events.loadavg())
        if not ok:
            print("FAILED: not every event arrived, or the backlog stayed")
    finally:
        target.down()
        sink.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
