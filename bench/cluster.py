#!/usr/bin/python3
"""bench/cluster.py - three mtad nodes sharing limits through Redis
(issue 38): the cost of the shared counters and how close the fleet keeps
to a shared limit.

PURPOSE   Two measurements (--what, default both), on the fleet of
          tests/integration/cluster_fixture.py (HAProxy 127.0.0.100:25 ->
          n1-n3 on 127.0.0.101-103, redis-server, one egress source
          127.0.0.2, the provider simulator "gmail" on 127.0.1.1-2:25
          behind a local nsd):
            cost   --messages N (default 3,000) through HAProxy by 12
                   client threads, to a site whose rate
                   (deliveries_per_second 100000) and connections (1000)
                   are never reached, so every message goes through the
                   counters: with cluster: (Redis) and without (local-only
                   shaping), interleaved, --pairs times.  Measured: CPU
                   (user + system, /proc) of every mtad process of the
                   three nodes, and of redis-server, per message delivered;
                   Redis commands per message (INFO total_commands_processed)
                   and the nodes' own count of round trips
                   (mtad_cluster_round_trips_total) per message (goal: well
                   under one).
            rate   the site limited to --rate deliveries a minute (default
                   600) for the fleet, the simulator enforcing the same per
                   source; --rate * 2 messages through HAProxy; achieved
                   deliveries in the first --window seconds (default 60)
                   after the first one against the limit (goal: within 5%
                   below, never above), the most in any 60 s and any 10 s,
                   the simulator's violations.
          Prints a section "## Cluster: shared limits through Redis
          (`bench/cluster.py`)" and writes it (replacing its own earlier
          one) to bench/RESULTS.md or --results.  The load average before
          and after is recorded in it: numbers from a loaded box mean
          nothing.
CONTRACT  Run as root after `make`, in its own network namespace (it binds
          port 25 on 127.0.1.x and 127.0.0.100) and ONLY under the
          exclusive quiet lock:
            flock -x /tmp/mtad-quiet.lock unshare -n sh -c \\
              'ip link set lo up && python3 bench/cluster.py [--what cost,rate]
               [--messages N] [--pairs N] [--rate N] [--window S]
               [--results FILE]'
          Without a cluster-capable mtad (mtad -t refuses cluster:) the
          Redis halves are reported as not run; exit 1.
FAILURE   Every process it starts is stopped by pid in finally blocks
          (Cluster.stop, Sim.stop, Nsd.stop); every wait has a deadline.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from cluster_fixture import (GMAIL, GOOGLE, Cluster, google_site,  # noqa: E402
                             max_in_window)
from mtadtest import MTAD, Nsd, ensure_user, to_yaml  # noqa: E402
from shapesim import Provider, Sim  # noqa: E402

SECTION = "## Cluster: shared limits through Redis (`bench/cluster.py`)"


def log(msg):
    print("cluster-bench: %s" % msg, file=sys.stderr, flush=True)


def knows_cluster(base):
    """Does this mtad take a cluster: section?  (ok, why not)"""
    d = tempfile.mkdtemp(dir=base)
    pw = os.path.join(d, "pw")
    fd = os.open(pw, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"x\n")
    os.close(fd)
    cfg = os.path.join(d, "relay.yaml")
    with open(cfg, "w") as f:
        f.write(to_yaml({"spool": {"dir": os.path.join(d, "spool")},
                         "routes": {"default": "smtp:[127.0.0.1]:25"},
                         "cluster": {"redis": ["127.0.0.1:6379"],
                                     "password_file": pw}}))
    r = subprocess.run([MTAD, "-t", "-c", cfg], capture_output=True,
                       text=True, timeout=30)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


def submit_parallel(c, n, threads=12):
    """n messages through HAProxy by `threads` clients, 10 a session."""
    per = [n // threads + (1 if i < n % threads else 0)
           for i in range(threads)]
    errors = []

    def run(k, count, serial0):
        try:
            c.submit(count, lambda i: ["b%d@%s" % (serial0 + i,
                                                  GOOGLE[i % 2])],
                     per_session=10, serial0=serial0)
        except Exception as e:          # reported, the run fails
            errors.append(repr(e))

    ts, s0 = [], 0
    for k, count in enumerate(per):
        ts.append(threading.Thread(target=run, args=(k, count, s0)))
        s0 += count
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    if errors:
        raise RuntimeError("submission failed: %s" % errors[:3])


def round_trips(c):
    return sum(n.scrape().get("mtad_cluster_round_trips_total", 0)
               for n in c.nodes)


def cost_run(base, dns, shared, n):
    d = tempfile.mkdtemp(prefix="cost-", dir=base)
    os.chmod(d, 0o755)
    sim = Sim([Provider("gmail", GMAIL, port=25)]).start()
    c = Cluster(d, dns, google_site(deliveries_per_second=100000,
                                    connections=1000), shared=shared)
    try:
        c.start()
        time.sleep(1.0)                 # let start-up CPU settle (not a wait)
        cpu0, r0 = c.cpu_seconds(), c.redis.cpu_seconds()
        cmd0, rt0 = c.redis.commands_processed(), round_trips(c)
        t0 = time.time()
        submit_parallel(c, n)
        t_sub = time.time() - t0
        recs = sim.wait_for(n, timeout=300, provider="gmail")
        secs = max(r["time"] for r in recs) - t0
        cpu = c.cpu_seconds() - cpu0
        rcpu = c.redis.cpu_seconds() - r0
        cmds = c.redis.commands_processed() - cmd0
        rts = round_trips(c) - rt0
        return {"shared": shared, "n": n, "secs": secs, "submit_secs": t_sub,
                "delivered": len(recs),
                "cpu_us": cpu / n * 1e6, "redis_cpu_us": rcpu / n * 1e6,
                "cmds_per_msg": cmds / n, "rt_per_msg": rts / n,
                "violations": sim.violations("gmail")}
    finally:
        c.stop()
        sim.stop()


def rate_run(base, dns, rate, window):
    d = tempfile.mkdtemp(prefix="rate-", dir=base)
    os.chmod(d, 0o755)
    sim = Sim([Provider("gmail", GMAIL, port=25, per_minute=rate)]).start()
    c = Cluster(d, dns, google_site(deliveries_per_minute=rate))
    try:
        c.start()
        n = 2 * rate
        submit_parallel(c, n)
        first = sim.wait_for(1, timeout=30, provider="gmail")[0]["time"]
        deadline = first + window + 2
        while time.time() < deadline:   # a bounded wait for the window
            time.sleep(0.5)
        recs = sim.records("gmail")
        times = [r["time"] for r in recs]
        got = sum(1 for t in times if t < first + window)
        allowed = rate * window / 60.0
        return {"rate": rate, "window": window, "got": got,
                "allowed": allowed, "ratio": got / allowed,
                "max60": max_in_window(times, 60.0),
                "max10": max_in_window(times, 10.0),
                "violations": sim.violations("gmail"),
                "nodes": sorted({r["ehlo"].split(".")[0] for r in recs})}
    finally:
        c.stop()
        sim.stop()


def med(xs):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = len(xs) // 2
    return xs[k] if len(xs) % 2 else (xs[k - 1] + xs[k]) / 2.0


def cost_lines(runs, n, pairs):
    on = [r for r in runs if r["shared"]]
    off = [r for r in runs if not r["shared"]]
    out = ["### Cost of the shared counters (%d messages, %d pair(s), "
           "interleaved)" % (n, pairs), "",
           "| shaping | CPU per message, 3 nodes (µs) | redis-server CPU per "
           "message (µs) | Redis commands per message | round trips per "
           "message (nodes' count) | wall time (s) | messages/s | "
           "violations |",
           "|---|---|---|---|---|---|---|---|"]
    for name, rs in (("local only (no cluster:)", off),
                     ("shared through Redis", on)):
        if not rs:
            out.append("| %s | not run | | | | | | |" % name)
            continue
        out.append("| %s | %.0f | %.1f | %.3f | %.3f | %.1f | %.0f | %d |" % (
            name, med([r["cpu_us"] for r in rs]),
            med([r["redis_cpu_us"] for r in rs]),
            med([r["cmds_per_msg"] for r in rs]),
            med([r["rt_per_msg"] for r in rs]),
            med([r["secs"] for r in rs]),
            med([r["n"] / r["secs"] for r in rs]),
            sum(r["violations"] for r in rs)))
    if on and off:
        d = med([r["cpu_us"] for r in on]) - med([r["cpu_us"] for r in off])
        rt = med([r["rt_per_msg"] for r in on])
        out += ["", "Shared counters cost %+.0f µs of mtad CPU per message "
                "(medians), plus redis-server's. Round trips: %.3f per "
                "message: goal (well under one per message at full rate) %s."
                % (d, rt, "met" if rt < 0.2 else "NOT met"),
                "The site's limits here are never meant to be reached: a "
                "shared run much slower than the local one means the grants "
                "of the sync agent, not the site, set the pace."]
    out.append("")
    out.append("Each run's figures: " + "; ".join(
        "%s %.0f µs, %.3f cmds/msg" % ("redis" if r["shared"] else "local",
                                       r["cpu_us"], r["cmds_per_msg"])
        for r in runs) + ".")
    return out + [""]


def rate_lines(r):
    if r is None:
        return ["### Three nodes against one limited site", "", "not run", ""]
    verdict = ("within 5% below, never above: met" if
               0.95 <= r["ratio"] <= 1.0 and r["violations"] == 0 and
               r["max60"] <= r["rate"] else "goal (within 5% below, never "
               "above) NOT met")
    return ["### Three nodes against one limited site", "",
            "The site limited to %d deliveries a minute for the fleet (the "
            "simulator enforcing %d a minute on the one source), %d messages "
            "through HAProxy:" % (r["rate"], r["rate"], 2 * r["rate"]), "",
            "- delivered in the first %.0f s after the first delivery: **%d** "
            "of %.0f allowed (**%.1f%%** of the limit): %s" % (
                r["window"], r["got"], r["allowed"], 100 * r["ratio"],
                verdict),
            "- most in any 60 s: %d (limit %d); in any 10 s: %d (%.0f at the "
            "even rate)" % (r["max60"], r["rate"], r["max10"],
                            r["rate"] / 6.0),
            "- simulator violations: %d; nodes that delivered: %s" % (
                r["violations"], ", ".join(r["nodes"])), ""]


def write_section(lines, path):
    text = "\n".join([SECTION, ""] + lines).rstrip() + "\n"
    print(text)
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
    log("section written to %s" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--what", default="cost,rate")
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--rate", type=int, default=600)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--results", default=os.path.join(ROOT, "bench",
                                                      "RESULTS.md"))
    a = ap.parse_args()
    what = set(filter(None, a.what.split(",")))
    if os.geteuid() != 0:
        log("must run as root (port 25 on loopback)")
        return 1
    ensure_user()
    base = tempfile.mkdtemp(prefix="mtad-bench-cluster-", dir="/dev/shm")
    os.chmod(base, 0o755)
    load0 = os.getloadavg()
    t_all = time.time()
    lines = ["Measured %s UTC, %d CPUs; load average at start %.2f %.2f "
             "%.2f, at end {END} (numbers from a loaded box mean nothing; "
             "run under `flock -x /tmp/mtad-quiet.lock`). `bench/cluster.py "
             "--what %s --messages %d --pairs %d --rate %d --window %.0f`." % (
                 time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                 os.cpu_count(), load0[0], load0[1], load0[2],
                 ",".join(sorted(what)), a.messages, a.pairs, a.rate,
                 a.window), ""]
    ok = True
    ns = None
    try:
        shared_ok, why = knows_cluster(base)
        if not shared_ok:
            ok = False
            lines += ["- **this mtad has no cluster** (`mtad -t`: %s): the "
                      "Redis halves were not run." % why.replace("\n", " ")
                      [:200], ""]
        ns = Nsd(os.path.join(base, "nsd"))
        os.makedirs(ns.dir, exist_ok=True)
        ns.start()
        if "cost" in what:
            runs = []
            for k in range(a.pairs):
                for shared in ((False, True) if k % 2 == 0 else
                               (True, False)):
                    if shared and not shared_ok:
                        continue
                    log("cost run %d, %s" % (k, "redis" if shared else
                                             "local"))
                    r = cost_run(base, ns.addr, shared, a.messages)
                    log(repr(r))
                    runs.append(r)
            lines += cost_lines(runs, a.messages, a.pairs)
        if "rate" in what:
            r = None
            if shared_ok:
                log("rate run, %d a minute" % a.rate)
                r = rate_run(base, ns.addr, a.rate, a.window)
                log(repr(r))
            lines += rate_lines(r)
    except Exception as e:
        import traceback
        traceback.print_exc()
        lines.append("- aborted: %s" % str(e)[:300])
        ok = False
    finally:
        if ns is not None:
            ns.stop()
        shutil.rmtree(base, ignore_errors=True)
    load1 = os.getloadavg()
    lines[0] = lines[0].replace("{END}", "%.2f %.2f %.2f, %.0f s in all" % (
        load1[0], load1[1], load1[2], time.time() - t_all))
    write_section(lines, a.results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
