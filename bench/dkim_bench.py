#!/usr/bin/python3
"""dkim_bench.py - what DKIM signing costs mtad, end to end.

Runs bench/harness.py's 1 KiB, 20-session scenario (smtpblast -> mtad ->
smtpsink, one message per connection, tmpfs spool) three ways: signing off,
rsa-sha256 (2048-bit key) and ed25519-sha256, REPS runs each (default 3),
the modes interleaved run by run so that drift in the machine's load hits
all three alike.  smtpblast's messages say From: <blast@bench.example>, so
the keys are for bench.example and every message is signed.  Prints, per
mode, each run's end-to-end rate (messages counted at the sink / time) and
the CPU seconds per 1,000 messages of the whole mtad process tree (master,
workers, log process: utime + stime from /proc), then the medians.

Usage (as root, after `make all`):  /usr/bin/python3 bench/dkim_bench.py
Environment: DKIM_BENCH_MSGS (default 10000), BENCH_REPS (default 3).
"""
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MSGS = int(os.environ.get("DKIM_BENCH_MSGS", "10000"))
MODES = ["off", "rsa-sha256", "ed25519-sha256"]


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


def keygen(d, alg):
    out = os.path.join(d, "bench.example.%s.pem" % alg.split("-")[0])
    subprocess.run([os.path.join(harness.BUILD, "mtactl"), "dkim", "keygen",
                    "bench.example", alg.split("-")[0], "--algorithm", alg,
                    "--out", out], check=True, capture_output=True, timeout=120)
    return {"domain": "bench.example", "selector": alg.split("-")[0],
            "key_file": out, "algorithm": alg}


def main():
    work = tempfile.mkdtemp(prefix="dkim-bench-", dir="/dev/shm")
    os.chmod(work, 0o755)
    keys = {alg: keygen(work, alg) for alg in MODES[1:]}
    sink = harness.Sink("ours", harness.free_port(), work)
    sink.start()
    results = {m: [] for m in MODES}
    try:
        for rep in range(harness.REPS):
            for mode in MODES:
                d = os.path.join(work, "%s-%d" % (mode, rep))
                os.makedirs(d)
                mta = SigningMtad(d, os.path.join(d, "spool"), sink.port,
                                  [keys[mode]] if mode != "off" else [])
                mta.start()
                try:
                    r = harness.measure(mta, sink, "ours", 20, MSGS, 1, 1024)
                finally:
                    mta.stop()
                if not r["e2e_complete"]:
                    raise RuntimeError("%s run %d incomplete: %r" % (mode, rep, r))
                with open(mta.logfile) as f:
                    signed = f.read().count("dkim=bench.example")
                if mode != "off" and signed == 0:
                    raise RuntimeError("%s: no message was signed" % mode)
                results[mode].append(r)
                print("%-15s run %d: %6d msgs  %7.0f msg/s e2e  %.3f CPU s/1000 "
                      "msgs  (log: %d signed)"
                      % (mode, rep + 1, r["delivered"], r["e2e_rate"],
                         r["cpu_per_1000"], signed), flush=True)
    finally:
        sink.stop()
    base = statistics.median(r["e2e_rate"] for r in results["off"])
    print("\nmedians (%d runs of %d messages, 1 KiB, 20 sessions, "
          "smtpblast -> mtad -> smtpsink):" % (harness.REPS, MSGS))
    for mode in MODES:
        rate = statistics.median(r["e2e_rate"] for r in results[mode])
        cpu = statistics.median(r["cpu_per_1000"] for r in results[mode])
        print("  %-15s %7.0f msg/s (%+.1f%% vs off)  %.3f CPU s/1000 msgs"
              % (mode, rate, (rate / base - 1) * 100, cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
