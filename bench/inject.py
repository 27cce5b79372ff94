#!/usr/bin/python3
"""bench/inject.py - injection over the HTTP API against SMTP
(`make bench-inject`).

PURPOSE   Issue 37's second figure: one mtad with the API on
          (`api.listen` on loopback, a bearer token with the inject role)
          relaying 1 KiB messages to our smtpsink, offered by the same
          number of clients (20) three ways, in rotating order within each
          repetition: SMTP with a connection per message (smtpblast -k 1,
          the bench's usual row), SMTP keeping each connection for all its
          messages (smtpblast -k 0), and HTTP/1.1 keep-alive POST
          /v1/messages (bench/httpblast -k 0; a 201 only after the
          worker's 250).  Per run: the end-to-end rate (counted at the
          sink), the rate the load tool saw answered, p50/p99 of its
          request latency, mtad's CPU per message (master, workers, log
          and API processes).  The goal: HTTP keep-alive at least half the
          SMTP rate.
CONTRACT  Run as root after `make` under the exclusive bench lock:
            flock -x /tmp/mtad-quiet.lock python3 bench/inject.py [-n REPS]
                [-c CLIENTS] [-m MSGS] [-z SIZE] [--md FILE] [--mtad BIN]
          Before the timed runs one message goes in through http.client and
          must be answered 201 with a queue id and reach the sink.  Exit 0
          when every run delivered what it accepted and nothing was
          refused; 1 otherwise (2: the build has no API yet: no api
          section in its key table).
FAILURE   mtad and the sink are stopped by pid in finally blocks; every
          wait is bounded (the loads by their -T limit).
"""

import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HTTPBLAST = os.path.join(harness.BUILD, "bench", "httpblast")
TOKEN = "bench-inject-token-0123456789abcdef"
LIMIT = 120
KINDS = ("smtp-k1", "smtp-k0", "http-keepalive")
LABELS = {"smtp-k1": "SMTP, a connection per message (smtpblast -k 1)",
          "smtp-k0": "SMTP, one connection per client (smtpblast -k 0)",
          "http-keepalive": "HTTP keep-alive, POST /v1/messages "
                            "(httpblast -k 0)"}


class ApiMtad(harness.Mtad):
    """harness.Mtad with the API on: a tokens file (the hash of TOKEN,
    roles inject and read) and api.listen on a free loopback port."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.api_port = harness.free_port()
        self.tokens = os.path.join(self.dir, "api.tokens")
        self.extra += ("api:\n  listen: \"127.0.0.1:%d\"\n"
                       "  tokens_file: %s\n" % (self.api_port, self.tokens))

    def write_config(self):
        with open(self.tokens, "w") as f:
            f.write("# bench/inject.py\nbench inject,read %s\n" %
                    hashlib.sha256(TOKEN.encode()).hexdigest())
        os.chmod(self.tokens, 0o644)
        super().write_config()

    def request(self, method, path, body=None, timeout=10):
        c = http.client.HTTPConnection("127.0.0.1", self.api_port,
                                       timeout=timeout)
        try:
            hdr = {"Authorization": "Bearer " + TOKEN}
            if body is not None:
                hdr["Content-Type"] = "application/json"
            c.request(method, path, body=body, headers=hdr)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def wait_api(self, timeout=15.0):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                st, body = self.request("GET", "/v1/status", timeout=2)
                if st == 200:
                    return
                last = (st, body[:200])
            except OSError as e:
                last = e
            time.sleep(0.1)
        raise RuntimeError("the API did not answer on port %d: %r" %
                           (self.api_port, last))


def has_api():
    """True when this build's mtad knows the api section (its key table
    is in the binary: "tokens_file" is the api section's own key)."""
    with open(harness.MTAD, "rb") as f:
        return b"tokens_file" in f.read()


def run_http(port, clients, msgs, size, limit):
    """One httpblast run; the keys of harness.run_load()."""
    t0 = time.time()
    argv = [HTTPBLAST, "-s", "127.0.0.1:%d" % port, "-c", str(clients),
            "-m", str(msgs), "-k", "0", "-z", str(size), "-t", TOKEN,
            "-T", str(limit)]
    r = subprocess.run(argv, capture_output=True, text=True,
                       timeout=limit + 30)
    wall = time.time() - t0
    kv = dict(re.findall(r"(\w+)=([\d.]+)", r.stdout))
    if "accepted" not in kv:
        return dict(accepted=0, wall=wall,
                    error=(r.stdout + r.stderr).strip()[-300:])
    out = dict(accepted=int(kv["accepted"]), wall=wall, p50=int(kv["p50_us"]),
               p99=int(kv["p99_us"]), errors=int(kv["errors"]),
               failed=int(kv["tempfail"]) + int(kv["permfail"]),
               timed_out=kv.get("timed_out") == "1")
    if r.stderr.strip():
        out["said"] = r.stderr.strip()[-300:]
    return out


def measure(mta, sink, kind, clients, msgs, size):
    """One run of one kind: the load, then the sink's count of every
    accepted message (bounded); rates and CPU as harness.measure()."""
    before = sink.count()
    cpu0 = harness.tree_cpu(mta.root())
    tool0 = harness.children_cpu()
    load = os.getloadavg()
    t0 = time.time()
    if kind == "http-keepalive":
        res = run_http(mta.api_port, clients, msgs, size, LIMIT)
    else:
        res = harness.run_load("ours", mta.port, clients, msgs,
                               1 if kind == "smtp-k1" else 0, size, LIMIT)
    deadline = time.time() + harness.E2E_TIMEOUT
    got = sink.count() - before
    while got < res["accepted"] and time.time() < deadline:
        time.sleep(0.01)
        got = sink.count() - before
    t_e2e = time.time() - t0
    res["load"] = "%.2f %.2f %.2f" % load
    res["delivered"] = got
    res["acc_rate"] = res["accepted"] / res["wall"] if res["wall"] > 0 else 0
    res["e2e_rate"] = got / t_e2e if t_e2e > 0 else 0
    res["e2e_complete"] = (got >= res["accepted"] > 0 and
                           not res.get("failed") and not res.get("errors"))
    res["cpu"] = ((harness.tree_cpu(mta.root()) - cpu0) / got * 1000
                  if got else 0)
    res["tool_cpu"] = ((harness.children_cpu() - tool0) / got * 1000
                       if got else 0)
    return res


def check_one(mta, sink):
    """One message by http.client: 201 with a queue id, and at the sink."""
    before = sink.count()
    body = json.dumps({"from": "check@bench.example",
                       "to": ["rcpt0@sink.example"],
                       "message": "From: <check@bench.example>\r\n"
                                  "To: <rcpt0@sink.example>\r\n"
                                  "Subject: inject check\r\n\r\n"
                                  ".a line with a dot\r\nbody\r\n"})
    st, out = mta.request("POST", "/v1/messages", body)
    if st != 201 or "queue_id" not in json.loads(out or b"{}"):
        raise RuntimeError("POST /v1/messages: %d %r" % (st, out[:300]))
    deadline = time.time() + 20
    while sink.count() - before < 1 and time.time() < deadline:
        time.sleep(0.02)
    if sink.count() - before < 1:
        raise RuntimeError("the checked message never reached the sink")
    return json.loads(out)["queue_id"]


def spread(vals, fmt):
    return "%s [%s–%s]" % (fmt % statistics.median(vals), fmt % min(vals),
                           fmt % max(vals))


def summary(res, a, load0, load1, t0, t1):
    med = {k: statistics.median(r["e2e_rate"] for r in res[k]) for k in KINDS}
    lines = [
        "- %s–%s UTC, %s; load average (1/5/15) %s before, %s after" % (
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(t0)),
            time.strftime("%H:%M", time.gmtime(t1)), harness.machine(),
            load0, load1),
        "- command: `flock -x /tmp/mtad-quiet.lock python3 bench/inject.py "
        "-n %d -c %d -m %d -z %d` (one mtad with `api.listen` on 127.0.0.1 "
        "and a token with the inject role, spool on tmpfs, relaying to our "
        "smtpsink; %d repetitions, the three kinds in rotating order, %d "
        "messages a run after a warm-up of each; same %d-byte message "
        "text)" % (a.n, a.c, a.m, a.z, a.n, a.m, a.z),
        "",
        "| %d clients, %d-byte messages | e2e msgs/s, median [min–max] | "
        "answered msgs/s at the tool | p50 / p99 latency, ms | mtad CPU "
        "ms/msg | load tool CPU ms/msg |" % (a.c, a.z),
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k in KINDS:
        rs = res[k]
        lines.append("| %s | %s | %s | %.2f / %.2f | %s | %s |" % (
            LABELS[k], spread([r["e2e_rate"] for r in rs], "%.0f"),
            spread([r["acc_rate"] for r in rs], "%.0f"),
            statistics.median(r.get("p50", 0) for r in rs) / 1000,
            statistics.median(r.get("p99", 0) for r in rs) / 1000,
            spread([r["cpu"] for r in rs], "%.3f"),
            spread([r["tool_cpu"] for r in rs], "%.3f")))
    h = med["http-keepalive"]
    lines += [
        "",
        "HTTP keep-alive against SMTP: %.0f%% of the rate with a connection "
        "per message, %.0f%% of the rate with one connection per client. "
        "Goal (issue 37), at least half the SMTP rate: **%s** (against the "
        "connection-per-message row), **%s** (against one connection per "
        "client)." % (100 * h / med["smtp-k1"], 100 * h / med["smtp-k0"],
                      "met" if h >= med["smtp-k1"] / 2 else "missed",
                      "met" if h >= med["smtp-k0"] / 2 else "missed"),
    ]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3, help="repetitions")
    ap.add_argument("-c", type=int, default=20, help="clients")
    ap.add_argument("-m", type=int, default=20000, help="messages a run")
    ap.add_argument("-z", type=int, default=1024, help="message size")
    ap.add_argument("--md", help="also write the Markdown summary here")
    ap.add_argument("--mtad", help="the mtad binary (default: the build's; "
                    "copied first, so a make meanwhile does not change it)")
    a = ap.parse_args()
    if a.n < 1 or a.m < 1 or a.c < 1:
        ap.error("-n, -m and -c must be positive")
    if not os.access(HTTPBLAST, os.X_OK):
        print("inject: %s is not built (make)" % HTTPBLAST, file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix="mtad-inject.", dir="/dev/shm")
    os.chmod(work, 0o755)
    harness.MTAD = shutil.copy2(a.mtad or harness.MTAD,
                                os.path.join(work, "mtad-bin"))
    if not has_api():
        print("inject: this mtad has no HTTP API (no api section); "
              "nothing measured", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 2
    sink = harness.Sink("ours", harness.free_port(), work)
    run_dir = os.path.join(work, "mtad")
    mta = None
    res = {k: [] for k in KINDS}
    ok = True
    t0 = time.time()
    load0 = "%.2f %.2f %.2f" % os.getloadavg()
    try:
        os.makedirs(run_dir)
        mta = ApiMtad(run_dir, os.path.join(run_dir, "queue"), False,
                      sink.port)
        sink.start()
        mta.start()
        mta.wait_api()
        print("check: one message through POST /v1/messages: 201, queue id "
              "%s, at the sink" % check_one(mta, sink), flush=True)
        for k in KINDS:                                 # warm-up
            w = measure(mta, sink, k, a.c, max(500, a.m // 10), a.z)
            if not w["e2e_complete"]:
                raise RuntimeError("warm-up %s failed: %r" % (k, w))
        print("load before: %s" % load0, flush=True)
        for i in range(a.n):
            order = KINDS[i % 3:] + KINDS[:i % 3]
            for k in order:
                r = measure(mta, sink, k, a.c, a.m, a.z)
                ok = ok and r["e2e_complete"]
                res[k].append(r)
                print("rep %d %-15s (load %s): e2e %.0f msgs/s, answered "
                      "%.0f/s, p50 %.2f p99 %.2f ms, mtad cpu %.3f ms/msg, "
                      "delivered %d/%d, refused %d, errors %d%s%s" % (
                          i + 1, k, r["load"], r["e2e_rate"], r["acc_rate"],
                          r.get("p50", 0) / 1000, r.get("p99", 0) / 1000,
                          r["cpu"], r["delivered"], r["accepted"],
                          r.get("failed", 0), r.get("errors", 0),
                          "" if r["e2e_complete"] else "  FAILED",
                          ("  " + r.get("said", r.get("error", "")))
                          if not r["e2e_complete"] else ""), flush=True)
        t1 = time.time()
        load1 = "%.2f %.2f %.2f" % os.getloadavg()
        print("load after: %s" % load1)
        md = summary(res, a, load0, load1, t0, t1)
        print("\n" + md)
        if a.md:
            with open(a.md, "w") as f:
                f.write(md)
    except Exception:
        for name in ("mtad.out", "mtad.log"):       # what mtad said
            try:
                with open(os.path.join(run_dir, name), errors="replace") as f:
                    sys.stderr.write("--- %s (end)\n%s\n" % (name,
                                                            f.read()[-3000:]))
            except OSError:
                pass
        raise
    finally:
        if mta is not None:
            mta.stop()
        sink.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
