#!/usr/bin/python3
"""bench/postscreen.py - screening before the greeting: mtad's pregreet
pause and DNSBL score against Postfix's postscreen with the same list and
the same settings (`make bench`; issue 36's postscreen anchor).

PURPOSE   nsd serves the list black.screen.bench on 127.0.0.153:53.  Each
          run connects CONNS clients, CONC at a time, each from an address
          of its own in one /16 of 127/8 that no other run uses (so no
          cache, mtad's DNS cache or postscreen's, has seen it):
            listed  third octet % 5 == 0: the list answers 127.0.0.2
                    (wildcards *.B.A.127.black), must be refused (5xx);
            talker  third octet % 5 == 1: sends EHLO right after the first
                    greeting line, before the end of the pause: refused;
            clean   the rest: must get the final 220 (then QUIT).
          Both MTAs: a 1 s pause with a two-line greeting (postscreen's
          postscreen_greet_wait is whole seconds: 1 s is its least), the
          list at weight 1, threshold 1, refusal and hang-up for either
          test (mtad: 554 5.7.1 / 554 5.5.1; postscreen: dnsbl_action and
          greet_action drop, 521), relaying only from 127.0.0.1 (not a
          client here), no pass cache carried between runs.  Postscreen
          hands a passed client to smtpd, which greets it: its CPU counts
          (the whole Postfix tree, as mtad's whole tree).
MEASURES  per run: connections screened per second (all verdicts, wall
          time of the run), CPU ms per connection of the MTA's process
          tree (/proc, before and after), verdicts that were wrong (by
          class), p50 and p99 of the time from connect to the verdict (the
          first final reply line).  Medians of REPS runs each, the MTAs
          alternating.  The clients are one asyncio process on the same
          machine (its CPU is in the notes).
CONTRACT  bench/postscreen.py [--conns N] [--conc C] [--reps R]
          Run as root (port 53 on 127.0.0.153, Postfix, a mount namespace
          for Postfix's resolv.conf, as bench/mxbench.py) after `make`.
          BENCH_QUICK=1: 600 connections, 100 at a time, one run each.
          Writes its section of bench/RESULTS.md (or of BENCH_RESULTS),
          replacing its own earlier one.  Exit 0 when both ran and every
          verdict was right, 1 otherwise.
FAILURE   Every process it starts is stopped by pid (Postfix with
          `postfix -c DIR stop`) in a finally block; every wait is bounded
          (10 s per reply, --limit s per run).
"""
import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h      # noqa: E402  (its process helpers and Postfix)
import mxbench           # noqa: E402  (nsd on 127.0.0.153:53)

SECTION = "## Screening before the greeting: mtad against postscreen (`bench/postscreen.py`)"
NS_ADDR = mxbench.NS_ADDR
ZONE_NAME = "screen.bench"
LIST = "black.screen.bench"
FIRST_NET = 20              # runs use 127.20.0.0/16, 127.21.0.0/16, ...

POSTSCREEN_MAIN = """
# bench/postscreen.py: postscreen in front of smtpd, as mtad's screen
postscreen_access_list =
postscreen_blacklist_action = drop
postscreen_dnsbl_sites = %(list)s*1
postscreen_dnsbl_threshold = 1
postscreen_dnsbl_action = drop
postscreen_dnsbl_timeout = 2s
postscreen_greet_wait = 1s
postscreen_greet_action = drop
postscreen_pre_queue_limit = 5000
postscreen_post_queue_limit = 5000
postscreen_client_connection_count_limit = 0
postscreen_cache_map = btree:$data_directory/postscreen_cache
"""

POSTSCREEN_MASTER = """%(port)d inet n - n - 1 postscreen
smtpd     pass  -       -       n       -       -       smtpd
dnsblog   unix  -       -       n       -       0       dnsblog
tlsproxy  unix  -       -       n       -       0       tlsproxy
"""


def zone(nets):
    """The list: every address 127.A.B.* with B % 5 == 0, for each A."""
    lines = ["$ORIGIN %s." % ZONE_NAME, "$TTL 300",
             "@ IN SOA ns.%s. hostmaster.%s. 1 3600 600 86400 60" % (ZONE_NAME, ZONE_NAME),
             "@ IN NS ns", "ns IN A %s" % NS_ADDR]
    for a in nets:
        for b in range(0, 256, 5):
            lines.append("*.%d.%d.127.black IN A 127.0.0.2" % (b, a))
    return "\n".join(lines) + "\n"


def kind_of(b):
    return "listed" if b % 5 == 0 else "talker" if b % 5 == 1 else "clean"


class ListNsd(mxbench.Nsd):
    """mxbench's nsd with the list's zone instead of sink.example."""

    def __init__(self, workdir, nets):
        super().__init__(h, workdir)
        self.nets = nets

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "zone"), "w") as f:
            f.write(zone(self.nets))
        conf = os.path.join(self.dir, "nsd.conf")
        with open(conf, "w") as f:
            f.write(mxbench.NSD_CONF.replace('"sink.example"', '"%s"' % ZONE_NAME)
                    % dict(addr=NS_ADDR, dir=self.dir))
        self.proc = h.spawn([mxbench.NSD, "-d", "-c", conf],
                            os.path.join(self.dir, "nsd.out"))
        if not asyncio.run(dns_listed("2.0.%d.127.black.%s" % (self.nets[0], ZONE_NAME))):
            raise RuntimeError("nsd on %s:53 does not list 127.%d.0.2" % (NS_ADDR, self.nets[0]))


async def dns_listed(name, timeout=15.0):
    """True once nsd answers an A record for name (a raw UDP query)."""
    import socket
    import struct
    q = struct.pack(">HHHHHH", 0x5151, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.3)
            try:
                s.sendto(q, (NS_ADDR, 53))
                data, _ = s.recvfrom(4096)
                if data[:2] == q[:2] and (data[3] & 0x0f) == 0 and data[7] > 0:
                    return True
            except OSError:
                pass
        await asyncio.sleep(0.1)
    return False


class ScreenMtad(h.Mtad):
    """mtad with a pregreet + DNSBL listener (its own config)."""

    def write_config(self):
        user, group, _, _ = h.mta_user()
        with open(self.cfg, "w") as f:
            f.write("""server:
  hostname: bench.mtad.test
  listen:
    - {address: "127.0.0.1:%(port)d", pregreet: 1s, pregreet_multiline: true}
  workers: %(workers)d
  user: %(user)s
  group: %(group)s
  pid_file: %(dir)s/mtad.pid
  control_socket: %(dir)s/control.sock
  shutdown_timeout: 2s
limits:
  max_connections: 20000
  max_connections_per_ip: 100
screen:
  dnsbl:
    - {zone: %(list)s, weight: 1}
  threshold: 1
  timeout: 2s
dns:
  servers: ["%(ns)s:53"]
relay:
  allow_networks: [127.0.0.1/32]
spool:
  dir: %(spool)s
routes:
  db: %(dir)s/routes.mdb
  default: "smtp:[127.0.0.1]:%(sinkport)d"
log:
  file: %(log)s
  level: info
""" % dict(port=self.port, workers=h.NCPU, user=user, group=group, dir=self.dir,
                spool=self.spool, sinkport=self.sinkport, log=self.logfile, list=LIST,
                ns=NS_ADDR))


class Postscreen(h.Postfix):
    """Postfix with postscreen on its port, Postfix's resolver on nsd."""

    def start(self):
        os.makedirs(self.etc, exist_ok=True)
        os.makedirs(self.queue, exist_ok=True)
        with open(os.path.join(self.etc, "main.cf"), "w") as f:
            f.write(h.MAIN_CF % dict(queue=self.queue, sinkport=self.sinkport, dir=self.dir) +
                    POSTSCREEN_MAIN % dict(list=LIST))
        with open(os.path.join(self.etc, "master.cf"), "w") as f:
            # the harness's services, with postscreen on the port
            rest = h.MASTER_CF.split("\n", 1)[1]
            f.write(POSTSCREEN_MASTER % dict(port=self.port) + rest)
        r = subprocess.run(self.wrap + [h.POSTFIX, "-c", self.etc, "start"],
                           capture_output=True, text=True, timeout=60)
        pidfile = os.path.join(self.queue, "pid", "master.pid")
        deadline = time.time() + 15
        while time.time() < deadline and not os.path.exists(pidfile):
            time.sleep(0.1)
        try:
            with open(pidfile) as f:
                self.master = int(f.read().strip())
        except (OSError, ValueError):
            self.master = None
        if r.returncode != 0 or not self.master or not h.wait_banner(self.port, 15):
            raise RuntimeError("postfix (postscreen) did not start: %s %s" %
                               (r.stdout[-500:], r.stderr[-500:]))


async def final_reply(r, timeout):
    """The code of the first final reply line; the continuation lines
    before it are skipped.  None at EOF."""
    while True:
        line = await asyncio.wait_for(r.readline(), timeout)
        if not line:
            return None
        if len(line) >= 4 and line[3:4] == b" " and line[:3].isdigit():
            return int(line[:3])


async def one_client(port, src, kind):
    """One connection; returns (verdict code or None, seconds)."""
    t0 = time.monotonic()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(
            "127.0.0.1", port, local_addr=(src, 0)), 10)
    except (OSError, asyncio.TimeoutError):
        return None, time.monotonic() - t0
    code = None
    try:
        if kind == "talker":
            first = await asyncio.wait_for(r.readline(), 10)
            if first.startswith(b"220-"):
                w.write(b"EHLO talker.bench\r\n")
                code = await final_reply(r, 10)
            elif len(first) >= 3 and first[:3].isdigit():
                code = int(first[:3])
        else:
            code = await final_reply(r, 10)
        t = time.monotonic() - t0
        if code == 220:
            w.write(b"QUIT\r\n")
            await asyncio.wait_for(final_reply(r, 10), 10)
    except (OSError, asyncio.TimeoutError, ConnectionError):
        t = time.monotonic() - t0
    finally:
        w.close()
    return code, t


async def load(port, net, conns, conc):
    """conns connections from 127.net.B.C, conc at a time."""
    addrs = [(b, c) for b in range(256) for c in range(1, 255)]
    addrs = addrs[:conns]
    out = []
    nxt = [0]

    async def worker():
        while nxt[0] < len(addrs):
            b, c = addrs[nxt[0]]
            nxt[0] += 1
            kind = kind_of(b)
            code, t = await one_client(port, "127.%d.%d.%d" % (net, b, c), kind)
            out.append((kind, code, t))
    await asyncio.gather(*(worker() for _ in range(conc)))
    return out


def right(kind, code):
    if kind == "clean":
        return code == 220
    return code is not None and 500 <= code < 600


def one_run(mta, net, conns, conc, limit):
    cpu0 = h.tree_cpu(mta.root())
    me0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    out = asyncio.run(asyncio.wait_for(load(mta.port, net, conns, conc), limit))
    wall = time.monotonic() - t0
    time.sleep(0.3)                     # the last hang-ups' work
    cpu = h.tree_cpu(mta.root()) - cpu0
    me1 = resource.getrusage(resource.RUSAGE_SELF)
    lat = sorted(t for _, _, t in out)
    wrong = {}
    for kind, code, _ in out:
        if not right(kind, code):
            wrong[kind] = wrong.get(kind, 0) + 1
    return dict(conns=len(out), rate=len(out) / wall, cpu_ms=1000.0 * cpu / max(1, len(out)),
                wrong=wrong, p50=lat[len(lat) // 2] * 1e3 if lat else 0,
                p99=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3 if lat else 0,
                client_cpu_ms=1000.0 * ((me1.ru_utime + me1.ru_stime) -
                                        (me0.ru_utime + me0.ru_stime)) / max(1, len(out)),
                kinds={k: sum(1 for x, _, _ in out if x == k) for k in ("clean", "listed", "talker")})


def med(rs, key):
    return statistics.median(r[key] for r in rs) if rs else None


def section(results, conns, conc, reps, notes):
    lines = [SECTION, "",
             "Measured %s on %s; %d connections per run, %d at a time, %d run(s) per MTA, "
             "alternating; medians [min–max]. Clients: 3/5 clean, 1/5 listed "
             "(`%s`, weight 1, threshold 1), 1/5 talking before the end of the 1 s "
             "pregreet pause; each run from a /16 of its own (nothing cached)."
             % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), h.machine(), conns, conc,
                reps, LIST), "",
             "| MTA | connections/s screened | CPU ms per connection (MTA's tree) | "
             "wrong verdicts (of all) | verdict p50 / p99 ms |",
             "|---|---|---|---|---|"]
    for who, rs in results.items():
        if not rs:
            lines.append("| %s | not run | | | |" % who)
            continue
        wrong = sum(sum(r["wrong"].values()) for r in rs)
        total = sum(r["conns"] for r in rs)
        lines.append("| %s | %.0f [%.0f–%.0f] | %.3f [%.3f–%.3f] | %d of %d | %.0f / %.0f |" % (
            who, med(rs, "rate"), min(r["rate"] for r in rs), max(r["rate"] for r in rs),
            med(rs, "cpu_ms"), min(r["cpu_ms"] for r in rs), max(r["cpu_ms"] for r in rs),
            wrong, total, med(rs, "p50"), med(rs, "p99")))
    m, p = results.get("mtad"), results.get("Postfix postscreen")
    if m and p and med(m, "cpu_ms"):
        lines += ["", "CPU per connection, Postfix / mtad: %.1f×." % (
            med(p, "cpu_ms") / med(m, "cpu_ms"))]
    lines += ["", "With every client waiting the 1 s pause, the rate is bounded by the "
              "concurrency (%d clients ≈ %d connections/s at most): the CPU per connection is "
              "the figure that compares the two; a rate well under that bound means the MTA "
              "(or the client on the same cores) was the limit." % (conc, conc)]
    for n in notes:
        lines.append("")
        lines.append("- " + n)
    return "\n".join(lines) + "\n"


def write_section(text):
    path = os.environ.get("BENCH_RESULTS") or os.path.join(h.ROOT, "bench", "RESULTS.md")
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=600 if h.QUICK else 6000)
    ap.add_argument("--conc", type=int, default=100 if h.QUICK else 1000)
    ap.add_argument("--reps", type=int, default=1 if h.QUICK else h.REPS)
    ap.add_argument("--limit", type=float, default=300.0)
    ap.add_argument("--no-write", action="store_true", help="print only")
    a = ap.parse_args()
    a.conns = max(10, min(a.conns, 60000))
    a.conc = max(1, min(a.conc, 5000, a.conns))
    if os.geteuid() != 0:
        h.log("postscreen bench: must run as root")
        return 1
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (65536, max(hard, 65536)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    nets = [FIRST_NET + i for i in range(2 * a.reps)]
    shm = tempfile.mkdtemp(prefix="mtad-bench-ps.", dir="/dev/shm")
    os.chmod(shm, 0o755)
    running, notes = [], []
    results = {"mtad": [], "Postfix postscreen": []}
    ok = True
    try:
        bindir = os.path.join(shm, "bin")     # a private copy, as the harness
        os.makedirs(bindir)
        os.chmod(bindir, 0o755)
        h.MTAD = shutil.copy2(h.MTAD, bindir)
        ns = ListNsd(os.path.join(shm, "nsd"), nets)
        ns.start()
        running.append(ns)
        hole = h.Sink("ours", h.free_port(), shm)      # nothing is relayed
        hole.start()
        running.append(hole)
        wd = os.path.join(shm, "mtad")
        os.makedirs(wd)
        os.chmod(wd, 0o755)
        m = ScreenMtad(wd, os.path.join(wd, "spool"), False, hole.port)
        m.start()
        running.append(m)
        peers = [("mtad", m)]
        if os.access(h.POSTFIX, os.X_OK):
            pd = os.path.join(shm, "postfix")
            os.makedirs(pd)
            os.chmod(pd, 0o755)
            resolv = os.path.join(pd, "resolv.conf")
            with open(resolv, "w") as f:
                f.write("nameserver %s\noptions attempts:1 timeout:2\n" % NS_ADDR)
            os.chmod(resolv, 0o644)
            wrap = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolv]
            pf = Postscreen(pd, os.path.join(pd, "queue"), hole.port, wrap=wrap)
            try:
                pf.start()
                running.append(pf)
                peers.append(("Postfix postscreen", pf))
            except Exception as e:
                notes.append("Postfix with postscreen did not start: %s" % str(e)[:300])
                pf.stop()
                ok = False
        else:
            notes.append("Postfix not installed (bench/deps): mtad only")
            ok = False
        net = iter(nets)
        for rep in range(a.reps):
            order = peers if rep % 2 == 0 else peers[::-1]
            for who, mta in order:
                r = one_run(mta, next(net), a.conns, a.conc, a.limit)
                results[who].append(r)
                h.log("postscreen bench: %s: %d conns, %.0f/s, %.3f ms CPU each, wrong %s, "
                      "p50 %.0f ms, p99 %.0f ms (client %.3f ms CPU each)" % (
                          who, r["conns"], r["rate"], r["cpu_ms"], r["wrong"] or "none",
                          r["p50"], r["p99"], r["client_cpu_ms"]))
                if r["wrong"]:
                    ok = False
        cl = [r["client_cpu_ms"] for rs in results.values() for r in rs]
        if cl:
            notes.append("the clients (one asyncio process) spent %.3f ms of CPU per "
                         "connection (median), on the same cores" % statistics.median(cl))
    except Exception as e:
        notes.append("aborted: %s" % str(e)[:300])
        h.log(notes[-1])
        ok = False
    finally:
        for obj in reversed(running):
            try:
                obj.stop()
            except Exception as e:
                h.log("stop: %s" % e)
        for p in h.STARTED:
            if p.poll() is None:
                h.kill_tree(p.pid, 2)
        shutil.rmtree(shm, ignore_errors=True)
    text = section(results, a.conns, a.conc, a.reps, notes)
    print(text)
    if not a.no_write:
        write_section(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
