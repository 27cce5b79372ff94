#!/usr/bin/python3
"""dkim_bench.py - what DKIM signing costs mtad, end to end, and what it
costs Postfix signing through OpenDKIM (a milter), on the same box.

Runs bench/harness.py's 1 KiB, 20-session scenario (smtpblast -> MTA ->
smtpsink, one message per connection, tmpfs spool/queue) for each MTA
three ways: signing off, rsa-sha256 (one 2048-bit key) and ed25519-sha256
(one key), REPS runs each (default 3), every (MTA, mode) pair once per
run in turn so that drift in the machine's load hits all alike.
smtpblast's messages say From: <blast@bench.example>, so the keys are for
bench.example and every message is signed.  Each run starts its MTA
fresh, warms it up with 200 (mtad) / 100 (Postfix) messages, then
measures.

mtad signs itself (dkim.sign in relay.yaml).  Postfix signs through
OpenDKIM (Debian's opendkim, bench/deps installs it) over a loopback inet
milter socket (smtpd_milters, milter_default_action = tempfail, so an
unsigned message cannot pass as signed), relaxed/relaxed, with the same
key files; signing off means no milter at all.  OpenDKIM runs as user
opendkim from a private copy of the key (0600, as it demands), its
configuration in a directory under /run (it refuses one whose path has a
world-writable directory, like /dev/shm).

Per mode and run it prints the end-to-end rate (messages counted at the
sink / time) and the CPU seconds per 1,000 messages of the whole MTA
(mtad: master, workers, log process; Postfix: master and every child it
reaped or still has, plus the opendkim process), then the medians, the
ratio to "off" of the same MTA, and the load average of the machine
before and after.  Signed messages are counted in each MTA's own log:
mtad's "dkim=bench.example"; Postfix's milter_header_checks INFO line for
each DKIM-Signature the milter adds ("dkim-signed ALGORITHM"); a run with
signing on where not every delivered message was signed fails.

Usage (as root): `make bench-dkim` (runs bench/deps, which installs
postfix and opendkim with their services kept down, then this), or after
`make all` and bench/deps:  /usr/bin/python3 bench/dkim_bench.py
The results go into bench/RESULTS.md's "## DKIM signing" section by hand
(harness.py keeps that section when it rewrites the file).
Environment: DKIM_BENCH_MSGS (mtad, default 10000), DKIM_BENCH_PF_MSGS
(Postfix, default 2000: it is ten times slower, and one run should last
seconds, not minutes), BENCH_REPS (default 3), DKIM_BENCH_MTAS
(default "mtad,postfix").
"""
import os
import pwd
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MSGS = int(os.environ.get("DKIM_BENCH_MSGS", "10000"))
PF_MSGS = int(os.environ.get("DKIM_BENCH_PF_MSGS", "2000"))
MODES = ["off", "rsa-sha256", "ed25519-sha256"]
MTAS = [m for m in os.environ.get("DKIM_BENCH_MTAS", "mtad,postfix").split(",")
        if m in ("mtad", "postfix")]
OPENDKIM = "/usr/sbin/opendkim"


class SigningMtad(harness.Mtad):
    """harness.Mtad with a dkim: section appended to its relay.yaml."""

    def __init__(self, workdir, spooldir, sinkport, sign):
        super().__init__(workdir, spooldir, False, sinkport)
        self.sign = sign

    def write_config(self):
        super().write_config()
        if not self.sign:
            return
        with open(self.cfg, "a") as f:
            f.write("dkim:\n  sign:\n")
            for k in self.sign:
                f.write("    - {domain: %(domain)s, selector: %(selector)s, "
                        "key_file: %(key_file)s, algorithm: %(algorithm)s}\n"
                        % k)

    def signed(self):
        with open(self.logfile) as f:
            return f.read().count("dkim=bench.example")

    def extra_cpu(self):
        return 0.0


OPENDKIM_CONF = """# bench/dkim_bench.py: Postfix's signer
Mode                    s
Socket                  inet:%(port)d@127.0.0.1
Domain                  bench.example
Selector                %(selector)s
KeyFile                 %(key)s
SignatureAlgorithm      %(algorithm)s
Canonicalization        relaxed/relaxed
InternalHosts           127.0.0.1
UserID                  opendkim
Background              no
Syslog                  no
"""

# One INFO line in Postfix's log per DKIM-Signature the milter adds.
MILTER_HEADER_CHECKS = r"""/^DKIM-Signature:.*a=rsa-sha256/ INFO dkim-signed rsa-sha256
/^DKIM-Signature:.*a=ed25519-sha256/ INFO dkim-signed ed25519-sha256
"""


class OpenDkim:
    """opendkim -f on a loopback inet socket, signing with one key."""

    def __init__(self, workdir, key):
        self.out = os.path.join(workdir, "opendkim.out")
        self.dir = tempfile.mkdtemp(prefix="mtad-dkim-bench.", dir="/run")
        self.key = key
        self.port = harness.free_port()
        self.proc = None

    def start(self):
        pw = pwd.getpwnam("opendkim")
        os.chmod(self.dir, 0o755)
        keydir = os.path.join(self.dir, "keys")
        os.makedirs(keydir, mode=0o750)
        os.chown(keydir, pw.pw_uid, pw.pw_gid)
        key = os.path.join(keydir, os.path.basename(self.key["key_file"]))
        shutil.copyfile(self.key["key_file"], key)
        os.chmod(key, 0o600)
        os.chown(key, pw.pw_uid, pw.pw_gid)
        conf = os.path.join(self.dir, "opendkim.conf")
        with open(conf, "w") as f:
            f.write(OPENDKIM_CONF % dict(port=self.port, key=key,
                                         selector=self.key["selector"],
                                         algorithm=self.key["algorithm"]))
        harness.remember_config("OpenDKIM opendkim.conf (%s)" %
                                self.key["algorithm"], conf, False)
        self.proc = harness.spawn([OPENDKIM, "-f", "-x", conf], self.out)
        deadline = time.time() + 15
        while time.time() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                time.sleep(0.1)
        with open(self.out) as f:
            raise RuntimeError("opendkim did not listen on %d: %s" %
                               (self.port, f.read()[-1000:]))

    def cpu(self):
        return harness.tree_cpu(self.proc.pid) if self.proc else 0.0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            harness.kill_tree(self.proc.pid, 5)
            self.proc.wait(timeout=5)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class SigningPostfix(harness.Postfix):
    """harness.Postfix, with OpenDKIM as its smtpd milter when key is set;
    every DKIM-Signature the milter adds is logged (milter_header_checks)."""

    def __init__(self, workdir, queuedir, sinkport, key):
        self.milter = OpenDkim(workdir, key) if key else None
        extra = ""
        if key:
            checks = os.path.join(workdir, "milter_header_checks")
            with open(checks, "w") as f:
                f.write(MILTER_HEADER_CHECKS)
            extra = ("smtpd_milters = inet:127.0.0.1:%d\n"
                     "milter_default_action = tempfail\n"
                     "milter_protocol = 6\n"
                     "milter_header_checks = regexp:%s\n"
                     % (self.milter.port, checks))
        super().__init__(workdir, queuedir, sinkport, main_extra=extra)
        self.algorithm = key["algorithm"] if key else None

    def start(self):
        if self.milter:
            self.milter.start()
        super().start()

    def stop(self):
        super().stop()
        if self.milter:
            self.milter.stop()

    def signed(self):
        try:
            with open(os.path.join(self.dir, "maillog")) as f:
                return f.read().count("dkim-signed %s" % self.algorithm)
        except OSError:
            return 0

    def extra_cpu(self):
        return self.milter.cpu() if self.milter else 0.0


def keygen(d, alg):
    out = os.path.join(d, "bench.example.%s.pem" % alg.split("-")[0])
    subprocess.run([os.path.join(harness.BUILD, "mtactl"), "dkim", "keygen",
                    "bench.example", alg.split("-")[0], "--algorithm", alg,
                    "--out", out], check=True, capture_output=True, timeout=120)
    return {"domain": "bench.example", "selector": alg.split("-")[0],
            "key_file": out, "algorithm": alg}


def wait_signed(mta, want, timeout=20.0):
    """The log lines may trail the deliveries (Postfix's postlogd, mtad's
    log process): wait, bounded, until want are counted."""
    deadline = time.time() + timeout
    n = mta.signed()
    while n < want and time.time() < deadline:
        time.sleep(0.1)
        n = mta.signed()
    return n


def one_run(mname, mode, rep, work, sink, keys):
    d = os.path.join(work, "%s-%s-%d" % (mname, mode, rep))
    os.makedirs(d)
    os.chmod(d, 0o755)
    key = keys[mode] if mode != "off" else None
    if mname == "mtad":
        mta = SigningMtad(d, os.path.join(d, "spool"), sink.port,
                          [key] if key else [])
        msgs, warm = MSGS, 200
    else:
        mta = SigningPostfix(d, os.path.join(d, "queue"), sink.port, key)
        msgs, warm = PF_MSGS, 100
    mta.start()
    try:
        harness.measure(mta, sink, "ours", 20, warm, 1, 1024)
        signed0 = mta.signed()
        cpu0 = mta.extra_cpu()
        r = harness.measure(mta, sink, "ours", 20, msgs, 1, 1024)
        extra = mta.extra_cpu() - cpu0
        if r["delivered"]:
            r["cpu_per_1000"] += extra / r["delivered"] * 1000
        r["milter_cpu_per_1000"] = \
            extra / r["delivered"] * 1000 if r["delivered"] else None
        signed = wait_signed(mta, signed0 + r["delivered"]) - signed0 \
            if key else 0
    finally:
        mta.stop()
    if not r["e2e_complete"]:
        raise RuntimeError("%s %s run %d incomplete: %r" % (mname, mode, rep, r))
    if key and signed < r["delivered"]:
        raise RuntimeError("%s %s run %d: %d of %d delivered messages signed"
                           % (mname, mode, rep, signed, r["delivered"]))
    r["signed"] = signed
    return r


def main():
    if "postfix" in MTAS and not (os.access(OPENDKIM, os.X_OK) and
                                  os.access(harness.POSTFIX, os.X_OK)):
        print("dkim_bench: postfix or opendkim missing (sh bench/deps "
              "installs them)", file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix="dkim-bench-", dir="/dev/shm")
    os.chmod(work, 0o755)
    keys = {alg: keygen(work, alg) for alg in MODES[1:]}
    sink = harness.Sink("ours", harness.free_port(), work)
    sink.start()
    load0 = os.getloadavg()
    t0 = time.time()
    results = {(m, mode): [] for m in MTAS for mode in MODES}
    try:
        for rep in range(harness.REPS):
            for mname in MTAS:
                for mode in MODES:
                    r = one_run(mname, mode, rep, work, sink, keys)
                    results[(mname, mode)].append(r)
                    print("%-7s %-15s run %d: %6d msgs  %7.0f msg/s e2e  "
                          "%.3f CPU s/1000 msgs%s  (%d signed)  load %.1f"
                          % (mname, mode, rep + 1, r["delivered"],
                             r["e2e_rate"], r["cpu_per_1000"],
                             " (milter %.3f)" % r["milter_cpu_per_1000"]
                             if mname == "postfix" and mode != "off" else "",
                             r["signed"], os.getloadavg()[0]), flush=True)
    finally:
        sink.stop()
        for p in harness.STARTED:
            if p.poll() is None:
                harness.kill_tree(p.pid, 2)
        shutil.rmtree(work, ignore_errors=True)
    load1 = os.getloadavg()
    print("\n%s UTC, %.0f s; load average before %.2f %.2f %.2f, after "
          "%.2f %.2f %.2f; medians of %d runs, 1 KiB, 20 sessions, "
          "smtpblast -> MTA -> smtpsink, %d (mtad) / %d (Postfix) messages "
          "a run:" % (time.strftime("%Y-%m-%d %H:%M", time.gmtime(t0)),
                      time.time() - t0, *load0, *load1, harness.REPS, MSGS,
                      PF_MSGS))
    print("| MTA | signing | msg/s e2e (runs) | vs off | CPU s/1000 msgs "
          "(runs) | CPU added by signing, s/1000 |")
    print("|---|---|---|---|---|---|")
    for mname in MTAS:
        base = statistics.median(r["e2e_rate"]
                                 for r in results[(mname, "off")])
        bcpu = statistics.median(r["cpu_per_1000"]
                                 for r in results[(mname, "off")])
        for mode in MODES:
            rs = results[(mname, mode)]
            rate = statistics.median(r["e2e_rate"] for r in rs)
            cpu = statistics.median(r["cpu_per_1000"] for r in rs)
            print("| %s | %s | %.0f (%s) | %.2f× | %.3f (%s) | %s |"
                  % ("mtad" if mname == "mtad" else "Postfix + OpenDKIM"
                     if mode != "off" else "Postfix", mode, rate,
                     ", ".join("%.0f" % r["e2e_rate"] for r in rs),
                     rate / base, cpu,
                     ", ".join("%.3f" % r["cpu_per_1000"] for r in rs),
                     "-" if mode == "off" else "%+.3f%s" % (
                         cpu - bcpu, "" if mname == "mtad" else
                         " (of it opendkim: %s)" % ", ".join(
                             "%.2f" % r["milter_cpu_per_1000"] for r in rs))))
    if len(MTAS) == 2:
        print("\nmtad / Postfix, same mode, medians:")
        for mode in MODES:
            a = statistics.median(r["e2e_rate"] for r in results[("mtad", mode)])
            b = statistics.median(r["e2e_rate"] for r in results[("postfix", mode)])
            ca = statistics.median(r["cpu_per_1000"] for r in results[("mtad", mode)])
            cb = statistics.median(r["cpu_per_1000"] for r in results[("postfix", mode)])
            print("  %-15s msg/s %.1f×   CPU per message %.1f× less"
                  % (mode, a / b, cb / ca))
    return 0


if __name__ == "__main__":
    sys.exit(main())
