"""cluster_fixture - three mtad nodes sharing limits through Redis (issue 38).

What test_cluster.py and bench/cluster.py run, all real processes on
loopback (the tests run as root in their own network namespace):

    clients (127.0.0.8) --> HAProxy 127.0.0.100:25 (roundrobin, PROXY v2,
                            connects from 127.0.0.100)
        --> n1 127.0.0.101   n2 127.0.0.102   n3 127.0.0.103
            (2525 direct, 2526 PROXY; each its own relay.yaml, spool,
            control socket, log, metrics on :9100; all send from ONE
            egress source, "s0" = 127.0.0.2, the "one pool")
        --> Debian's redis-server 127.0.0.1:<free port> (ACL user "mtad",
            keys under "mtad:", no persistence: a restart comes back empty)
        --> the provider simulator (shapesim.py) "gmail" on
            127.0.1.1-2:25, behind the test zone's MX records (nsd), which
            counts every limit a source IP breaks.

Cluster(..., shared=False) leaves the `cluster:` section out: three
independent nodes, each keeping the site's limits for itself, so the fleet
sends three times the limit.  The tests run that too (it shows they can
fail); with shared=True they need the cluster feature.

The HAProxy and Redis configurations below are the ones docs/SCALING.md
shows ("Set-up"); test_cluster.py checks that the page carries them.
Every wait is bounded and raises AssertionError; every process started here
is stopped by its pid.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

from mtadtest import (HAPROXY, ZONE, Client, Mtad, dot_stuff, free_port,
                      kill9_node, make_message, wait_for)

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"

FRONT = "127.0.0.100"           # HAProxy: clients connect here, on port 25
NODE_ADDRS = ("127.0.0.101", "127.0.0.102", "127.0.0.103")
DIRECT_PORT = 2525              # a node's own listener (direct clients)
PROXY_PORT = 2526               # a node's listener for HAProxy (PROXY v2)
METRICS_PORT = 9100
CLIENT = "127.0.0.8"            # the submitting clients (relay allowed)
SOURCE = "127.0.0.2"            # the one egress source every node uses
GMAIL = ["127.0.1.1", "127.0.1.2"]
GOOGLE = ["gmail.%s" % ZONE, "googlemail.%s" % ZONE]
KEY_PREFIX = "mtad:"
SYNC_INTERVAL = "100ms"

# ---- the configurations docs/SCALING.md shows ("Set-up") ----

HAPROXY_CFG = """\
global
    maxconn 4096

defaults
    mode tcp
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout check 2s
    retries 3
    option redispatch

frontend smtp_in
    bind {front}:25
    default_backend mtad_nodes

backend mtad_nodes
    balance roundrobin
    option smtpchk EHLO haproxy.test
    default-server check check-send-proxy inter 500ms fall 2 rise 2 source {front}
    server n1 {n1}:{proxy_port} send-proxy-v2
    server n2 {n2}:{proxy_port} send-proxy-v2
    server n3 {n3}:{proxy_port} send-proxy-v2
"""

REDIS_CONF = """\
bind {host}
port {port}
protected-mode yes
dir {dir}
# shared limits are short-lived: no snapshots, no AOF
save ""
appendonly no
# never evict a counter or a lease to make room
maxmemory 64mb
maxmemory-policy noeviction
# the operator (redis-cli), and the nodes: only their own keys
user default on >{admin_password} ~* &* +@all
user mtad on >{password} ~mtad:* &* +@all -@dangerous +role +info
"""


# The values docs/SCALING.md shows the Redis configuration with.
REDIS_DOC = {"host": "10.0.0.20", "port": 6379, "dir": "/var/lib/redis-mtad",
             "password": "<the nodes' password>",
             "admin_password": "<the operator's password>"}


# ... and the addresses of packaging/cluster/haproxy.cfg.example.
HAPROXY_DOC = {"front": "10.0.0.10", "n1": "10.0.0.11", "n2": "10.0.0.12",
               "n3": "10.0.0.13", "proxy_port": PROXY_PORT}


def haproxy_config(**values):
    """HAPROXY_CFG with the tests' addresses (or values)."""
    v = {"front": FRONT, "n1": NODE_ADDRS[0], "n2": NODE_ADDRS[1],
         "n3": NODE_ADDRS[2], "proxy_port": PROXY_PORT}
    v.update(values)
    return HAPROXY_CFG.format(**v)


class Redis:
    """Debian's redis-server in its own directory, on 127.0.0.1 and a free
    port that stays the same across kill() and start() (the nodes keep
    their address)."""

    def __init__(self, workdir, host="127.0.0.1"):
        self.dir = os.path.join(workdir, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.host = host
        self.port = free_port(host)
        self.password = "mtad-cluster-pw"
        self.admin_password = "redis-admin-pw"
        self.conf = os.path.join(self.dir, "redis.conf")
        with open(self.conf, "w") as f:
            f.write(REDIS_CONF.format(host=host, port=self.port, dir=self.dir,
                                      password=self.password,
                                      admin_password=self.admin_password))
        # the nodes read it as root before they drop privileges; 0600
        self.password_file = os.path.join(self.dir, "mtad.pw")
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT |
                     os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.password + "\n")
        self.proc = None
        self.starts = 0

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    def start(self, timeout=15.0):
        self.starts += 1
        self.out = open(os.path.join(self.dir, "redis.out"), "ab")
        self.proc = subprocess.Popen([REDIS_SERVER, self.conf],
                                     stdout=self.out, stderr=self.out)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("redis-server exited: %s" % self.output())
            if self.cli("PING", timeout=2).strip() == "PONG":
                return self
            time.sleep(0.05)
        self.stop()
        raise AssertionError("redis-server not answering: %s" % self.output())

    def output(self):
        try:
            with open(os.path.join(self.dir, "redis.out"), "rb") as f:
                return f.read().decode(errors="replace")[-3000:]
        except OSError:
            return ""

    def cli(self, *args, timeout=10):
        """One command as the admin user; its output ("" when down)."""
        try:
            r = subprocess.run([REDIS_CLI, "-h", self.host, "-p",
                                str(self.port), "--no-auth-warning", "-a",
                                self.admin_password, *args],
                               capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return ""
        return r.stdout if r.returncode == 0 else ""

    def info(self, section="stats"):
        out = {}
        for line in self.cli("INFO", section).splitlines():
            k, sep, v = line.strip().partition(":")
            if sep:
                out[k] = v
        return out

    def commands_processed(self):
        return int(self.info("stats").get("total_commands_processed", 0))

    def keys(self, pattern=KEY_PREFIX + "*"):
        return [k for k in self.cli("--scan", "--pattern", pattern)
                .splitlines() if k]

    def kill(self):
        """SIGKILL: a crash, nothing flushed (there is nothing to flush)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        wait_for(lambda: self.cli("PING", timeout=2).strip() != "PONG", 10,
                 what="redis-server gone")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def cpu_seconds(self):
        return proc_cpu(self.proc.pid) if self.proc else 0.0


class ClusterHAProxy:
    """HAProxy with HAPROXY_CFG, in front of the three nodes."""

    def __init__(self, workdir):
        self.cfg_path = os.path.join(workdir, "haproxy.cfg")
        self.log_path = os.path.join(workdir, "haproxy.out")
        with open(self.cfg_path, "w") as f:
            f.write(haproxy_config())
        self.proc = None

    def start(self, timeout=10.0):
        r = subprocess.run([HAPROXY, "-c", "-f", self.cfg_path],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        self.out = open(self.log_path, "ab")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", self.cfg_path],
                                     stdout=self.out, stderr=self.out)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("haproxy exited: %s" % self.output())
            try:
                with socket.create_connection((FRONT, 25), timeout=2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError("haproxy not listening: %s" % self.output())

    def output(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class Node(Mtad):
    """One mtad node on its own loopback address."""

    def __init__(self, workdir, name, addr, overrides):
        self.name, self.addr = name, addr
        super().__init__(workdir, overrides)
        self.port = DIRECT_PORT
        self.proxy_port = PROXY_PORT
        self.metrics = "%s:%d" % (addr, METRICS_PORT)
        self.cfg["server"]["listen"] = [
            "%s:%d" % (addr, DIRECT_PORT),
            {"address": "%s:%d" % (addr, PROXY_PORT), "proxy_protocol": "v2",
             "proxy_from": ["%s/32" % FRONT]}]
        self.cfg.setdefault("metrics", {})["listen"] = self.metrics
        self.write_config()

    def wait_ready(self, timeout=15.0):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("%s exited with %s: %s" % (
                    self.name, self.proc.returncode, self.stderr_text()))
            try:
                with socket.create_connection((self.addr, self.port),
                                              timeout=2) as s:
                    s.settimeout(2)
                    if s.recv(512).startswith(b"220"):
                        return
            except OSError as e:
                last = e
            time.sleep(0.05)
        raise AssertionError("%s not ready: %r %s" % (self.name, last,
                                                      self.stderr_text()))

    def client(self, source=CLIENT, timeout=10.0):
        """A raw line client to this node's own listener, from source."""
        return Client(self.port, source=source, timeout=timeout,
                      host=self.addr)

    def first_line(self, source, timeout=10.0):
        """The first line this node sends a new connection from source."""
        c = self.client(source, timeout)
        try:
            return c._line().decode(errors="replace")
        except (EOFError, OSError) as e:
            return "closed: %s" % e
        finally:
            c.close()

    def scrape(self):
        """/metrics as {name{labels}: value} ({} when it does not answer)."""
        try:
            body = urllib.request.urlopen("http://%s/metrics" % self.metrics,
                                          timeout=5).read().decode()
        except OSError:
            return {}
        out = {}
        for line in body.splitlines():
            if line.startswith("#") or " " not in line:
                continue
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
        return out

    def shaping(self, site):
        """This node's pair of (site, s0) from mtactl shaping --json."""
        r = self.ctl("shaping", "--json")
        if r.returncode != 0:
            return None
        for p in json.loads(r.stdout).get("pairs", []):
            if p["site"] == site and p.get("source") in ("s0", None):
                return p
        return None

    def accepted(self):
        """Queue ids this node logged as accepted from a client."""
        return set(re.findall(r": ([0-9A-F]{16}): from=<", self.log_text()))

    def cpu_seconds(self):
        """CPU (user + system) of the master and every child, so far."""
        pids = [self.pid] + self.children()
        return sum(proc_cpu(p) for p in pids)


def proc_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    tck = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tck


def google_site(**limits):
    """The shaping section: one site, google (gmail + googlemail)."""
    site = {"name": "google", "mx": [".google.%s" % ZONE]}
    site.update(limits)
    return {"sites": [site]}


class Cluster:
    """Redis, three nodes, HAProxy.  shared: the nodes carry the cluster:
    section (else they share nothing).  shaping: the shaping: section of
    every node; over: more relay.yaml keys (merged per top-level key)."""

    def __init__(self, workdir, dns, shaping, shared=True, over=None,
                 workers=2, sync_interval=SYNC_INTERVAL):
        self.dir = workdir
        self.shared = shared
        self.redis = Redis(workdir)
        self.nodes = []
        for i, addr in enumerate(NODE_ADDRS):
            name = "n%d" % (i + 1)
            d = os.path.join(workdir, name)
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o755)
            cfg = {
                "server": {"hostname": "%s.mx.test" % name,
                           "workers": workers},
                "routes": {"default": "mx"},
                "relay": {"allow_networks": ["%s/32" % CLIENT]},
                "dns": {"servers": [dns], "timeout": "1s", "attempts": 1},
                "delivery": {"retry": ["2s", "5s"], "connect_timeout": "2s",
                             "connections_per_destination": 20},
                "egress": {"sources": [{"name": "s0", "address": SOURCE,
                                        "ehlo": "%s.out.test" % name}],
                           "pools": [{"name": "default",
                                      "sources": {"s0": 1}}]},
                "shaping": shaping,
            }
            if shared:
                cfg["cluster"] = {
                    "redis": [self.redis.address],
                    "user": "mtad",
                    "password_file": self.redis.password_file,
                    "key_prefix": KEY_PREFIX,
                    "node_id": name,
                    "sync_interval": sync_interval,
                }
            for k, v in (over or {}).items():
                if isinstance(v, dict):
                    cfg.setdefault(k, {}).update(v)
                else:
                    cfg[k] = v
            self.nodes.append(Node(d, name, addr, cfg))
        self.haproxy = ClusterHAProxy(workdir)

    def start(self):
        self.redis.start()
        for n in self.nodes:
            n.start()
        self.haproxy.start()
        # HAProxy's health checks (rise 2) reached every node: round-robin
        # spreads over all three from the first connection
        wait_for(lambda: all(n.log_text().count("PROXY v2") >= 2
                             for n in self.nodes), timeout=20,
                 what="two HAProxy health checks on every node")
        return self

    def stop(self):
        self.haproxy.stop()
        for n in self.nodes:
            n.stop()
        self.redis.stop()

    def node(self, name):
        return [n for n in self.nodes if n.name == name][0]

    def submit(self, n, rcpt_of, via=None, source=CLIENT, per_session=1,
               serial0=0):
        """n messages, each to rcpt_of(i) (a list), through HAProxy (via
        None: round-robin over the nodes, per_session messages a
        connection) or straight to the node via.  Returns the queue ids."""
        ids = []
        i = 0
        while i < n:
            c = (Client(25, source=source, timeout=20, host=FRONT)
                 if via is None else via.client(source, timeout=20))
            try:
                c.greet()
                for _ in range(min(per_session, n - i)):
                    ids.append(send_one(c, rcpt_of(i), serial0 + i))
                    i += 1
                c.cmd("QUIT")
            finally:
                c.close()
        return ids

    def kill9(self, node):
        kill9_node(node)

    def cpu_seconds(self):
        return sum(n.cpu_seconds() for n in self.nodes)


def send_one(c, rcpts, serial):
    """One transaction on an open Client; its queue id."""
    r = c.cmd("MAIL FROM:<s@home.test>")
    assert r.code == 250, r
    for a in rcpts:
        r = c.cmd("RCPT TO:<%s>" % a)
        assert r.code == 250, r
    r = c.cmd("DATA")
    assert r.code == 354, r
    c.send(dot_stuff(make_message(serial)))
    r = c.reply()
    assert r.code == 250, r
    m = re.search(rb"queued as ([0-9A-F]{16})", r.text)
    assert m, r
    return m.group(1).decode()


def max_in_window(times, width):
    """The most events in any window of width seconds."""
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - width:
            j += 1
        best = max(best, i - j + 1)
    return best
