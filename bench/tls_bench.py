#!/usr/bin/python3
"""bench/tls_bench.py - mtad's inbound STARTTLS rows (`make bench-tls`).

PURPOSE   Opt-in, apart from `make bench` (whose time it does not grow):
          one mtad (2 workers by default, relaying to build/bench/smtpsink)
          driven by build/bench/tlsblast, a STARTTLS client that makes a
          new connection and a full handshake per message, or resumes, or
          sends many messages per connection.  For each certificate kind
          (RSA-2048, ECDSA P-256) and scenario it prints messages/s,
          handshakes resumed, mtad's CPU per message (all its processes,
          from /proc, including the relaying to the sink), the client's own
          CPU and how busy the box was.
USAGE     bench/tls_bench.py [--mtad PATH] [--label TEXT] [--msgs N]
                             [--kinds rsa,ec] [--scenarios a,b,...]
          Scenarios: hs (20 sessions, 1 msg/conn, full handshakes),
          resume (same, clients resume), one (1 session, 1 msg/conn),
          k100 (20 sessions, 100 msgs/conn).  --mtad lets the same run
          measure another build (e.g. the code before a change).
CONTRACT  Loopback only; every process it starts is stopped by PID at the
          end; every run is bounded by a message count and a time limit.
"""
import argparse
import os
import pwd
import grp
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("MTAD_BUILD", os.path.join(ROOT, "build"))
BLAST = os.path.join(BUILD, "bench", "tlsblast")
SINK = os.path.join(BUILD, "bench", "smtpsink")
CLK_TCK = os.sysconf("SC_CLK_TCK")
STARTED = []

SCENARIOS = {
    "hs": dict(c=20, k=1, resume=False, frac=1.0),
    "resume": dict(c=20, k=1, resume=True, frac=1.0),
    "one": dict(c=1, k=1, resume=False, frac=0.1),
    "k100": dict(c=20, k=100, resume=False, frac=4.0),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_banner(port, timeout, proc):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"220"):
                    return True
        except OSError:
            time.sleep(0.05)
    return False


def spawn(argv, out):
    f = open(out, "ab")
    p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    f.close()
    STARTED.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def tree_cpu(pid):
    """CPU seconds of pid and its descendants (reaped children included)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
            except OSError:
                continue
            kids.setdefault(int(st[st.rindex(")") + 2:].split()[1]),
                            []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(kids.get(p, []))
        try:
            with open("/proc/%d/stat" % p) as f:
                st = f.read()
        except OSError:
            continue
        x = st[st.rindex(")") + 2:].split()
        total += int(x[11]) + int(x[12]) + int(x[13]) + int(x[14])
    return total / CLK_TCK


def box_cpu():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]), idle


def sink_msgs(countfile):
    try:
        with open(countfile) as f:
            kv = dict(x.split("=", 1) for x in f.read().split())
        return int(kv.get("msgs", 0))
    except (OSError, ValueError):
        return 0


def make_cert(d, kind):
    cert, key = os.path.join(d, kind + ".crt"), os.path.join(d, kind + ".key")
    newkey = (["-newkey", "rsa:2048"] if kind == "rsa" else
              ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
    subprocess.run(["openssl", "req", "-x509", *newkey, "-nodes", "-keyout",
                    key, "-out", cert, "-days", "30", "-subj",
                    "/CN=bench.mtad.test"], check=True, capture_output=True,
                   timeout=120)
    os.chmod(key, 0o644)            # the bench's own throw-away key
    return cert, key


def run_user():
    for user, group in (("mtad", "mtad"), ("nobody", "nogroup")):
        try:
            pw = pwd.getpwnam(user)
            grp.getgrnam(group)
            return user, group, pw.pw_uid, pw.pw_gid
        except KeyError:
            continue
    raise RuntimeError("no unprivileged user for mtad's workers")


def start_mtad(mtad, wd, cert, key, sinkport, workers):
    user, group, _, _ = run_user()
    # mtad makes its spool itself (0700, the workers' user's); wd stays
    # root's: mtad refuses a control socket where the workers could write.
    spool = os.path.join(wd, "spool")
    port = free_port()
    cfg = os.path.join(wd, "relay.yaml")
    with open(cfg, "w") as f:
        f.write("""server:
  hostname: bench.mtad.test
  listen: ["127.0.0.1:%(port)d"]
  workers: %(workers)d
  user: %(user)s
  group: %(group)s
  pid_file: %(wd)s/mtad.pid
  control_socket: %(wd)s/control.sock
  shutdown_timeout: 2s
limits:
  max_connections: 10000
  max_connections_per_ip: 10000
relay:
  allow_networks: [127.0.0.1/32]
spool:
  dir: %(spool)s
routes:
  db: %(wd)s/routes.mdb
  default: "smtp:[127.0.0.1]:%(sinkport)d"
delivery:
  retry: [1s, 2s, 4s]
  connections_per_destination: 20
log:
  file: %(wd)s/mtad.log
  level: info
tls:
  cert_file: %(cert)s
  key_file: %(key)s
""" % dict(port=port, workers=workers, user=user, group=group, wd=wd,
           spool=spool, sinkport=sinkport, cert=cert, key=key))
    p = spawn([mtad, "-f", "-c", cfg], os.path.join(wd, "mtad.out"))
    if not wait_banner(port, 15, p):
        raise RuntimeError("mtad did not start (see %s)" % wd)
    return p, port


def blast(port, sc, msgs, timeout):
    argv = [BLAST, "-s", "127.0.0.1:%d" % port, "-c", str(sc["c"]), "-m",
            str(msgs), "-k", str(sc["k"]), "-z", "1024", "-T", str(timeout)]
    if sc["resume"]:
        argv.append("-R")
    r = subprocess.run(argv, capture_output=True, text=True,
                       timeout=timeout + 30)
    if r.returncode not in (0, 2) or not r.stdout.strip():
        raise RuntimeError("tlsblast failed: %s %s" % (r.stdout, r.stderr))
    return dict(x.split("=", 1) for x in r.stdout.split())


def one_run(mtad, workdir, kind, cert, key, sc, msgs, sink_port, countfile,
            workers):
    wd = tempfile.mkdtemp(prefix="tls-%s-" % kind, dir=workdir)
    p, port = start_mtad(mtad, wd, cert, key, sink_port, workers)
    try:
        blast(port, dict(sc), max(20, msgs // 10), 60)       # warm-up
        base = sink_msgs(countfile)
        c0, (t0, i0) = tree_cpu(p.pid), box_cpu()
        r = blast(port, sc, msgs, 120)
        acc = int(r["accepted"])
        deadline = time.time() + 60             # relayed to the sink too
        while sink_msgs(countfile) - base < acc and time.time() < deadline:
            time.sleep(0.05)
        delivered = sink_msgs(countfile) - base
        c1, (t1, i1) = tree_cpu(p.pid), box_cpu()
    finally:
        stop(p)
    busy = 100.0 * (1 - (i1 - i0) / max(1, t1 - t0))
    return dict(rate=float(r["msgs_per_s"]), conns=float(r["conns_per_s"]),
                acc=acc, delivered=delivered, errors=int(r["errors"]),
                resumed=int(r["resumed"]), nconns=int(r["conns"]),
                cpu_ms=1000.0 * (c1 - c0) / max(1, acc),
                client_cpu_ms=1000.0 * float(r["cpu_s"]) / max(1, acc),
                busy=busy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mtad", default=os.path.join(BUILD, "mtad"))
    ap.add_argument("--label", default="mtad")
    ap.add_argument("--msgs", type=int, default=4000)
    ap.add_argument("--kinds", default="rsa,ec")
    ap.add_argument("--scenarios", default="hs,resume,one,k100")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="mtad-tlsbench.", dir="/dev/shm")
    os.chmod(workdir, 0o755)
    sink_port = free_port()
    countfile = os.path.join(workdir, "sink.count")
    sink = spawn([SINK, "-l", "127.0.0.1:%d" % sink_port, "-c", countfile,
                  "-i", "20"], os.path.join(workdir, "sink.out"))
    try:
        if not wait_banner(sink_port, 10, sink):
            raise RuntimeError("smtpsink did not start")
        print("| build | cert | scenario | msgs/s | conns/s | resumed | "
              "mtad CPU ms/msg | client CPU ms/msg | box busy | "
              "accepted/delivered/errors |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for kind in a.kinds.split(","):
            cert, key = make_cert(workdir, kind)
            for name in a.scenarios.split(","):
                sc = SCENARIOS[name]
                for _ in range(a.reps):
                    r = one_run(a.mtad, workdir, kind, cert, key, sc,
                                int(a.msgs * sc["frac"]), sink_port,
                                countfile, a.workers)
                    print("| %s | %s | %s | %.0f | %.0f | %d/%d | %.2f | "
                          "%.2f | %.0f%% | %d/%d/%d |" % (
                              a.label, "RSA-2048" if kind == "rsa" else
                              "ECDSA P-256", name, r["rate"], r["conns"],
                              r["resumed"], r["nconns"], r["cpu_ms"],
                              r["client_cpu_ms"], r["busy"], r["acc"],
                              r["delivered"], r["errors"]), flush=True)
    finally:
        for p in STARTED:
            stop(p)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
