#!/usr/bin/python3
"""bench/events.py - what delivery events cost mtad (`make bench-events`).

PURPOSE   Issue 37's first figure: events off against events on (an HTTP
          target on loopback, bench/evsink.py), 1 KiB messages, 20
          sessions, one message per connection (smtpblast -> mtad ->
          smtpsink), mtad only.  Pairs of runs, the order alternating
          (off on, on off, ...) so that a drifting box hits both alike;
          each run a fresh mtad on a tmpfs spool, a warm-up, then the
          measured run.  Per run: the end-to-end rate (messages counted at
          the sink), mtad's CPU per message (master, workers, log
          process), and for "on" the same CPU once every event of the run
          reached the target (the events' own tail included) and the lag
          of the last event after the last message.  The goal (issue 37):
          throughput on within 10% of off, CPU per message within 15%.
CONTRACT  Run as root after `make` under the exclusive bench lock:
            flock -x /tmp/mtad-quiet.lock python3 bench/events.py [-n PAIRS]
                [-c SESSIONS] [-m MSGS] [-z SIZE] [--md FILE]
          Prints one line per run (with the load average before it) and a
          Markdown summary (medians, min-max, the per-pair ratios), also
          written to --md FILE.  Exit 0 when every run delivered what it
          accepted and every "on" run's target got each message's
          reception and delivery event; 1 otherwise.
FAILURE   mtad, the sink and the target are stopped by pid in finally
          blocks (harness.kill_tree); every wait is bounded.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EVENT_WAIT = 120.0          # bound on an event tail after the last message


class Target:
    """bench/evsink.py in its own process: up() starts it on a fixed port,
    down() stops it (connections are then refused)."""

    def __init__(self, work, port=None):
        self.port = port or harness.free_port()
        self.statsfile = os.path.join(work, "evsink-%d.stats" % self.port)
        self.outfile = os.path.join(work, "evsink-%d.out" % self.port)
        self.proc = None
        self.cpu_done = 0.0         # CPU of the instances already stopped
        self.base = dict(records=0, posts=0, bytes=0, bad=0, reception=0,
                         delivery=0)

    def up(self):
        # a new instance counts from zero: carry the old totals over
        self.base = self.stats()
        if os.path.exists(self.outfile):
            os.unlink(self.outfile)
        self.proc = harness.spawn(["/usr/bin/python3", "-B",
                                   os.path.join(HERE, "evsink.py"),
                                   str(self.port), self.statsfile],
                                  self.outfile)
        deadline = time.time() + 10
        while time.time() < deadline:
            with open(self.outfile) as f:
                if "ready" in f.read():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("evsink did not start on port %d" % self.port)

    def down(self):
        if self.proc is None:
            return
        self.cpu_done = self.cpu()
        self.base = self.stats()
        harness.kill_tree(self.proc.pid, 3)
        self.proc.wait(timeout=5)
        self.proc = None
        os.unlink(self.statsfile)

    def stats(self):
        out = dict(self.base)
        if self.proc is None:
            return out
        try:
            with open(self.statsfile) as f:
                for kv in f.read().split():
                    k, v = kv.split("=")
                    out[k] = self.base.get(k, 0) + int(v)
        except OSError:
            pass
        return out

    def cpu(self):
        if self.proc is None:
            return self.cpu_done
        return self.cpu_done + harness.tree_cpu(self.proc.pid)

    def wait_records(self, want, timeout):
        """Until `want` records arrived in all; returns the time it took
        (None: the deadline came first)."""
        t0 = time.time()
        deadline = t0 + timeout
        while time.time() < deadline:
            if self.stats()["records"] >= want:
                return time.time() - t0
            time.sleep(0.005)
        return None


def events_yaml(port, extra=""):
    return ("events:\n  http:\n    url: \"http://127.0.0.1:%d/ev\"\n"
            "    timeout: 5s\n%s" % (port, extra))


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def one_run(sink, work, target, sessions, msgs, size, on):
    """A fresh mtad, a warm-up (its events awaited), the measured run."""
    run_dir = tempfile.mkdtemp(prefix="run.", dir=work)
    os.chmod(run_dir, 0o755)
    mta = harness.Mtad(run_dir, os.path.join(run_dir, "queue"), False,
                       sink.port,
                       extra=events_yaml(target.port) if on else "")
    try:
        mta.start()
        rec_w = target.stats()["records"]
        w = harness.measure(mta, sink, "ours", sessions,
                            max(500, msgs // 10), 1, size)
        # the warm-up's events (a reception and a delivery a message) all
        # in before the measured run, so that none of its work is counted
        if on and target.wait_records(rec_w + 2 * w["delivered"],
                                      EVENT_WAIT) is None:
            raise RuntimeError("the warm-up's events never all arrived")
        r = dict(load=loadavg())
        rec0 = target.stats()["records"]
        cpu0 = harness.tree_cpu(mta.root())
        tcpu0 = target.cpu()
        t0 = time.time()
        r.update(harness.measure(mta, sink, "ours", sessions, msgs, 1, size))
        t_e2e = time.time() - t0
        r["events"] = 0
        if on:
            want = rec0 + 2 * r["delivered"]
            lag = target.wait_records(want, EVENT_WAIT)
            r["events"] = target.stats()["records"] - rec0
            r["events_ok"] = lag is not None
            r["event_lag"] = lag
            t_all = time.time() - t0
            r["cpu_all"] = ((harness.tree_cpu(mta.root()) - cpu0) /
                            max(1, r["delivered"]) * 1000)
            r["all_rate"] = r["delivered"] / t_all
            r["target_cpu"] = ((target.cpu() - tcpu0) /
                               max(1, r["delivered"]) * 1000)
        else:
            r["events_ok"] = True
            r["cpu_all"] = r["cpu_per_1000"] or 0
            r["all_rate"] = r["e2e_rate"]
            r["target_cpu"] = 0.0
        r["t_e2e"] = t_e2e
        return r
    finally:
        mta.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def spread(vals, fmt):
    """median [min-max] of vals, each formatted with fmt."""
    return (fmt % statistics.median(vals)) + " [" + (fmt % min(vals)) + \
        "–" + (fmt % max(vals)) + "]"


def summary(res, a, load0, load1, t_start, t_end):
    off, on = res[False], res[True]
    tp = [b["e2e_rate"] / x["e2e_rate"] for x, b in zip(off, on)]
    cpu = [b["cpu_all"] / x["cpu_all"] for x, b in zip(off, on)]
    cpu_e2e = [(b["cpu_per_1000"] or 0) / (x["cpu_per_1000"] or 1)
               for x, b in zip(off, on)]
    lines = [
        "- %s–%s UTC, %s; load average (1/5/15) %s before, %s after" % (
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(t_start)),
            time.strftime("%H:%M", time.gmtime(t_end)), harness.machine(),
            load0, load1),
        "- command: `flock -x /tmp/mtad-quiet.lock python3 bench/events.py "
        "-n %d -c %d -m %d -z %d` (%d pairs, order alternating; each run "
        "a fresh mtad on tmpfs, a warm-up of %d messages, then %d "
        "messages from `smtpblast -c %d -k 1 -z %d` to our smtpsink)" % (
            a.n, a.c, a.m, a.z, a.n, max(500, a.m // 10), a.m, a.c, a.z),
        "- events on: `events.http.url` to bench/evsink.py on 127.0.0.1 "
        "(its own process; counts records, checks each batch, answers "
        "200), other events keys at their defaults (batch 500)",
        "",
        "| events | e2e msgs/s, median [min–max] | mtad CPU ms/msg at the "
        "last message | mtad CPU ms/msg once every event is in | last "
        "event after the last message, s | target CPU ms/msg |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, rs in (("off", off), ("on (HTTP, loopback)", on)):
        lags = [r["event_lag"] for r in rs if r.get("event_lag") is not None]
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            label, spread([r["e2e_rate"] for r in rs], "%.0f"),
            spread([r["cpu_per_1000"] or 0 for r in rs], "%.3f"),
            spread([r["cpu_all"] for r in rs], "%.3f"),
            spread(lags, "%.2f") if lags else "–",
            spread([r["target_cpu"] for r in rs], "%.3f") if lags else "–"))
    ok_tp = statistics.median(tp) >= 0.90
    ok_cpu = statistics.median(cpu) <= 1.15
    lines += [
        "",
        "Per pair, on / off: throughput %s; CPU per message once every "
        "event is in %s (at the last message: %s)." % (
            ", ".join("%.1f%%" % (100 * x) for x in tp),
            ", ".join("%+.1f%%" % (100 * (x - 1)) for x in cpu),
            ", ".join("%+.1f%%" % (100 * (x - 1)) for x in cpu_e2e)),
        "Goal (issue 37): throughput within 10%%: median %.1f%% of off, "
        "**%s**; CPU per message within 15%%: median %+.1f%%, **%s**." % (
            100 * statistics.median(tp), "met" if ok_tp else "missed",
            100 * (statistics.median(cpu) - 1),
            "met" if ok_cpu else "missed"),
    ]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5, help="pairs of runs")
    ap.add_argument("-c", type=int, default=20, help="sessions")
    ap.add_argument("-m", type=int, default=30000, help="messages a run")
    ap.add_argument("-z", type=int, default=1024, help="message size")
    ap.add_argument("--md", help="also write the Markdown summary here")
    ap.add_argument("--mtad", help="the mtad binary (default: the build's; "
                    "copied first, so a make meanwhile does not change it)")
    a = ap.parse_args()
    if a.n < 1 or a.m < 1:
        ap.error("-n and -m must be positive")
    work = tempfile.mkdtemp(prefix="mtad-events.", dir="/dev/shm")
    os.chmod(work, 0o755)
    harness.MTAD = shutil.copy2(a.mtad or harness.MTAD,
                                os.path.join(work, "mtad-bin"))
    sink = harness.Sink("ours", harness.free_port(), work)
    target = Target(work)
    res = {False: [], True: []}
    ok = True
    t_start = time.time()
    load0 = loadavg()
    try:
        sink.start()
        target.up()
        print("load before: %s" % load0, flush=True)
        for i in range(a.n):
            for on in ((False, True) if i % 2 == 0 else (True, False)):
                r = one_run(sink, work, target, a.c, a.m, a.z, on)
                good = r["e2e_complete"] and r["events_ok"]
                ok = ok and good
                res[on].append(r)
                print("pair %d events %s (load %s): e2e %.0f msgs/s, cpu %.3f "
                      "ms/msg (%.3f with the events' tail), delivered %d/%d, "
                      "events %d%s%s" % (
                          i + 1, "on " if on else "off", r["load"],
                          r["e2e_rate"], r["cpu_per_1000"] or 0, r["cpu_all"],
                          r["delivered"], r["accepted"], r["events"],
                          ", last event %.2f s after" % r["event_lag"]
                          if r.get("event_lag") is not None else "",
                          "" if good else "  FAILED"), flush=True)
        t_end = time.time()
        load1 = loadavg()
        print("load after: %s" % load1)
        st = target.stats()
        if st["bad"]:
            print("target: %d bad batches" % st["bad"])
            ok = False
        md = summary(res, a, load0, load1, t_start, t_end)
        print("\n" + md)
        if a.md:
            with open(a.md, "w") as f:
                f.write(md)
    finally:
        target.down()
        sink.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
