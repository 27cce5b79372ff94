#!/usr/bin/python3
"""milter.py - throughput with rspamd as a milter: mtad against Postfix,
both asking the same rspamd (its proxy worker in milter mode,
self-scanning), on the same box.

Runs bench/harness.py's 1 KiB, 20-session scenario (smtpblast -> MTA ->
smtpsink, one message per connection, tmpfs spool/queue) for each MTA two
ways: no milter, and rspamd as its milter (mtad: the listener's
`milters:`; Postfix: smtpd_milters, milter_protocol = 6,
milter_default_action = tempfail, so a message rspamd did not see cannot
pass), REPS runs each (default 3), every (MTA, mode) pair once per run in
turn.  rspamd is started once for the whole bench with a configuration
of its own (Debian's rules, the modules that need the network or redis
off, as tests/integration/test_milter_real.py), its workers: one proxy
(self_scan) per CPU.  Every delivered message must have been scanned:
rspamd's log line per task is counted, and a run with fewer fails.

Per mode and run it prints the end-to-end rate and the CPU seconds per
1,000 messages of the MTA, and rspamd's own CPU per 1,000 apart; then the
medians and the ratio mtad / Postfix.

Usage (as root, on an otherwise idle machine, under the shared lock):
`make bench-milter` (bench/deps first: postfix, rspamd), or after
`make all`:  /usr/bin/python3 bench/milter.py
Environment: MILTER_BENCH_MSGS (default 2000 a run), BENCH_REPS (3),
MILTER_BENCH_MTAS (default "mtad,postfix").
"""
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

MSGS = int(os.environ.get("MILTER_BENCH_MSGS", "2000"))
MODES = ["off", "rspamd"]
MTAS = [m for m in os.environ.get("MILTER_BENCH_MTAS",
                                  "mtad,postfix").split(",")
        if m in ("mtad", "postfix")]
RSPAMD = "/usr/bin/rspamd"

RSPAMD_CONF = """
.include "$CONFDIR/common.conf"
options {
    pidfile = "$RUNDIR/rspamd.pid";
    .include "$CONFDIR/options.inc"
    .include(try=true; priority=1,duplicate=merge) "$LOCAL_CONFDIR/local.d/options.inc"
}
logging { type = "file"; filename = "$LOGDIR/rspamd.log"; level = "notice"; }
worker "rspamd_proxy" {
    bind_socket = "127.0.0.1:%(port)d";
    milter = yes;
    timeout = 60s;
    upstream "local" { default = yes; self_scan = yes; }
    count = %(count)d;
}
lua = "$RULESDIR/rspamd.lua"
.include "$CONFDIR/metrics.conf"
.include "$CONFDIR/actions.conf"
.include "$CONFDIR/groups.conf"
.include "$CONFDIR/composites.conf"
.include "$CONFDIR/modules.conf"
.include "$CONFDIR/settings.conf"
"""
RSPAMD_OFF = ("rbl surbl fuzzy_check asn emails phishing spf dmarc dkim arc "
              "mx_check neural ratelimit greylist reputation replies "
              "rspamd_update url_redirector dcc history_redis").split()


class Rspamd:
    def __init__(self, work):
        self.dir = os.path.join(work, "rspamd")
        self.port = harness.free_port()
        self.proc = None

    def start(self):
        d = self.dir
        for sub in ("local.d", "db", "run", "log"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        with open(os.path.join(d, "rspamd.conf"), "w") as f:
            f.write(RSPAMD_CONF % {"port": self.port, "count": harness.NCPU})
        with open(os.path.join(d, "local.d", "options.inc"), "w") as f:
            f.write('dns { nameserver = ["127.0.0.1:53"]; timeout = 0.2s; '
                    'retransmits = 1; }\n')
        with open(os.path.join(d, "local.d", "milter_headers.conf"),
                  "w") as f:
            f.write('use = ["x-spamd-result"];\nskip_local = false;\n')
        for mdl in RSPAMD_OFF:
            with open(os.path.join(d, "local.d", mdl + ".conf"), "w") as f:
                f.write("enabled = false;\n")
        # one line a task: the count of scanned messages
        with open(os.path.join(d, "local.d", "logging.inc"), "w") as f:
            f.write("level = notice;\n")
        harness.remember_config("rspamd.conf (milter bench)",
                                os.path.join(d, "rspamd.conf"), False)
        self.proc = harness.spawn(
            [RSPAMD, "-f", "-i", "-u", "root", "-g", "root", "-c",
             os.path.join(d, "rspamd.conf"), "--var=LOCAL_CONFDIR=" + d,
             "--var=DBDIR=%s/db" % d, "--var=RUNDIR=%s/run" % d,
             "--var=LOGDIR=%s/log" % d], os.path.join(d, "rspamd.out"))
        deadline = time.time() + 60
        import socket
        while time.time() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("rspamd did not listen on %d" % self.port)

    def scanned(self):
        try:
            with open(os.path.join(self.dir, "log", "rspamd.log")) as f:
                return sum(1 for l in f if "rspamd_task_write_log" in l)
        except OSError:
            return 0

    def cpu(self):
        return harness.tree_cpu(self.proc.pid) if self.proc else 0.0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            harness.kill_tree(self.proc.pid, 5)
            self.proc.wait(timeout=10)


class MilterMtad(harness.Mtad):
    """harness.Mtad whose listener asks rspamd (port) when set."""

    def __init__(self, workdir, spooldir, sinkport, rport):
        super().__init__(workdir, spooldir, False, sinkport)
        self.rport = rport

    def write_config(self):
        super().write_config()
        if not self.rport:
            return
        with open(self.cfg) as f:
            text = f.read()
        text = text.replace(
            '  listen: ["127.0.0.1:%d"]\n' % self.port,
            '  listen:\n    - address: "127.0.0.1:%d"\n      milters:\n'
            '        - name: rspamd\n          socket: "inet:127.0.0.1:%d"\n'
            '          default_action: tempfail\n' % (self.port, self.rport))
        with open(self.cfg, "w") as f:
            f.write(text)


def one_run(mname, mode, rep, work, sink, rsp):
    d = os.path.join(work, "%s-%s-%d" % (mname, mode, rep))
    os.makedirs(d)
    os.chmod(d, 0o755)
    rport = rsp.port if mode == "rspamd" else 0
    if mname == "mtad":
        mta = MilterMtad(d, os.path.join(d, "spool"), sink.port, rport)
    else:
        extra = ("smtpd_milters = inet:127.0.0.1:%d\nmilter_protocol = 6\n"
                 "milter_default_action = tempfail\n" % rport) if rport else ""
        mta = harness.Postfix(d, os.path.join(d, "queue"), sink.port,
                              main_extra=extra)
    mta.start()
    try:
        harness.measure(mta, sink, "ours", 20, 100, 1, 1024)
        s0, c0 = rsp.scanned(), rsp.cpu()
        r = harness.measure(mta, sink, "ours", 20, MSGS, 1, 1024)
        rcpu = rsp.cpu() - c0
        deadline = time.time() + 20
        while rport and rsp.scanned() - s0 < r["delivered"] and \
                time.time() < deadline:
            time.sleep(0.2)
        r["scanned"] = rsp.scanned() - s0
    finally:
        mta.stop()
    r["rspamd_cpu_per_1000"] = rcpu / r["delivered"] * 1000 \
        if r["delivered"] else None
    if not r["e2e_complete"]:
        raise RuntimeError("%s %s run %d incomplete: %r" % (mname, mode, rep,
                                                           r))
    if rport and r["scanned"] < r["delivered"]:
        raise RuntimeError("%s run %d: %d of %d delivered messages scanned"
                           % (mname, rep, r["scanned"], r["delivered"]))
    return r


def main():
    if not os.access(RSPAMD, os.X_OK) or ("postfix" in MTAS and
                                          not os.access(harness.POSTFIX,
                                                        os.X_OK)):
        print("milter bench: rspamd or postfix missing (packaging/deps.sh, "
              "bench/deps)", file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix="milter-bench-", dir="/dev/shm")
    os.chmod(work, 0o755)
    rsp = Rspamd(work)
    sink = harness.Sink("ours", harness.free_port(), work)
    results = {(m, mode): [] for m in MTAS for mode in MODES}
    load0, t0 = os.getloadavg(), time.time()
    try:
        rsp.start()
        sink.start()
        for rep in range(harness.REPS):
            for mname in MTAS:
                for mode in MODES:
                    r = one_run(mname, mode, rep, work, sink, rsp)
                    results[(mname, mode)].append(r)
                    print("%-7s %-6s run %d: %6d msgs  %7.0f msg/s e2e  "
                          "%.3f CPU s/1000 (MTA)  %.3f (rspamd)  load %.1f"
                          % (mname, mode, rep + 1, r["delivered"],
                             r["e2e_rate"], r["cpu_per_1000"],
                             r["rspamd_cpu_per_1000"] or 0,
                             os.getloadavg()[0]), flush=True)
    finally:
        sink.stop()
        rsp.stop()
        for p in harness.STARTED:
            if p.poll() is None:
                harness.kill_tree(p.pid, 2)
        shutil.rmtree(work, ignore_errors=True)
    load1 = os.getloadavg()
    print("\n%s UTC, %.0f s; load average before %.2f %.2f %.2f, after "
          "%.2f %.2f %.2f; medians of %d runs, 1 KiB, 20 sessions, %d "
          "messages a run:" % (time.strftime("%Y-%m-%d %H:%M",
                                             time.gmtime(t0)),
                               time.time() - t0, *load0, *load1,
                               harness.REPS, MSGS))
    print("| MTA | milter | msg/s e2e (runs) | CPU s/1000 MTA | CPU s/1000 "
          "rspamd |")
    print("|---|---|---|---|---|")
    med = {}
    for mname in MTAS:
        for mode in MODES:
            rs = results[(mname, mode)]
            med[(mname, mode)] = statistics.median(r["e2e_rate"] for r in rs)
            print("| %s | %s | %.0f (%s) | %.3f | %s |" % (
                mname, mode, med[(mname, mode)],
                ", ".join("%.0f" % r["e2e_rate"] for r in rs),
                statistics.median(r["cpu_per_1000"] for r in rs),
                "-" if mode == "off" else "%.3f" % statistics.median(
                    r["rspamd_cpu_per_1000"] for r in rs)))
    if len(MTAS) == 2:
        for mode in MODES:
            print("mtad / Postfix, %s: %.2fx" % (
                mode, med[("mtad", mode)] / med[("postfix", mode)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
