"""Helpers for the scale-out tests: a real HAProxy (Debian's haproxy) on
loopback in front of several mtad instances, each with a PROXY protocol
listener, and small raw-socket clients.

HAProxy is started in the foreground (-db) from a config written to the
test's temp dir and stopped by its PID.  Its health check is SMTP
(`option smtpchk`) sent with the PROXY header (`check-send-proxy`), so a
node that is killed or drained is taken out within about a second.
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import time

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

# The configuration documented in docs/SCALING.md, with ports filled in.
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
    bind 127.0.0.1:{front}
    default_backend mtad_nodes

backend mtad_nodes
    balance roundrobin
    option smtpchk EHLO haproxy.test
    default-server check check-send-proxy inter 500ms fall 2 rise 2
{servers}
"""


def haproxy_config(front, nodes):
    """nodes: [(name, port, "send-proxy-v2" | "send-proxy")]"""
    servers = "".join("    server %s 127.0.0.1:%d %s\n" % (n, p, kind)
                      for n, p, kind in nodes)
    return HAPROXY_CFG.format(front=front, servers=servers)


class HAProxy:
    def __init__(self, workdir, front, nodes):
        self.front = front
        self.cfg_path = os.path.join(workdir, "haproxy.cfg")
        self.log_path = os.path.join(workdir, "haproxy.out")
        with open(self.cfg_path, "w") as f:
            f.write(haproxy_config(front, nodes))
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
                with socket.create_connection(("127.0.0.1", self.front),
                                              timeout=2):
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


def make_proxy_node(factory, name, v, extra=None):
    """An mtad (not started) with two listeners: its plain test port
    (m.port, used by wait_ready) and a PROXY listener (m.proxy_port) that
    takes headers from 127.0.0.1, where HAProxy connects from."""
    from conftest import free_port
    m = factory(subdir=name)
    m.proxy_port = free_port()
    m.cfg["server"]["hostname"] = name
    m.cfg["server"]["listen"] = [
        "127.0.0.1:%d" % m.port,
        {"address": "127.0.0.1:%d" % m.proxy_port, "proxy_protocol": v,
         "proxy_from": ["127.0.0.1/32"]}]
    for k, val in (extra or {}).items():
        m.cfg.setdefault(k, {}).update(val)
    m.write_config()
    return m


def wait_for(pred, what, timeout=30.0, step=0.05):
    """Poll pred until it returns a true value; raise on timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    v = pred()
    if v:
        return v
    raise AssertionError("timed out after %.0fs waiting for %s" % (timeout,
                                                                   what))


def v1_header(src, sport, dst="127.0.0.1", dport=25):
    fam = "TCP6" if ":" in src else "TCP4"
    return ("PROXY %s %s %s %d %d\r\n" % (fam, src, dst, sport,
                                          dport)).encode()


def v2_header(src, sport, dst="127.0.0.1", dport=25, tlv=b""):
    sig = b"\r\n\r\n\x00\r\nQUIT\n"
    block = (socket.inet_aton(src) + socket.inet_aton(dst) +
             struct.pack("!HH", sport, dport) + tlv)
    return sig + bytes([0x21, 0x11]) + struct.pack("!H", len(block)) + block


def read_reply(s, timeout=5.0):
    """One SMTP reply (all its lines) from a raw socket."""
    s.settimeout(timeout)
    buf = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            return buf
        buf += chunk
        lines = buf.split(b"\r\n")
        for ln in lines[:-1]:
            if len(ln) >= 4 and ln[3:4] == b" ":
                return buf


def node_children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def kill9_node(m):
    """SIGKILL a node's master and every child of it, as a crash of the
    node would: nothing gets to finish, flush or clean up."""
    kids = node_children(m.pid)
    os.kill(m.pid, signal.SIGKILL)
    for k in kids:
        try:
            os.kill(k, signal.SIGKILL)
        except ProcessLookupError:
            pass
    m.proc.wait(10)
    for k in kids:
        wait_for(lambda: _dead(k), "child %d gone" % k, timeout=10)


def _dead(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True
