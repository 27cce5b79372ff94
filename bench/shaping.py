#!/usr/bin/python3
"""bench/shaping.py - traffic shaping: mtad and Postfix against simulated
providers (tests/integration/shapesim.py), plus shaping's own costs.

PURPOSE   Three measurements (--what, default all three):
            shaping  --messages N (default 30,000) 1 KiB messages, one
                     recipient each, to 3 simulated providers with
                     different per-source-IP limits (PROVIDERS: gmail,
                     googlemail -> "gmail" on 127.0.1.1-2, outlook, hotmail
                     -> 127.0.2.1, yahoo -> 127.0.3.1, found by MX through
                     a local nsd), injected by 20 pipelining sessions.
                     mtad sends through an egress pool of 3 sources
                     (127.0.0.2-4) with shaping rules at 95% of each
                     provider's limits; Postfix through one bind address
                     (127.0.0.2) with its own knobs: a transport per
                     provider (so gmail and googlemail share one queue),
                     its destination concurrency limit, recipient limit and
                     connection reuse count limit; its
                     destination_rate_delay is whole seconds (1/s at the
                     least), far below these rates, so it is left at 0
                     (said in the section).  Measured: time from the first
                     injected message to the last delivery, against the
                     theoretical minimum the limits allow (theoretical_min:
                     the greedy schedule of the provider's sliding windows
                     with the messages spread evenly over the sources; for
                     Postfix also with its one source), and the violations
                     the simulator counted per (site x source) against the
                     penalty episodes.
            hotpath  smtpblast -> mtad -> smtpsink, 1 KiB, 20 sessions, an
                     unlimited destination, mtad with the shaping section
                     (the provider blocks plus a block for the sink's
                     domain whose limits are never reached, so every
                     message goes through the counters) against mtad
                     without: CPU per message, interleaved pairs.
            held     --held-messages N (default 100,000) held by shaping
                     (the sink's domain limited to 1 delivery an hour):
                     the workers' RSS and Private_Dirty (smaps_rollup)
                     before and after, per held message, against the same
                     N deferred without shaping (next hop refusing: the
                     queue index and retry schedule alone); inbound p50 /
                     p99 of a paced smtpblast load (-R) with the queue
                     empty and with the N held.
          Appends (replacing its own earlier one) the section "## Traffic
          shaping" to bench/RESULTS.md, or to --results / BENCH_RESULTS.
          Numbers from a loaded box mean nothing: the script takes
          /tmp/mtad-heavy.lock itself (waits for it) unless an ancestor
          process already holds it (`flock /tmp/mtad-heavy.lock ...`).
CONTRACT  Run as root after `make` and bench/deps (port 25 and 53 on
          loopback, Postfix's mount namespace for its resolv.conf):
            bench/shaping.py [--what shaping,hotpath,held] [--messages N]
                [--held-messages N] [--mtas mtad,postfix] [--pairs N]
                [--timeout S] [--results FILE] [--keep]
          `make bench` runs it (BENCH_ONLY=shaping alone; BENCH_QUICK=1:
          3,000 messages, 10,000 held, one pair).  Environment as the
          harness: MTAD_BUILD, BENCH_QUICK, BENCH_RESULTS, BENCH_MTAS.
          mtad's shaping and egress keys are written in ONE place,
          mtad_shaping_yaml() (the key names of relay.yaml(5)'s shaping:
          and egress: sections).  Exit 0 when every part ran (the figures
          may still miss their goals), 1 otherwise.
FAILURE   Every process it starts is stopped by pid (harness.kill_tree,
          Postfix with `postfix stop`) in finally blocks; every wait has a
          deadline (--timeout bounds a delivery run).
"""
import argparse
import asyncio
import fcntl
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

ROOT = harness.ROOT
SIM = os.path.join(ROOT, "tests", "integration", "shapesim.py")
sys.path.insert(0, os.path.dirname(SIM))
import shapesim  # noqa: E402

LOCK = "/tmp/mtad-heavy.lock"
SECTION = "## Traffic shaping (`bench/shaping.py`)"
ZONE_NAME = "shape.example"
NS_ADDR = "127.0.0.154"
SOURCES = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
HEADROOM = 0.95                 # mtad's rules at this share of the limits
SINK_DOMAIN = "sink.example"    # smtpblast's recipients' domain
INJECT_SESSIONS = 20

# The simulated providers: name, the domains behind them (share of the
# messages), addresses, the simulator's limits per source IP.  Different
# on purpose: rates per second and per minute, where the rate is checked,
# connections, messages per connection, penalties.
PROVIDERS = [
    ("gmail", [("gmail", 0.30), ("googlemail", 0.10)],
     ["127.0.1.1", "127.0.1.2"],
     dict(max_conns=8, max_msgs=100, max_rcpts=100, per_second=40,
          per_minute=2400, penalty=30, rate_at="mail")),
    ("outlook", [("outlook", 0.20), ("hotmail", 0.10)], ["127.0.2.1"],
     dict(max_conns=4, max_msgs=30, max_rcpts=50, per_second=30,
          per_minute=1800, penalty=30, rate_at="rcpt",
          rate_reply=shapesim.PRESETS["outlook"]["rate_reply"])),
    ("yahoo", [("yahoo", 0.30)], ["127.0.3.1"],
     dict(max_conns=3, max_msgs=20, max_rcpts=20, per_second=60,
          per_minute=1800, penalty=60, rate_at="data",
          rate_reply=shapesim.PRESETS["yahoo"]["rate_reply"])),
]

ZONE = """$ORIGIN %(z)s.
$TTL 3600
@          IN SOA ns.%(z)s. hostmaster.%(z)s. 1 3600 600 86400 3600
@          IN NS  ns
ns         IN A   %(ns)s
gmail      IN MX  10 mx1.google
gmail      IN MX  10 mx2.google
googlemail IN MX  10 mx1.google
googlemail IN MX  10 mx2.google
mx1.google IN A   127.0.1.1
mx2.google IN A   127.0.1.2
outlook    IN MX  10 mx.outlook
hotmail    IN MX  10 mx.outlook
mx.outlook IN A   127.0.2.1
yahoo      IN MX  10 mx.yahoo
mx.yahoo   IN A   127.0.3.1
""" % {"z": ZONE_NAME, "ns": NS_ADDR}

NSD_CONF = """server:
    ip-address: %(addr)s@53
    port: 53
    do-ip6: no
    username: ""
    chroot: ""
    database: ""
    zonesdir: "%(dir)s"
    zonelistfile: "%(dir)s/zone.list"
    xfrdfile: "%(dir)s/xfrd.state"
    xfrdir: "%(dir)s"
    pidfile: "%(dir)s/nsd.pid"
    logfile: "%(dir)s/nsd.log"
    server-count: 1
    verbosity: 1
    hide-version: yes
remote-control:
    control-enable: no
zone:
    name: "%(zone)s"
    zonefile: "%(dir)s/zone"
"""


def log(msg):
    harness.log("shaping: " + msg)


# ------------------------------------------------------------ the lock

def _ancestors():
    out, pid = set(), os.getpid()
    for _ in range(64):
        f = harness.proc_stat(pid)
        if not f:
            break
        pid = int(f[1])
        if pid <= 1:
            break
        out.add(pid)
    return out


def _lock_holders(path):
    """PIDs holding a flock on path (from /proc/locks)."""
    try:
        ino = os.stat(path).st_ino
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    pids = set()
    for line in lines:
        parts = line.split()
        if len(parts) > 5 and parts[1] == "FLOCK":
            try:
                if int(parts[5].split(":")[2]) == ino:
                    pids.add(int(parts[4]))
            except (ValueError, IndexError):
                pass
    return pids


def take_lock(timeout=3600):
    """Hold /tmp/mtad-heavy.lock for the run (an fd kept open), unless an
    ancestor (flock(1) around us) holds it already."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    if _lock_holders(LOCK) & _ancestors():
        os.close(fd)
        log("%s held by an ancestor: running under it" % LOCK)
        return None
    deadline = time.time() + timeout
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.time() > deadline:
                raise RuntimeError("%s still held after %ds" % (LOCK, timeout))
            if not said:
                log("waiting for %s (someone else is testing)" % LOCK)
                said = True
            time.sleep(1)


# ------------------------------------------------------------ limits

def theoretical_min(n, windows):
    """Earliest time (s after the first) of the n-th message one source
    can send under sliding windows [(count, secs)]: each message as soon
    as every window allows it (greedy is optimal here)."""
    if n <= 1:
        return 0.0
    t = []
    for k in range(n):
        at = t[-1] if t else 0.0
        for count, secs in windows:
            if k >= count:
                at = max(at, t[k - count] + secs)
        t.append(at)
    return t[-1]


def split(n):
    """Messages per domain for n messages: [(provider, domain, count)]."""
    out, given = [], 0
    flat = [(p, d, share) for p, doms, _, _ in PROVIDERS for d, share in doms]
    for i, (p, d, share) in enumerate(flat):
        c = n - given if i == len(flat) - 1 else int(round(n * share))
        out.append((p, d, c))
        given += c
    return out


def minimum(n, nsrc):
    """{provider: seconds} and the overall theoretical minimum for n
    messages spread evenly over nsrc sources."""
    per = {}
    for p, d, c in split(n):
        per[p] = per.get(p, 0) + c
    mins = {}
    for name, _, _, lim in PROVIDERS:
        prov = shapesim.Provider(name, ["127.0.0.1"], **lim)
        mins[name] = theoretical_min(int(math.ceil(per[name] / nsrc)),
                                     prov.windows())
    return mins, max(mins.values())


# ------------------------------------------------------------ mtad's config

def mtad_shaping_yaml(sink_block=None):
    """mtad's egress: and shaping: sections for the bench.  THE ONE PLACE
    with mtad's shaping key names (relay.yaml(5): egress.sources/pools/
    default_pool; shaping.sites[] with name, mx, domains and the limit
    keys connections, messages_per_connection, recipients_per_message,
    deliveries_per_second, deliveries_per_minute).  sink_block: limits
    for a block matching SINK_DOMAIN (hotpath, held), or None."""
    lines = ["egress:", "  sources:"]
    for ip in SOURCES:
        n = ip.rsplit(".", 1)[1]
        lines.append("    - {name: s%s, address: \"%s\", ehlo: s%s.bench.example}"
                     % (n, ip, n))
    lines += ["  pools:",
              "    - name: bench",
              "      sources: [%s]" % ", ".join("s" + ip.rsplit(".", 1)[1]
                                                 for ip in SOURCES),
              "  default_pool: bench",
              "shaping:",
              "  sites:"]
    for name, doms, addrs, lim in PROVIDERS:
        mxs = {"gmail": ".google.%s" % ZONE_NAME}.get(
            name, ".%s.%s" % (name, ZONE_NAME))
        lines += ["    - name: %s" % name,
                  "      mx: [\"%s\"]" % mxs,
                  "      connections: %d" % lim["max_conns"],
                  "      messages_per_connection: %d" % lim["max_msgs"],
                  "      recipients_per_message: %d" % lim["max_rcpts"],
                  "      deliveries_per_second: %d"
                  % int(lim["per_second"] * HEADROOM),
                  "      deliveries_per_minute: %d"
                  % int(lim["per_minute"] * HEADROOM)]
    if sink_block:
        # the sink is a literal route (smtp:[127.0.0.1]:port): its site is
        # its host's, which a domains: rule never matches
        lines += ["    - name: sink",
                  "      domains: [\"%s\"]" % SINK_DOMAIN,
                  "      mx: [\"127.0.0.1\"]"]
        lines += ["      %s: %s" % kv for kv in sink_block.items()]
    return "\n".join(lines) + "\n"


class BenchMtad(harness.Mtad):
    """harness.Mtad with delivery.retry of its own (the deferred baseline
    must not retry 100,000 messages every few seconds)."""
    retry = None

    def write_config(self):
        super().write_config()
        if self.retry:
            with open(self.cfg) as f:
                text = f.read()
            text = re.sub(r"retry: \[[^]]*\]", "retry: [%s]" % self.retry, text, 1)
            with open(self.cfg, "w") as f:
                f.write(text)


def mtad_knows_shaping(base):
    """(True, "") when this build's `mtad -t` takes the egress: and
    shaping: sections, else (False, its complaint)."""
    wd = tempfile.mkdtemp(prefix="check.", dir=base)
    os.chmod(wd, 0o755)
    try:
        m = harness.Mtad(wd, os.path.join(wd, "queue"), False, 25, route="mx",
                         extra=mtad_dns_yaml() + mtad_shaping_yaml({"connections": 1}))
        m.write_config()
        r = subprocess.run([harness.MTAD, "-t", "-c", m.cfg], capture_output=True,
                           text=True, timeout=20)
        out = (r.stdout + r.stderr).strip().splitlines()
        hit = [x for x in out if "shaping" in x or "egress" in x] or out[-1:]
        return r.returncode == 0, (hit[0] if hit else "")[-300:]
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def mtad_dns_yaml():
    return "dns:\n  servers: [\"%s:53\"]\n" % NS_ADDR


# ------------------------------------------------------------ Postfix

def postfix_conf(wd):
    """main.cf additions, master.cf additions for the shaping run."""
    tmap = os.path.join(wd, "transport")
    with open(tmap, "w") as f:
        for name, doms, _, _ in PROVIDERS:
            first = "%s.%s" % (doms[0][0], ZONE_NAME)
            for d, _ in doms:
                f.write("%s.%s %s:%s\n" % (d, ZONE_NAME, name, first))
    main = ["", "# bench/shaping.py: MX lookups through nsd, one source, a",
            "# transport per provider with its limits",
            "relayhost =", "smtp_dns_support_level = enabled",
            "smtp_host_lookup = dns",
            "smtp_bind_address = %s" % SOURCES[0],
            "smtp_helo_name = s2.bench.example",
            "transport_maps = texthash:%s" % tmap,
            "# whole seconds only: 1/s would be far below every rate here",
            "default_destination_rate_delay = 0s"]
    master = [""]
    for name, _, _, lim in PROVIDERS:
        main += ["%s_destination_concurrency_limit = %d" % (name, lim["max_conns"]),
                 "%s_destination_recipient_limit = %d" % (name, lim["max_rcpts"]),
                 "%s_initial_destination_concurrency = %d" % (name, lim["max_conns"])]
        master.append("%s unix - - n - - smtp -o smtp_connection_reuse_count_limit=%d"
                      % (name, lim["max_msgs"]))
    return "\n".join(main) + "\n", "\n".join(master) + "\n"


def resolv_wrap(wd):
    """Postfix asks libc, which asks /etc/resolv.conf's server on port 53:
    a private mount namespace with a resolv.conf naming nsd (as
    bench/mxbench.py does)."""
    resolv = os.path.join(wd, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver %s\noptions attempts:1 timeout:2\n" % NS_ADDR)
    os.chmod(resolv, 0o644)
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolv]


# ------------------------------------------------------------ processes

class Nsd:
    def __init__(self, wd):
        self.dir = wd
        self.proc = None

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "zone"), "w") as f:
            f.write(ZONE)
        conf = os.path.join(self.dir, "nsd.conf")
        with open(conf, "w") as f:
            f.write(NSD_CONF % dict(addr=NS_ADDR, dir=self.dir, zone=ZONE_NAME))
        nsd = shutil.which("nsd") or "/usr/sbin/nsd"
        self.proc = harness.spawn([nsd, "-d", "-c", conf],
                                  os.path.join(self.dir, "nsd.out"))
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            if _dns_answers("gmail.%s" % ZONE_NAME):
                return
            time.sleep(0.1)
        raise RuntimeError("nsd on %s:53 did not answer (see %s)" % (NS_ADDR, self.dir))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            harness.kill_tree(self.proc.pid, 5)
            self.proc.wait(timeout=5)
        self.proc = None


def _dns_answers(name):
    import socket
    import struct
    q = struct.pack(">HHHHHH", 0x4243, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 15, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.3)
    try:
        s.sendto(q, (NS_ADDR, 53))
        data, _ = s.recvfrom(4096)
        return data[:2] == q[:2] and (data[3] & 0x0f) == 0 and data[7] > 0
    except OSError:
        return False
    finally:
        s.close()


class SimProc:
    """shapesim serve in its own process (its CPU apart from ours)."""

    def __init__(self, wd, providers):
        self.dir = wd
        self.ctl = os.path.join(wd, "sim.sock")
        self.stats = os.path.join(wd, "sim-stats.json")
        self.conf = os.path.join(wd, "sim.json")
        with open(self.conf, "w") as f:
            json.dump({"port": 25, "providers": providers}, f)
        self.proc = None

    def start(self):
        self.proc = harness.spawn(
            [sys.executable, "-B", SIM, "serve", "--config", self.conf,
             "--control", self.ctl, "--stats", self.stats, "--quiet",
             "--stats-every", "2"], os.path.join(self.dir, "sim.out"))
        deadline = time.time() + 20
        while time.time() < deadline and self.proc.poll() is None:
            if os.path.exists(self.ctl):
                try:
                    shapesim.ctl(self.ctl, {"cmd": "stats"}, timeout=2)
                    return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("shapesim did not start (see %s)" % self.dir)

    def call(self, req):
        return shapesim.ctl(self.ctl, req, timeout=30)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            harness.kill_tree(self.proc.pid, 10)
            self.proc.wait(timeout=5)
        self.proc = None


# ------------------------------------------------------------ injection

BODY = ("X" * 76 + "\r\n") * 11


def message(seq, rcpt):
    return ("From: <bench@bench.example>\r\nTo: <%s>\r\nSubject: shaping %d\r\n"
            "Message-ID: <%d.shaping@bench.example>\r\nX-Bench-Seq: %d\r\n"
            "X-Bench-Sent: %.6f\r\n\r\n%s" % (rcpt, seq, seq, seq, time.time(), BODY))


async def _reply(r):
    code = None
    while True:
        line = await r.readline()
        if not line:
            raise ConnectionError("closed")
        code = line[:3]
        if line[3:4] != b"-":
            return int(code)


async def _session(port, todo, stats, per_conn=100, deadline=0.0):
    while todo and time.time() < deadline:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            stats["errors"] += 1
            await asyncio.sleep(0.1)
            continue
        try:
            if await _reply(r) != 220:
                raise ConnectionError("greeting")
            w.write(b"EHLO inject.bench.example\r\n")
            if await _reply(r) != 250:
                raise ConnectionError("ehlo")
            for _ in range(per_conn):
                if not todo:
                    break
                seq, rcpt = todo.pop()
                w.write(("MAIL FROM:<bench@bench.example>\r\nRCPT TO:<%s>\r\n"
                         "DATA\r\n" % rcpt).encode())
                codes = [await _reply(r) for _ in range(3)]
                if codes[2] != 354:
                    todo.append((seq, rcpt))
                    stats["refused"] += 1
                    w.write(b"RSET\r\n")
                    await _reply(r)
                    break
                w.write(message(seq, rcpt).encode() + b".\r\n")
                if await _reply(r) == 250:
                    stats["accepted"] += 1
                else:
                    stats["refused"] += 1
                    todo.append((seq, rcpt))
            w.write(b"QUIT\r\n")
            await w.drain()
        except (ConnectionError, OSError):
            stats["errors"] += 1
        finally:
            w.close()


def inject(port, msgs, timeout):
    """Send msgs [(seq, rcpt)] into the MTA on 127.0.0.1:port with 20
    pipelining sessions; returns stats (accepted, refused, errors, secs)."""
    todo = list(reversed(msgs))
    stats = {"accepted": 0, "refused": 0, "errors": 0}
    t0 = time.time()
    deadline = t0 + timeout

    async def main():
        await asyncio.gather(*[_session(port, todo, stats, deadline=deadline)
                               for _ in range(INJECT_SESSIONS)])
    asyncio.run(main())
    stats["secs"] = time.time() - t0
    stats["left"] = len(todo)
    return stats


def recipients(n):
    """[(seq, rcpt)] for n messages, the domains interleaved by share."""
    out, seq = [], 0
    plan = [(d, c) for _, d, c in split(n)]
    made = {d: 0 for d, _ in plan}
    total = sum(c for _, c in plan)
    for i in range(total):
        # the domain furthest behind its share goes next
        d = min(plan, key=lambda dc: (made[dc[0]] + 1) / dc[1] if dc[1] else 1e18)[0]
        made[d] += 1
        out.append((seq, "u%d@%s.%s" % (seq, d, ZONE_NAME)))
        seq += 1
    return out


def wait_delivered(sim, n, t_start, timeout, mta_root):
    """Poll the simulator until n distinct messages (X-Bench-Seq) have
    arrived or the deadline; returns (seen, last delivery time, dups)."""
    seen, since, dups, last = set(), 0, 0, t_start
    deadline = time.time() + timeout
    next_log = time.time() + 15
    while time.time() < deadline:
        ans = sim.call({"cmd": "records", "since": since})
        since = ans["next"]
        for rec in ans["records"]:
            seq = rec["x"].get("X-Bench-Seq")
            if seq in seen:
                dups += 1
            else:
                seen.add(seq)
                last = max(last, rec["time"])
        if len(seen) >= n:
            break
        if time.time() > next_log:
            log("  %d of %d delivered after %.0f s" % (len(seen), n, time.time() - t_start))
            next_log = time.time() + 15
        if mta_root is not None and not harness.alive(mta_root):
            log("  the MTA died")
            break
        time.sleep(0.5)
    return seen, last, dups


# ------------------------------------------------------------ shaping run

def sim_providers():
    out = []
    for name, _, addrs, lim in PROVIDERS:
        d = dict(lim)
        d.update(name=name, addrs=addrs)
        out.append(d)
    return out


def shaping_run(who, base, n, timeout, shaped=True):
    """One MTA (mtad or postfix) through a fresh simulator; a result dict."""
    wd = os.path.join(base, who)
    os.makedirs(wd, exist_ok=True)
    os.chmod(wd, 0o755)
    running = []
    res = {"who": who, "n": n}
    try:
        sim = SimProc(wd, sim_providers())
        sim.start()
        running.append(sim)
        if who == "mtad":
            mta = harness.Mtad(wd, os.path.join(wd, "queue"), False, 25, route="mx",
                               extra=mtad_dns_yaml() +
                               (mtad_shaping_yaml() if shaped else ""))
            if not shaped:
                res["who"] = "mtad (this build: no shaping, one source)"
        else:
            main, master = postfix_conf(wd)
            mta = harness.Postfix(wd, os.path.join(wd, "queue"), 25, main_extra=main,
                                  wrap=resolv_wrap(wd), master_extra=master)
        mta.start()
        running.append(mta)
        nsrc = len(SOURCES) if who == "mtad" and shaped else 1
        res["min_by_provider"], res["t_min"] = minimum(n, nsrc)
        res["t_min_3"] = minimum(n, len(SOURCES))[1]
        cpu0 = harness.tree_cpu(mta.root())
        t0 = time.time()
        log("%s: injecting %d messages (theoretical minimum %.1f s with %d source%s)"
            % (who, n, res["t_min"], nsrc, "s" if nsrc > 1 else ""))
        inj = inject(mta.port, recipients(n), timeout)
        res["inject"] = inj
        log("%s: %d accepted in %.1f s (%d refused, %d errors)" % (
            who, inj["accepted"], inj["secs"], inj["refused"], inj["errors"]))
        left = max(10.0, timeout - (time.time() - t0))
        seen, last, dups = wait_delivered(sim, n, t0, left, mta.root())
        res["cpu_s"] = harness.tree_cpu(mta.root()) - cpu0
        res["delivered"] = len(seen)
        res["dups"] = dups
        res["t_deliver"] = last - t0
        res["complete"] = len(seen) >= n
        res["stats"] = sim.call({"cmd": "stats"})
        ev = sim.call({"cmd": "events"})["events"]
        res["replies"] = {}
        for e in ev:
            if e.get("kind"):
                k = (e["provider"], e["kind"])
                res["replies"][k] = res["replies"].get(k, 0) + 1
        log("%s: %d of %d delivered, last at %.1f s (minimum %.1f s), "
            "%d violations" % (who, len(seen), n, res["t_deliver"], res["t_min"],
                               res["stats"]["violations"]))
    except Exception as e:
        res["error"] = str(e)[:400]
        log("%s: failed: %s" % (who, res["error"]))
    finally:
        for obj in reversed(running):
            try:
                obj.stop()
            except Exception as e:
                log("stop: %s" % e)
    return res


def shaping_lines(runs):
    lines = ["### 30,000 messages to 3 providers (`--what shaping`)" if
             all(r["n"] == 30000 for r in runs) else
             "### %s messages to 3 providers (`--what shaping`)" %
             ", ".join(sorted({"{:,}".format(r["n"]) for r in runs})), ""]
    lines.append("Providers (the simulator's limits per source IP; mtad's rules "
                 "at %d%% of them, Postfix's knobs as described):" % (HEADROOM * 100))
    lines.append("")
    lines.append("| provider | domains (share) | conns | msgs/conn | rate | rate checked at | "
                 "penalty |")
    lines.append("|---|---|---|---|---|---|---|")
    for name, doms, addrs, lim in PROVIDERS:
        lines.append("| %s (%s) | %s | %d | %d | %d/s, %d/min | %s | %d s |" % (
            name, ", ".join(addrs), ", ".join("%s %d%%" % (d, s * 100) for d, s in doms),
            lim["max_conns"], lim["max_msgs"], lim["per_second"], lim["per_minute"],
            lim["rate_at"], lim["penalty"]))
    lines += ["", "| MTA | sources | delivered | injected in | all delivered after | "
              "theoretical minimum | ratio | violations (rate/penalty/conns/msgs/rcpts) | "
              "penalty episodes | worst (site x source): violations per episode | "
              "MTA CPU s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if "error" in r and "stats" not in r:
            lines.append("| %s | | failed: %s | | | | | | | | |" % (r["who"], r["error"]))
            continue
        st = r["stats"]
        kinds = {}
        worst = None
        eps = 0
        srcs = set()
        for pname, pv in st["providers"].items():
            for ip, sv in pv["sources"].items():
                if sv["messages"]:
                    srcs.add(ip)
                eps += sv["episodes"]
                nv = sum(sv["violations"].values())
                for k, v in sv["violations"].items():
                    kinds[k] = kinds.get(k, 0) + v
                per = nv / sv["episodes"] if sv["episodes"] else float(nv)
                if nv and (worst is None or per > worst[0]):
                    worst = (per, "%s x %s: %d in %d" % (pname, ip, nv, sv["episodes"]))
        # under a second the limits allow everything at once: no ratio
        ratio = r["t_deliver"] / r["t_min_3"] if r["t_min_3"] >= 1 else 0
        lines.append("| %s | %s | %d of %d%s | %.1f s | %s | %.1f s (3 sources)%s | %s | "
                     "%d (%s) | %d | %s | %.1f |" % (
                         r["who"], ", ".join(sorted(srcs)) or "-", r["delivered"], r["n"],
                         " (+%d twice)" % r["dups"] if r["dups"] else "",
                         r["inject"]["secs"],
                         "%.1f s" % r["t_deliver"] if r["complete"] else
                         "not all (stopped at --timeout)",
                         r["t_min_3"],
                         "; %.1f s with its one source" % r["t_min"]
                         if r["t_min"] != r["t_min_3"] else "",
                         "%.2f×" % ratio if r["complete"] and ratio else "-",
                         st["violations"], "/".join(str(kinds.get(k, 0)) for k in
                                                    ("rate", "penalty", "conns", "msgs",
                                                     "rcpts")),
                         eps, worst[1] if worst else "none", r["cpu_s"]))
    lines += ["", "Per provider (what the simulator saw): messages, the span from the "
              "first to the last, the rate that gave against what the limits allow "
              "the sources used, connections and messages per connection:", "",
              "| MTA | provider | messages | span | msgs/s (allowed) | connections | "
              "msgs per connection (limit) | most open at once per source (limit) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if "stats" not in r:
            continue
        for name, _, _, lim in PROVIDERS:
            pv = r["stats"]["providers"].get(name)
            if not pv:
                continue
            srcs = [sv for sv in pv["sources"].values() if sv["messages"]]
            msgs = sum(sv["messages"] for sv in srcs)
            conns = sum(sv["connections"] for sv in srcs)
            firsts = [sv["first"] for sv in srcs if sv["first"]]
            lasts = [sv["last"] for sv in srcs if sv["last"]]
            span = max(lasts) - min(firsts) if firsts else 0
            allowed = min(lim["per_second"], lim["per_minute"] / 60.0) * len(srcs)
            lines.append("| %s | %s | %d | %.1f s | %s (%.0f) | %d | %.1f (%d) | %s (%d) |" % (
                r["who"], name, msgs, span, "%.1f" % (msgs / span) if span > 0 else "-",
                allowed, conns, msgs / conns if conns else 0, lim["max_msgs"],
                max((sv["max_open"] for sv in srcs), default=0), lim["max_conns"]))
    lines.append("")
    for r in runs:
        if "stats" not in r:
            continue
        ehlo = {}
        for pv in r["stats"]["providers"].values():
            for ip, sv in pv["sources"].items():
                for name, c in sv["ehlo"].items():
                    ehlo.setdefault(ip, set()).add(name)
        lines.append("- %s: EHLO names seen per source: %s" % (r["who"], "; ".join(
            "%s %s" % (ip, ", ".join(sorted(v))) for ip, v in sorted(ehlo.items()))))
    lines.append("- theoretical minimum: each source sends as soon as every window of the "
                 "provider allows (the greedy schedule of the simulator's sliding windows), "
                 "the messages spread evenly over the sources; the slowest provider "
                 "bounds the run. Goal (issue): within 10% of it with 3 sources, at most "
                 "one violation per site x source per penalty episode.")
    lines.append("- Postfix: one `smtp_bind_address`, a transport per provider "
                 "(`transport_maps`: gmail and googlemail to one next hop, one queue), "
                 "`*_destination_concurrency_limit` = the provider's connections, "
                 "`*_destination_recipient_limit`, `smtp_connection_reuse_count_limit` = "
                 "its messages per connection; `default_destination_rate_delay` takes "
                 "whole seconds (1 message a second at the least) and stays 0; retries "
                 "as the harness's main.cf (minimal_backoff_time 1s, queue_run_delay 1s).")
    return lines


# ------------------------------------------------------------ hot path

def hotpath(base, pairs, msgs, shaped=True):
    """Interleaved pairs: mtad without shaping, with it."""
    sink = harness.Sink("ours", harness.free_port(), base)
    sink.start()
    out = {"off": [], "on": []}
    try:
        for i in range(pairs):
            for kind in (("off", "on") if i % 2 == 0 else ("on", "off")):
                if kind == "on" and not shaped:
                    continue
                wd = tempfile.mkdtemp(prefix="hot-%s." % kind, dir=base)
                os.chmod(wd, 0o755)
                extra = "" if kind == "off" else mtad_shaping_yaml(
                    {"connections": 1000, "deliveries_per_second": 1000000})
                m = harness.Mtad(wd, os.path.join(wd, "queue"), False, sink.port,
                                 extra=extra)
                try:
                    m.start()
                    harness.measure(m, sink, "ours", 20, max(500, msgs // 10), 1, 1024)
                    r = harness.measure(m, sink, "ours", 20, msgs, 1, 1024)
                finally:
                    m.stop()
                    shutil.rmtree(wd, ignore_errors=True)
                out[kind].append(r)
                log("hotpath %s: %.0f msgs/s end to end, %.3f ms CPU per message%s" % (
                    kind, r["e2e_rate"], (r["cpu_per_1000"] or 0),
                    "" if r["e2e_complete"] else " (INCOMPLETE)"))
    finally:
        sink.stop()
    return out


def hot_lines(hot):
    def med(rs, f):
        v = sorted(x[f] for x in rs if x.get(f) is not None)
        return v[len(v) // 2] if v else None
    off, on = med(hot["off"], "cpu_per_1000"), med(hot["on"], "cpu_per_1000")
    eo, en = med(hot["off"], "e2e_rate"), med(hot["on"], "e2e_rate")
    lines = ["### Hot path (`--what hotpath`)", "",
             "smtpblast -> mtad -> smtpsink, 1 KiB, 20 sessions, 1 message per "
             "connection, %d interleaved pairs; shaping on: the provider blocks plus a "
             "block for the sink's domain with limits it never reaches." % len(hot["off"]),
             "", "| mtad | msgs/s end to end (median) | CPU ms per message (median) | runs |",
             "|---|---|---|---|"]
    for k, e, c in (("without shaping", eo, off), ("with shaping", en, on)):
        runs = hot["off" if k.startswith("without") else "on"]
        lines.append("| %s | %s | %s | %s |" % (
            k, "%.0f" % e if e else "-", "%.3f" % c if c else "-",
            ", ".join("%.3f" % (x["cpu_per_1000"] or 0) for x in runs)))
    if off and on:
        lines += ["", "CPU per message with shaping: %.3f× without (goal: within 5%%)."
                  % (on / off)]
    return lines + [""]


# ------------------------------------------------------------ held

def smaps_dirty_kb(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Private_Dirty:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def mem(m):
    ws = m.workers()
    return sum(harness.rss_kb(p) for p in ws), sum(smaps_dirty_kb(p) for p in ws)


def paced_p99(m, rate, secs):
    n = int(rate * secs)
    r = harness.run_load("ours", m.port, 20, n, 1, 1024, int(secs) + 60, rate=rate)
    return r


def held_one(base, kind, n, rate, secs):
    """kind "held": shaping holds sink.example; "deferred": no shaping,
    the next hop refuses.  Returns memory and paced latency figures."""
    wd = tempfile.mkdtemp(prefix="held-%s." % kind, dir=base)
    os.chmod(wd, 0o755)
    res = {"kind": kind, "n": n}
    sink = None
    if kind == "held":
        sink = harness.Sink("ours", harness.free_port(), wd)
        sink.start()
        port = sink.port
        extra = mtad_shaping_yaml({"connections": 1, "deliveries_per_hour": 1})
    else:
        port = harness.free_port()          # nothing listens: refused
        extra = ""
    m = BenchMtad(wd, os.path.join(wd, "queue"), False, port, extra=extra)
    m.retry = "1h"
    try:
        m.start()
        time.sleep(1)
        res["p_empty"] = paced_p99(m, rate, secs)
        res["mem0"] = mem(m)
        t0 = time.time()
        r = harness.run_load("ours", m.port, 20, n, 0, 1024, 900)
        res["fill_s"] = time.time() - t0
        res["accepted"] = r["accepted"]
        time.sleep(3)                       # first attempts, state settles
        res["mem1"] = mem(m)
        res["p_full"] = paced_p99(m, rate, secs)
        res["delivered"] = sink.count() if sink else 0
    except Exception as e:
        res["error"] = str(e)[:400]
        log("held %s: failed: %s" % (kind, res["error"]))
    finally:
        m.stop()
        if sink:
            sink.stop()
        shutil.rmtree(wd, ignore_errors=True)
    return res


def held_lines(rs, rate, secs):
    lines = ["### Mail held by shaping (`--what held`)", "",
             "smtpblast fills mtad with N messages to sink.example (20 sessions, "
             "all on kept connections); *held*: shaping limits that domain to 1 "
             "delivery an hour (one goes, the rest wait); *deferred*: no shaping, "
             "the next hop refuses connections (the queue index and the retry "
             "schedule alone). Memory: the workers' RSS and Private_Dirty "
             "(smaps_rollup) after the fill minus before. Inbound latency: smtpblast "
             "-R %d -c 20 for %g s, before and after the fill." % (rate, secs), "",
             "| case | N accepted | RSS before → after, bytes per message | Private_Dirty "
             "bytes per message | inbound p50 / p99 ms, empty | with N waiting | delivered |",
             "|---|---|---|---|---|---|---|"]
    by = {}
    for r in rs:
        if "error" in r or not r.get("accepted"):
            lines.append("| %s | failed: %s | | | | | |" % (r["kind"], r.get("error", "nothing accepted")))
            continue
        n = r["accepted"]
        drss = (r["mem1"][0] - r["mem0"][0]) * 1024 / n
        ddirty = (r["mem1"][1] - r["mem0"][1]) * 1024 / n
        by[r["kind"]] = (drss, ddirty)

        def pp(x):
            return "%.2f / %.2f" % (x.get("p50", 0) / 1000, x.get("p99", 0) / 1000) \
                if "p99" in x else "-"
        lines.append("| %s | %d | %d → %d KiB, %.0f | %.0f | %s | %s | %d |" % (
            r["kind"], n, r["mem0"][0], r["mem1"][0], drss, ddirty, pp(r["p_empty"]),
            pp(r["p_full"]), r["delivered"]))
    if "held" in by and "deferred" in by:
        lines += ["", "Held beyond deferred (what shaping adds besides the queue index): "
                  "%.0f bytes of RSS, %.0f of Private_Dirty per message (goal: at most 256)."
                  % (by["held"][0] - by["deferred"][0], by["held"][1] - by["deferred"][1])]
    return lines + [""]


# ------------------------------------------------------------ output

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
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--what", default="shaping,hotpath,held")
    ap.add_argument("--messages", type=int, default=3000 if quick else 30000)
    ap.add_argument("--held-messages", type=int, default=10000 if quick else 100000)
    ap.add_argument("--hot-messages", type=int, default=10000 if quick else 20000)
    ap.add_argument("--mtas", default=os.environ.get("BENCH_MTAS", "mtad,postfix"))
    ap.add_argument("--pairs", type=int, default=1 if quick else 3)
    ap.add_argument("--paced-rate", type=int, default=1000)
    ap.add_argument("--paced-secs", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=0,
                    help="bound of one delivery run (default: twice the theoretical "
                    "minimum with one source + 120 s)")
    ap.add_argument("--results", default=os.environ.get("BENCH_RESULTS") or
                    os.path.join(ROOT, "bench", "RESULTS.md"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    what = set(filter(None, a.what.split(",")))
    mtas = set(filter(None, a.mtas.split(",")))
    if os.geteuid() != 0:
        log("must run as root (port 25 and 53, Postfix)")
        return 1
    for b in (harness.MTAD, harness.BLAST, harness.SINK):
        if not os.access(b, os.X_OK):
            log("missing %s: run make first" % b)
            return 1
    lockfd = take_lock()
    base = tempfile.mkdtemp(prefix="mtad-bench-shaping-", dir="/dev/shm")
    os.chmod(base, 0o755)
    # private copies, as the harness runs: a `make` elsewhere relinks build/
    bindir = os.path.join(base, "bin")
    os.makedirs(bindir)
    os.chmod(bindir, 0o755)
    harness.MTAD, harness.BLAST, harness.SINK = [
        shutil.copy2(b, bindir) for b in (harness.MTAD, harness.BLAST, harness.SINK)]
    ok = True
    t_all = time.time()
    load0 = os.getloadavg()
    lines = ["Measured %s UTC on %s; load average at start %.2f, at end {END} (numbers "
             "from a loaded box mean nothing). `bench/shaping.py --what %s "
             "--messages %d --held-messages %d`." % (
                 time.strftime("%Y-%m-%d %H:%M", time.gmtime()), harness.machine(),
                 load0[0], ",".join(sorted(what)), a.messages, a.held_messages), ""]
    try:
        shaped, why = mtad_knows_shaping(base)
        if not shaped:
            log("this mtad takes no egress:/shaping: sections (%s): mtad runs "
                "unshaped, hot path and held only without shaping" % why)
            lines += ["- **this mtad build has no shaping** (`mtad -t`: %s): its "
                      "figures below are mtad without shaping, through one source; "
                      "the hot-path and held parts ran only their halves without "
                      "shaping."
                      % why.replace("\n", " ")[:200], ""]
        if "shaping" in what:
            ns = Nsd(os.path.join(base, "nsd"))
            ns.start()
            try:
                runs = []
                timeout = a.timeout or (2 * minimum(a.messages, 1)[1] + 120)
                for who in ("mtad", "postfix"):
                    if who not in mtas:
                        continue
                    if who == "postfix" and not os.access(harness.POSTFIX, os.X_OK):
                        log("no Postfix (bench/deps installs it): mtad only")
                        continue
                    r = shaping_run(who, base, a.messages, timeout, shaped)
                    ok = ok and "error" not in r
                    runs.append(r)
            finally:
                ns.stop()
            lines += shaping_lines(runs)
        if "hotpath" in what:
            hot = hotpath(base, a.pairs, a.hot_messages, shaped)
            lines += hot_lines(hot)
        if "held" in what:
            rs = [held_one(base, k, a.held_messages, a.paced_rate, a.paced_secs)
                  for k in (("held", "deferred") if shaped else ("deferred",))]
            ok = ok and all("error" not in r for r in rs)
            lines += held_lines(rs, a.paced_rate, a.paced_secs)
    except Exception as e:
        import traceback
        traceback.print_exc()
        lines.append("- aborted: %s" % str(e)[:300])
        ok = False
    finally:
        for p in list(harness.STARTED):
            if p.poll() is None:
                harness.kill_tree(p.pid, 3)
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            log("work directory kept: %s" % base)
    lines[0] = lines[0].replace("{END}", "%.2f, %.0f s in all" % (
        os.getloadavg()[0], time.time() - t_all))
    write_section(lines, a.results)
    if lockfd is not None:
        os.close(lockfd)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
