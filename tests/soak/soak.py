#!/usr/bin/python3
"""soak.py - a chaos soak of mtad (issue 19): clients send mail while a
seeded fault injector kills, stops, reloads and starves mtad and its next
hop; at the end every accepted message is accounted for.

    make soak DURATION=120            (or: python3 tests/soak/soak.py -d 120)

What runs (all on loopback; every process is started here and stopped by
its pid):
  * mtad (build/mtad), 2 workers, its spool on a small tmpfs when run as
    root (ENOSPC faults need it; without root they are left out);
  * soaksink.py: the next hop, two ports (the route lists both: fail-over),
    recording every recipient it accepts with the message's X-Soak-Id and
    the sha256 of what it got;
  * SESSIONS client threads at RATE messages/s in total: unique X-Soak-Id,
    1-3 recipients, 30% with one recipient the sink rejects (550: a DSN is
    due), bodies up to 400 KiB (a few lines start with a dot);
  * the injector, every 3-7 s (seeded): kill -9 of a worker, of the log
    process, of the master (then started again), SIGHUP, a broken reload,
    the sink answering 4xx / stalling / dropping / down, the spool full
    (under spool.reserve, or to the last byte), SIGSTOP of a worker.
    Before a kill -9 it notes the client ports of the victim's connections
    to the sink: a duplicate is explained only by a kill of the process
    that delivered the first copy, within a second after it (the window
    between the next hop's 250 and the state write).
Then the faults stop, the queue drains, and the report counts: accepted,
delivered once, duplicates (with their explaining kill), bounced, lost,
phantoms, corrupted, and workers the master killed.  Exit status 1 on any
lost, phantom or corrupted message, unexplained duplicate, duplicate DSN
without a kill, or worker killed by a reload.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("MTAD_BUILD", "build"))
MTAD = os.path.join(BUILD, "mtad")
MTACTL = os.path.join(BUILD, "mtactl")
IS_ROOT = os.geteuid() == 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(*a):
    print("soak: %s" % " ".join(str(x) for x in a), flush=True)


# ---- /proc ----------------------------------------------------------------

def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def sink_client_ports(pids, sink_ports):
    """Local ports of the TCP connections from pids to the sink."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if t.startswith("socket:["):
                    inodes.add(t[8:-1])
        except OSError:
            continue
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    p = line.split()
                    if p[9] in inodes and \
                            int(p[2].rsplit(":", 1)[1], 16) in sink_ports:
                        out.append(int(p[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return out


# ---- messages -------------------------------------------------------------

def body_size(rng):
    r = rng.random()
    if r < 0.80:
        return rng.randint(300, 8 * 1024)
    if r < 0.95:
        return rng.randint(8 * 1024, 64 * 1024)
    return rng.randint(64 * 1024, 400 * 1024)


def make_message(rng, sid, rcpts):
    head = ("From: <sender@soak.test>\r\nTo: %s\r\nSubject: soak %s\r\n"
            "Message-ID: <%s@soak.test>\r\nX-Soak-Id: %s\r\n\r\n" % (
                ", ".join("<%s>" % r for r in rcpts), sid, sid, sid))
    want = body_size(rng)
    lines, n = [], 0
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 .,-"
    while n < want:
        ln = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 76)))
        if rng.random() < 0.05:
            ln = "." + ln               # dot-stuffing on the way
        lines.append(ln)
        n += len(ln) + 2
    return (head + "\r\n".join(lines) + "\r\n").encode()


class Ledger:
    """What the clients sent and how it ended."""

    def __init__(self):
        self.lock = threading.Lock()
        self.accepted = {}              # sid -> (ok rcpts, rej rcpts, sha)
        self.uncertain = {}             # same, for a reply never seen
        self.refused = 0                # 4xx/5xx or no connection
        self.counter = 0

    def next_sid(self, seed):
        with self.lock:
            self.counter += 1
            return "s%d-%d" % (seed, self.counter)


def client(stop, ledger, port, seed, idx, rate_gate):
    rng = random.Random(seed * 1000 + idx)
    while not stop.is_set():
        try:
            s = smtplib.SMTP("127.0.0.1", port, timeout=60)
            s.ehlo("client%d.soak" % idx)
        except (OSError, smtplib.SMTPException):
            with ledger.lock:
                ledger.refused += 1
            time.sleep(0.2)
            continue
        try:
            for _ in range(rng.randint(1, 10)):
                if stop.is_set() or not rate_gate():
                    break
                sid = ledger.next_sid(seed)
                ok = ["u%s-%d@ok.soak" % (sid, k)
                      for k in range(rng.randint(1, 3))]
                rej = ["rej%s@ok.soak" % sid] if rng.random() < 0.3 else []
                rcpts = ok + rej
                rng.shuffle(rcpts)
                msg = make_message(rng, sid, rcpts)
                rec = (ok, rej, hashlib.sha256(msg).hexdigest())
                code, _ = s.mail("sender@soak.test")
                if code != 250:
                    with ledger.lock:
                        ledger.refused += 1
                    break
                good = all(s.rcpt(r)[0] == 250 for r in rcpts)
                if not good:
                    s.rset()
                    with ledger.lock:
                        ledger.refused += 1
                    continue
                try:
                    code, _ = s.data(msg)
                except smtplib.SMTPDataError:
                    code = 0            # DATA itself refused (452)
                except (OSError, smtplib.SMTPException):
                    with ledger.lock:
                        ledger.uncertain[sid] = rec
                    raise
                with ledger.lock:
                    if code == 250:
                        ledger.accepted[sid] = rec
                    else:
                        ledger.refused += 1
                if code != 250:
                    break
            try:
                s.quit()
            except (OSError, smtplib.SMTPException):
                pass
        except (OSError, smtplib.SMTPException):
            try:
                s.close()
            except OSError:
                pass
            time.sleep(0.1)


class RateGate:
    """At most rate calls per second over the run; False once stopped."""

    def __init__(self, rate, stop):
        self.rate, self.stop = rate, stop
        self.lock = threading.Lock()
        self.start = time.time()
        self.n = 0

    def __call__(self):
        with self.lock:
            due = self.start + self.n / self.rate
            self.n += 1
        wait = due - time.time()
        if wait > 0:
            return not self.stop.wait(min(wait, 5.0))
        return True


# ---- mtad and the sink ----------------------------------------------------

class Rig:
    def __init__(self, work, seed, old=False):
        self.old = old                  # config without this branch's keys
        self.work = work
        self.seed = seed
        self.spool = os.path.join(work, "spool")
        self.mounted = False
        self.port = free_port()
        self.sink_ports = [free_port(), free_port()]
        self.cfg_path = os.path.join(work, "relay.yaml")
        self.logfile = os.path.join(work, "mtad.log")
        self.record = os.path.join(work, "sink.jsonl")
        self.master = None
        self.sink = None

    def config(self):
        route = ",".join("smtp:[127.0.0.1]:%d" % p for p in self.sink_ports)
        return "\n".join([
            "server:",
            "  hostname: mx.soak.test",
            "  listen: [\"127.0.0.1:%d\"]" % self.port,
            "  workers: 2",
            "  pid_file: %s/mtad.pid" % self.work,
            "  control_socket: %s/control.sock" % self.work,
            "  shutdown_timeout: 5s",
            "spool:",
            "  dir: %s" % self.spool,
            "  reserve: 4M" if not self.old else "",
            "routes:",
            "  db: %s/routes.mdb" % self.work,
            "  default: \"%s\"" % route,
            "delivery:",
            "  retry: [1s, 2s, 4s]",
            "  connect_timeout: 2s",
            "" if self.old else "\n".join([
                "  host_down_for: 2s",   # the sink comes back at once
                "  timeouts:",
                "    greeting: 5s",
                "    helo: 5s",
                "    mail: 5s",
                "    rcpt: 5s",
                "    data: 5s",
                "    data_xfer: 10s",
                "    data_done: 10s",
                "    quit: 2s"]),
            "limits:",
            "  max_connections_per_ip: 1000",
            "log:",
            "  file: %s" % self.logfile,
            "  level: info",
            "  flush_interval: 50ms",
            ""])

    def write_config(self, text=None):
        tmp = self.cfg_path + ".new"
        with open(tmp, "w") as f:
            f.write(text if text is not None else self.config())
        os.rename(tmp, self.cfg_path)

    def setup(self, spool_mb):
        os.makedirs(self.spool)
        if IS_ROOT:
            subprocess.run(["mount", "-t", "tmpfs", "-o",
                            "size=%dm,mode=0700" % spool_mb, "tmpfs",
                            self.spool], check=True)
            self.mounted = True
            try:
                import pwd
                pwd.getpwnam("mtad")
            except KeyError:
                subprocess.run(["useradd", "--system", "--no-create-home",
                                "--shell", "/usr/sbin/nologin", "mtad"],
                               check=True)
        self.write_config()
        self.sink = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__),
                                          "soaksink.py"),
             *map(str, self.sink_ports), "--record", self.record],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.sink.stdout.readline().strip() != "ready":
            raise SystemExit("soak: the sink did not start")
        self.start_mtad()

    def sink_mode(self, port, mode):
        self.sink.stdin.write("mode %d %s\n" % (port, mode))
        self.sink.stdin.flush()
        if self.sink.stdout.readline().strip() != "ok":
            raise SystemExit("soak: the sink did not answer")

    def start_mtad(self):
        errf = open(os.path.join(self.work, "stderr.log"), "ab")
        self.master = subprocess.Popen([MTAD, "-f", "-c", self.cfg_path],
                                       stdout=errf, stderr=errf)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.master.poll() is not None:
                raise SystemExit("soak: mtad exited with %s" %
                                 self.master.returncode)
            try:
                with socket.create_connection(("127.0.0.1", self.port),
                                              timeout=2) as s:
                    s.settimeout(2)
                    if s.recv(512).startswith(b"220"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit("soak: mtad did not become ready")

    def workers(self):
        return [c for c in children(self.master.pid)
                if comm(c) == "mtad: worker" and alive(c)]

    def logd(self):
        return [c for c in children(self.master.pid)
                if comm(c) == "mtad: logd" and alive(c)]

    def queue(self):
        try:
            return os.listdir(os.path.join(self.spool, "queue"))
        except OSError:
            return []

    def fill(self, leave):
        st = os.statvfs(self.spool)
        want = st.f_bavail * st.f_frsize - leave
        if want <= 0:
            return
        fd = os.open(os.path.join(self.spool, "filler"),
                     os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, os.fstat(fd).st_size,
                               want - want % st.f_frsize)
        except OSError:
            pass                        # the spool filled meanwhile: full
        finally:
            os.close(fd)

    def unfill(self):
        try:
            os.unlink(os.path.join(self.spool, "filler"))
        except FileNotFoundError:
            pass

    def teardown(self):
        if self.master is not None and self.master.poll() is None:
            self.master.send_signal(signal.SIGTERM)
            try:
                self.master.wait(30)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait(10)
        if self.sink is not None and self.sink.poll() is None:
            self.sink.stdin.close()
            try:
                self.sink.wait(10)
            except subprocess.TimeoutExpired:
                self.sink.kill()
                self.sink.wait(10)
        if self.mounted:
            subprocess.run(["umount", "-l", self.spool], check=False)


# ---- faults ---------------------------------------------------------------

class Injector:
    KINDS = [("kill_worker", 3), ("kill_logd", 1), ("kill_master", 1),
             ("sighup", 2), ("broken_reload", 1), ("sink_4xx", 1),
             ("sink_stall", 1), ("sink_drop", 1), ("sink_down", 1),
             ("enospc", 2), ("sigstop", 1)]

    def __init__(self, rig, seed, stop):
        self.rig = rig
        self.rng = random.Random(seed)
        self.stop = stop
        self.events = []                # kills: t, kind, pids, ports
        self.counts = {}
        kinds = self.KINDS if IS_ROOT else \
            [k for k in self.KINDS if k[0] != "enospc"]
        self.bag = [k for k, w in kinds for _ in range(w)]

    def kill9(self, kind, pids):
        # frozen first, so no connection opens between the look and the
        # kill; the kill's time is the freeze's
        t = time.time()
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        ports = sink_client_ports(pids, self.rig.sink_ports)
        for p in pids:
            os.kill(p, signal.SIGKILL)
        self.events.append({"t": t, "kind": kind, "pids": pids,
                            "ports": ports})

    def run(self):
        while not self.stop.wait(self.rng.uniform(3, 7)):
            kind = self.rng.choice(self.bag)
            self.counts[kind] = self.counts.get(kind, 0) + 1
            try:
                getattr(self, kind)()
            except Exception as e:      # report, go on
                log("fault %s failed: %r" % (kind, e))
            self.check_master()

    def check_master(self):
        if self.rig.master.poll() is not None:
            raise SystemExit("soak: mtad exited by itself with %s" %
                             self.rig.master.returncode)

    def kill_worker(self):
        w = self.rig.workers()
        if w:
            self.kill9("kill_worker", [self.rng.choice(w)])

    def kill_logd(self):
        pids = self.rig.logd()
        if pids:
            self.kill9("kill_logd", pids)

    def kill_master(self):
        kids = self.rig.workers()
        self.kill9("kill_master", [self.rig.master.pid] + kids)
        self.rig.master.wait(10)
        deadline = time.time() + 20
        while any(alive(p) for p in kids) and time.time() < deadline:
            time.sleep(0.05)
        self.rig.start_mtad()

    def sighup(self):
        os.kill(self.rig.master.pid, signal.SIGHUP)

    def broken_reload(self):
        self.rig.write_config("server:\n  workers: [broken\n")
        os.kill(self.rig.master.pid, signal.SIGHUP)
        time.sleep(1)
        self.rig.write_config()

    def _sink(self, mode):
        ports = self.rig.sink_ports if self.rng.random() < 0.5 else \
            [self.rig.sink_ports[0]]
        for p in ports:
            self.rig.sink_mode(p, mode)
        self.stop.wait(self.rng.uniform(2, 5))
        for p in ports:
            self.rig.sink_mode(p, "ok")

    def sink_4xx(self):
        self._sink("4xx")

    def sink_stall(self):
        self._sink("stall")

    def sink_drop(self):
        self._sink("drop")

    def sink_down(self):
        self._sink("down")

    def enospc(self):
        self.rig.fill(0 if self.rng.random() < 0.3 else 1 << 20)
        self.stop.wait(self.rng.uniform(2, 4))
        self.rig.unfill()

    def sigstop(self):
        w = self.rig.workers()
        if not w:
            return
        p = self.rng.choice(w)
        os.kill(p, signal.SIGSTOP)
        self.stop.wait(self.rng.uniform(1, 3))
        os.kill(p, signal.SIGCONT)


# ---- the verdict ----------------------------------------------------------

def queued_sids(spool):
    """X-Soak-Id of every message still in queue/ (never counted lost:
    reported as not drained)."""
    out = set()
    q = os.path.join(spool, "queue")
    for name in os.listdir(q) if os.path.isdir(q) else []:
        try:
            with open(os.path.join(q, name), "rb") as f:
                head = f.read(1 << 16)
        except OSError:
            continue
        i = head.find(b"X-Soak-Id: ")
        if i >= 0:
            out.add(head[i + 11:head.find(b"\r\n", i)].decode())
    return out


def analyse(ledger, records, events, mtad_log, stuck=frozenset()):
    deliveries = {}                     # (sid, rcpt) -> [records]
    dsns = {}                           # (sid, rcpt) -> [records]
    phantoms, corrupted = [], []
    known = dict(ledger.uncertain)
    known.update(ledger.accepted)
    for r in records:
        if r["from"] == "":
            d = r["dsn"] or {}
            sid = d.get("orig")
            if sid not in known:
                phantoms.append(r)
                continue
            for f in d.get("final") or ["?"]:
                dsns.setdefault((sid, f), []).append(r)
            continue
        sid = r["id"]
        if sid not in known or r["rcpt"] not in known[sid][0]:
            phantoms.append(r)
            continue
        if r["sha"] != known[sid][2]:
            corrupted.append(r)
        deliveries.setdefault((sid, r["rcpt"]), []).append(r)

    kills = [e for e in events if e["kind"] in ("kill_worker", "kill_master")]

    def explain(first):
        # the victim delivered the first copy on that connection, and was
        # frozen at most a second after the sink recorded it (or before,
        # by the sink's own lag: it records data sent before the freeze)
        for e in kills:
            if first["peer"] in e["ports"] and \
                    first["t"] - 2.0 <= e["t"] <= first["t"] + 1.0:
                return dict(e, delta=round(e["t"] - first["t"], 3))
        return None

    dups, dsn_dups = [], []
    for key, rs in deliveries.items():
        if len(rs) > 1:
            rs.sort(key=lambda x: x["t"])
            dups.append((key, len(rs) - 1, explain(rs[0])))
    for key, rs in dsns.items():
        if len(rs) > 1:
            # a second DSN: made twice (a kill between its commit and the
            # original's state write: the original's attempt is the one
            # that delivered its other recipients), or the DSN delivered
            # twice (a kill of the worker that delivered its first copy)
            sid = key[0]
            rs.sort(key=lambda x: x["t"])
            firsts = sorted((x for k, v in deliveries.items()
                             if k[0] == sid for x in v), key=lambda x: x["t"])
            e = explain(rs[0]) or (explain(firsts[0]) if firsts else None)
            dsn_dups.append((key, len(rs) - 1, e))

    lost, lost_bounces = [], []
    delivered_once = 0
    for sid, (ok, rej, _) in ledger.accepted.items():
        if sid in stuck:
            continue
        for r in ok:
            n = len(deliveries.get((sid, r), []))
            if n == 0:
                lost.append((sid, r))
            elif n == 1:
                delivered_once += 1
        for r in rej:
            if not dsns.get((sid, r)):
                lost_bounces.append((sid, r))
    killed_by_master = mtad_log.count("killing it")
    return {
        "accepted_messages": len(ledger.accepted),
        "accepted_recipients": sum(len(v[0]) + len(v[1])
                                   for v in ledger.accepted.values()),
        "uncertain_messages": len(ledger.uncertain),
        "refused_at_submission": ledger.refused,
        "delivered_once": delivered_once,
        "duplicates": sum(d[1] for d in dups),
        "duplicates_explained": sum(d[1] for d in dups if d[2]),
        "duplicates_unexplained": [
            {"sid": d[0][0], "rcpt": d[0][1], "extra": d[1]}
            for d in dups if not d[2]],
        "duplicate_explanations": [
            {"sid": d[0][0], "rcpt": d[0][1], "kill": d[2]["kind"],
             "pids": d[2]["pids"], "kill_minus_first_copy_s": d[2]["delta"]}
            for d in dups if d[2]],
        "bounced": sum(len(v) for v in dsns.values()),
        "bounces_due": sum(len(v[1]) for v in ledger.accepted.values()),
        "duplicate_dsns": sum(d[1] for d in dsn_dups),
        "duplicate_dsns_unexplained": [
            {"sid": d[0][0], "rcpt": d[0][1], "extra": d[1]}
            for d in dsn_dups if not d[2]],
        "lost": len(lost),
        "lost_list": lost[:20],
        "lost_bounces": len(lost_bounces),
        "lost_bounces_list": lost_bounces[:20],
        "phantoms": len(phantoms),
        "corrupted": len(corrupted),
        "workers_killed_by_master": killed_by_master,
        "kill9_events": len(kills),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-d", "--duration", type=float, default=120)
    ap.add_argument("-s", "--seed", type=int, default=None)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--spool-mb", type=int, default=96)
    ap.add_argument("--drain", type=float, default=180.0,
                    help="seconds allowed for the queue to empty at the end")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    ap.add_argument("--old-config", action="store_true",
                    help="no spool.reserve, no delivery.timeouts (to soak "
                    "a build from before issue 19)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time()) % 100000
    if not os.access(MTAD, os.X_OK):
        raise SystemExit("soak: %s missing: make all first" % MTAD)
    work = tempfile.mkdtemp(prefix="mtad-soak-", dir="/dev/shm")
    os.chmod(work, 0o755)
    log("seed %d, %.0f s, %.0f msg/s, %d sessions, work dir %s%s" % (
        seed, a.duration, a.rate, a.sessions, work,
        "" if IS_ROOT else " (not root: no tmpfs spool, no ENOSPC faults)"))
    rig = Rig(work, seed, a.old_config)
    stop_clients, stop_faults = threading.Event(), threading.Event()
    ledger = Ledger()
    inj = None
    failed = True
    try:
        rig.setup(a.spool_mb)
        gate = RateGate(a.rate, stop_clients)
        threads = [threading.Thread(target=client, daemon=True, args=(
            stop_clients, ledger, rig.port, seed, i, gate))
            for i in range(a.sessions)]
        for t in threads:
            t.start()
        inj = Injector(rig, seed, stop_faults)
        ti = threading.Thread(target=inj.run, daemon=True)
        ti.start()
        t_end = time.time() + a.duration
        while time.time() < t_end:
            time.sleep(min(10, max(0.1, t_end - time.time())))
            log("%.0f s left: %d accepted, %d in queue" % (
                max(0, t_end - time.time()), len(ledger.accepted),
                len(rig.queue())))
            if not ti.is_alive():
                raise SystemExit("soak: the injector stopped")
        stop_faults.set()
        ti.join(30)
        stop_clients.set()
        for t in threads:
            t.join(90)
        # the end state: everything healthy again
        for p in rig.sink_ports:
            rig.sink_mode(p, "ok")
        rig.unfill()
        for w in rig.workers():
            os.kill(w, signal.SIGCONT)
        rig.write_config()
        deadline = time.time() + a.drain
        while rig.queue() and time.time() < deadline:
            time.sleep(1)
        left = rig.queue()
        time.sleep(2)                   # the last sink records
        with open(rig.logfile, errors="replace") as f:
            mtad_log = f.read()
        records = []
        with open(rig.record) as f:
            for line in f:
                records.append(json.loads(line))
        stuck = queued_sids(rig.spool)
        rep = analyse(ledger, records, inj.events, mtad_log, stuck)
        rep["still_queued_messages"] = len(stuck)
        rep["seed"] = seed
        rep["duration_s"] = a.duration
        rep["queue_left_after_drain"] = len(left)
        rep["faults"] = inj.counts
        with open(os.path.join(work, "kills.json"), "w") as f:
            json.dump(inj.events, f)
        with open(os.path.join(work, "ledger.json"), "w") as f:
            json.dump({"accepted": ledger.accepted,
                       "uncertain": ledger.uncertain}, f)
        print(json.dumps(rep, indent=1, sort_keys=True), flush=True)
        bad = []
        for k in ("lost", "lost_bounces", "phantoms", "corrupted",
                  "workers_killed_by_master", "queue_left_after_drain"):
            if rep[k]:
                bad.append("%s=%d" % (k, rep[k]))
        if rep["duplicates_unexplained"]:
            bad.append("unexplained duplicates=%d" %
                       len(rep["duplicates_unexplained"]))
        if rep["duplicate_dsns_unexplained"]:
            bad.append("unexplained duplicate DSNs=%d" %
                       len(rep["duplicate_dsns_unexplained"]))
        if rep["accepted_messages"] == 0:
            bad.append("nothing accepted")
        if bad:
            log("FAIL: " + ", ".join(bad))
        else:
            log("PASS: %d accepted, %d delivered once, %d duplicates (all "
                "explained by a kill -9), %d bounced, 0 lost, 0 phantoms, "
                "0 corrupted" % (rep["accepted_messages"],
                                 rep["delivered_once"], rep["duplicates"],
                                 rep["bounced"]))
            failed = False
    finally:
        stop_faults.set()
        stop_clients.set()
        rig.teardown()
        if a.keep or failed:
            log("work dir kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
