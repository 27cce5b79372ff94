#!/usr/bin/python3
"""bench/auth_stall.py - what a flood of wrong AUTHs costs the sessions
that relay mail on the same mtad.

PURPOSE   Starts bench/smtpsink and one mtad (loopback, a spool on
          /dev/shm, a password file with one yescrypt user at libxcrypt's
          default cost, AUTH in clear text on loopback) and runs, in one
          asyncio loop: SESSIONS sessions from 127.0.0.1 relaying 1 KiB
          messages back to back, and after a second CLIENTS clients, each
          from its own address (127.0.1.x, 127.0.2.x, ...), sending one
          AUTH PLAIN with a wrong password, all at once.  Reports the
          relaying sessions' reply latency (every reply: MAIL, RCPT, DATA,
          the dot) while the flood runs, p50 / p99 / p99.9 / max (a stalled
          session adds one long sample while the others add thousands of
          short ones, so also: the median over the sessions of each one's
          worst wait, and stalled_s, the summed time of waits over 100 ms),
          and how long the
          flood took, and how many AUTHs were answered 535 (checked) and
          454 (the worker's hashing queue was full).
DOVECOT   --dovecot: the same, with auth.backend: dovecot: a dovecot -F of
          its own (Debian's dovecot-core, only its auth service, its
          config and auth-client socket in the run's directory) checks
          the same yescrypt hash ({CRYPT} in a passwd-file), with
          auth_failure_delay = 0 (mtad holds failures back itself).  The
          hashes then run in Dovecot's auth process, not in mtad.
CONTRACT  bench/auth_stall.py [--mtad PATH] [--clients 400] [--sessions 20]
                              [--workers 2] [--limit 120] [--dovecot]
          Run as root (mtad drops to the "mtad" user) after `make`.  Prints
          one "key=value ..." line; exit 0 when every AUTH was answered
          535 or 454, 1
          otherwise.  Bounded: CLIENTS and SESSIONS, every socket wait (10
          s, 30 s for an AUTH reply), and LIMIT seconds for the whole run.
FAILURE   The processes it starts are stopped by pid in a finally block.
"""
import argparse
import asyncio
import base64
import ctypes
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("MTAD_BUILD", "build"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def yescrypt(password):
    lib = ctypes.CDLL("libcrypt.so.1")
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong,
                                  ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    return lib.crypt(password.encode(),
                     lib.crypt_gensalt(b"$y$", 0, None, 0)).decode()


DOVECOT_CONF = """base_dir = %(d)s/dc
state_dir = %(d)s/dc
log_path = %(d)s/dovecot.log
protocols =
listen = 127.0.0.1
ssl = no
auth_mechanisms = plain login
auth_failure_delay = 0
default_internal_user = root
default_internal_group = root
default_login_user = root
passdb {
  driver = passwd-file
  args = %(d)s/dc-passwd
}
userdb {
  driver = static
  args = uid=root gid=root home=%(d)s
}
service auth {
  unix_listener auth-client {
    path = %(d)s/auth-client
    mode = 0600
  }
}
"""


def start_dovecot(d):
    """dovecot -F with only its auth service; its own process group (its
    auth process outlives the master while clients are connected)."""
    os.makedirs(os.path.join(d, "dc"), exist_ok=True)
    with open(os.path.join(d, "dc-passwd"), "w") as f:
        f.write("alice:{CRYPT}%s\n" % yescrypt("s3cret pass"))
    conf = os.path.join(d, "dovecot.conf")
    with open(conf, "w") as f:
        f.write(DOVECOT_CONF % dict(d=d))
    p = subprocess.Popen(["dovecot", "-F", "-c", conf], stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(d, "dovecot.err"), "wb"),
                         start_new_session=True)
    deadline = time.time() + 15
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError("dovecot exited: %s" % open(
                os.path.join(d, "dovecot.err")).read()[-500:])
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(os.path.join(d, "auth-client"))
            return p
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("dovecot's auth-client socket did not appear")


def stop_group(p):
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(5)


def config(d, port, sink, workers, dovecot=False):
    pw = os.path.join(d, "passwd")
    with open(pw, "w") as f:
        f.write("alice:%s\n" % yescrypt("s3cret pass"))
    os.chmod(pw, 0o600)
    auth = "  password_file: %s\n" % pw
    if dovecot:
        auth = ("  backend: dovecot\n  dovecot_socket: %s/auth-client\n"
                "  dovecot_timeout: 30s\n" % d)
    text = """server:
  hostname: mx.bench.example
  listen: ["127.0.0.1:%d"]
  workers: %d
  pid_file: %s/mtad.pid
  control_socket: %s/control.sock
  shutdown_timeout: 5s
spool:
  dir: %s/spool
routes:
  db: %s/routes.mdb
  default: "smtp:[127.0.0.1]:%d"
relay:
  allow_networks: ["127.0.0.1/32"]
limits:
  max_connections_per_ip: 1000
auth:
%s  allow_plaintext_loopback: true
log:
  file: %s/mtad.log
  level: warn
""" % (port, workers, d, d, d, d, sink, auth, d)
    path = os.path.join(d, "relay.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def wait_banner(port, proc, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("exited with %s" % proc.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), 2) as s:
                s.settimeout(2)
                if s.recv(512).startswith(b"220"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("no banner on port %d" % port)


async def reply(r, timeout=10.0):
    while True:
        line = await asyncio.wait_for(r.readline(), timeout)
        if not line:
            raise EOFError("closed")
        if line[3:4] != b"-":
            return int(line[:3])


async def relayer(port, stop, lat, counts, me):
    r, w = await asyncio.open_connection("127.0.0.1", port,
                                         local_addr=("127.0.0.1", 0))
    await reply(r)
    w.write(b"EHLO relay.bench\r\n")
    await reply(r)
    body = b"Subject: bench\r\n\r\n" + b"x" * 1000 + b"\r\n.\r\n"
    while not stop.is_set():
        for cmd in (b"MAIL FROM:<a@bench.example>\r\n",
                    b"RCPT TO:<b@remote.example>\r\n", b"DATA\r\n", body):
            t = time.monotonic()
            w.write(cmd)
            await w.drain()
            await reply(r)
            lat.append((t, time.monotonic() - t, me))
        counts[0] += 1
    w.write(b"QUIT\r\n")
    w.close()


async def guesser(port, i, done):
    ip = "127.0.%d.%d" % (1 + i // 250, 1 + i % 250)
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port,
                                             local_addr=(ip, 0))
        await reply(r)
        w.write(b"EHLO guess.bench\r\n")
        await reply(r)
        w.write(b"AUTH PLAIN " + base64.b64encode(b"\0alice\0wrong %d" % i)
                + b"\r\n")
        code = await reply(r, 30.0)
        w.close()
        done.append(code)
    except (OSError, EOFError, asyncio.TimeoutError) as e:
        done.append(repr(e))


async def run(port, clients, sessions):
    stop = asyncio.Event()
    lat, counts, done = [], [0], []
    relay = [asyncio.ensure_future(relayer(port, stop, lat, counts, i))
             for i in range(sessions)]
    await asyncio.sleep(1.0)                # warm: sessions relaying
    t0 = time.monotonic()
    await asyncio.gather(*(guesser(port, i, done) for i in range(clients)))
    t1 = time.monotonic()
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*relay), 30)
    during = [(d, me) for t, d, me in lat if t0 <= t <= t1]
    return t1 - t0, during, counts[0], done


def pct(v, p):
    return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mtad", default=os.path.join(BUILD, "mtad"))
    ap.add_argument("--clients", type=int, default=400)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=float, default=120.0)
    ap.add_argument("--dovecot", action="store_true",
                    help="auth.backend: dovecot (a dovecot of its own)")
    a = ap.parse_args()
    a.clients = min(a.clients, 2000)
    a.sessions = min(a.sessions, 200)
    d = tempfile.mkdtemp(prefix="auth-stall-", dir="/dev/shm")
    os.chmod(d, 0o755)
    procs = []
    dc = None
    try:
        if a.dovecot:
            dc = start_dovecot(d)
        sink_port, port = free_port(), free_port()
        sink = subprocess.Popen(
            [os.path.join(BUILD, "bench", "smtpsink"), "-l",
             "127.0.0.1:%d" % sink_port], stdout=subprocess.DEVNULL)
        procs.append(sink)
        wait_banner(sink_port, sink)
        cfg = config(d, port, sink_port, a.workers, a.dovecot)
        errf = open(os.path.join(d, "stderr.log"), "wb")
        m = subprocess.Popen([a.mtad, "-f", "-c", cfg], stdout=errf,
                             stderr=errf, cwd=d)
        procs.append(m)
        try:
            wait_banner(port, m)
        except RuntimeError:
            errf.flush()
            sys.stderr.write(open(os.path.join(d, "stderr.log")).read())
            raise
        secs, samples, msgs, done = asyncio.run(asyncio.wait_for(
            run(port, a.clients, a.sessions), a.limit))
        during = sorted(d for d, _ in samples)
        worst = {}
        for d, me in samples:
            worst[me] = max(worst.get(me, 0.0), d)
        worst = sorted(worst.values())
        slow = sum(d for d in during if d > 0.1)
        answered = sum(1 for c in done if c == 535)
        busy = sum(1 for c in done if c == 454)
        print("backend=%s mtad=%s clients=%d sessions=%d workers=%d flood_s=%.2f "
              "auth_535=%d auth_454=%d replies_during=%d msgs=%d p50_ms=%.1f "
              "p99_ms=%.1f p999_ms=%.1f max_ms=%.1f mean_ms=%.1f "
              "session_worst_p50_ms=%.1f stalled_s=%.2f load=%s" % (
                  "dovecot" if a.dovecot else "file", a.mtad, a.clients,
                  a.sessions, a.workers, secs, answered, busy,
                  len(during), msgs, pct(during, 0.5) * 1e3,
                  pct(during, 0.99) * 1e3, pct(during, 0.999) * 1e3,
                  (during[-1] if during else float("nan")) * 1e3,
                  (statistics.mean(during) if during else float("nan"))
                  * 1e3, pct(worst, 0.5) * 1e3, slow,
                  open("/proc/loadavg").read().split()[0]))
        return 0 if answered + busy == a.clients else 1
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        if dc is not None:
            stop_group(dc)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
