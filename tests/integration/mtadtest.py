"""The one helper module of mtad's integration tests.

What every test file shares: paths to the binaries, free loopback ports,
the relay.yaml writer and the Mtad process wrapper; a raw line SMTP client
for tests that control the bytes on the wire; message, send and spool
helpers; /proc inspection.  Fixtures live in conftest.py.

Every wait here raises AssertionError when it times out (wait_for(),
Mtad.wait_ready(), Mtad.wait_log(), Sink.wait_for()): a test cannot pass
after timing out.  Everything is bounded in time and count; nothing here
kills a process that the test did not start.
"""
import os
import pwd
import re
import signal
import smtplib
import socket
import subprocess
import time

from sink import Sink  # noqa: F401 (the tests and conftest take it from here)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("MTAD_BUILD", "build"))
MTAD = os.path.join(BUILD, "mtad")
MTACTL = os.path.join(BUILD, "mtactl")
IS_ROOT = os.geteuid() == 0
USER = "mtad"


def ensure_user():
    """Create the unprivileged system user when running as root."""
    if not IS_ROOT:
        return
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", USER], check=True)


_handed_out = set()


def free_port(host="127.0.0.1"):
    """A free loopback port never handed out before in this test run: the
    kernel may give the same ephemeral port to two calls in a row, and a
    route "to a closed port" that is mtad's own listener makes a mail loop."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(1000):
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no fresh free port")


def to_yaml(value, indent=0):
    """A small YAML emitter for dicts, lists and scalars (no PyYAML here)."""
    pad = "  " * indent
    out = []
    if isinstance(value, dict):
        if not value:
            return pad + "{}\n"
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out.append("%s%s:\n%s" % (pad, k, to_yaml(v, indent + 1)))
            else:
                out.append("%s%s: %s\n" % (pad, k, scalar(v)))
        return "".join(out)
    if isinstance(value, list):
        for v in value:
            if isinstance(v, (dict, list)) and v:
                body = to_yaml(v, indent + 1).lstrip()
                out.append("%s- %s" % (pad, body))
            else:
                out.append("%s- %s\n" % (pad, scalar(v)))
        return "".join(out)
    return pad + scalar(value) + "\n"


def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return '"%s"' % str(v).replace("\\", "\\\\").replace('"', '\\"')


def deep_merge(base, over):
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict) and v:
            deep_merge(base[k], v)
        else:
            base[k] = v
    return base


class Mtad:
    """One mtad instance: config, process, and small client helpers."""

    def __init__(self, workdir, overrides=None):
        self.dir = workdir
        self.port = free_port()
        self.spool = os.path.join(workdir, "spool")
        self.log = os.path.join(workdir, "mtad.log")
        self.cfg_path = os.path.join(workdir, "relay.yaml")
        self.pid_file = os.path.join(workdir, "mtad.pid")
        self.sock = os.path.join(workdir, "control.sock")
        self.cfg = {
            "server": {
                "hostname": "mx.test.example",
                "listen": ["127.0.0.1:%d" % self.port],
                "workers": 2,
                "pid_file": self.pid_file,
                "control_socket": self.sock,
                "shutdown_timeout": "5s",
            },
            "spool": {"dir": self.spool},
            "routes": {
                "db": os.path.join(workdir, "routes.mdb"),
                "default": "smtp:[127.0.0.1]:%d" % free_port(),
            },
            "delivery": {"retry": ["1s", "2s"], "connect_timeout": "2s"},
            "log": {"file": self.log, "level": "info",
                    "flush_interval": "20ms"},
        }
        if overrides:
            deep_merge(self.cfg, overrides)
        self.proc = None
        self.write_config()

    def write_config(self, cfg=None):
        with open(self.cfg_path, "w") as f:
            f.write(to_yaml(cfg if cfg is not None else self.cfg))

    def start(self, wait=True, extra_args=()):
        self.logf = open(os.path.join(self.dir, "stderr.log"), "ab")
        self.proc = subprocess.Popen(
            [MTAD, "-f", "-c", self.cfg_path, *extra_args],
            stdout=self.logf, stderr=self.logf, cwd=self.dir)
        if wait:
            self.wait_ready()
        return self

    @property
    def pid(self):
        return self.proc.pid

    def wait_ready(self, timeout=15.0):
        """Wait until the listener answers with a 220 greeting."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("mtad exited with %s: %s" % (
                    self.proc.returncode, self.stderr_text()))
            try:
                with socket.create_connection(("127.0.0.1", self.port),
                                              timeout=2) as s:
                    s.settimeout(2)
                    if s.recv(512).startswith(b"220"):
                        return
            except OSError as e:
                last = e
            time.sleep(0.05)
        raise AssertionError("mtad not ready: %r %s" % (last, self.stderr_text()))

    def stderr_text(self):
        try:
            with open(os.path.join(self.dir, "stderr.log"), "rb") as f:
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""

    def log_text(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_log(self, needle, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self.log_text()
            if needle in text:
                return text
            time.sleep(0.05)
        raise AssertionError("%r not in log:\n%s" % (needle, self.log_text()[-4000:]))

    def smtp(self, source_address=None, timeout=10):
        s = smtplib.SMTP(timeout=timeout, source_address=source_address)
        s.connect("127.0.0.1", self.port)
        return s

    def ctl(self, *args, check=False, timeout=30):
        r = subprocess.run([MTACTL, "-c", self.cfg_path, *args],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("mtactl %s: rc=%d %s %s" % (
                " ".join(args), r.returncode, r.stdout, r.stderr))
        return r

    def queue_ids(self):
        q = os.path.join(self.spool, "queue")
        try:
            return sorted(n for n in os.listdir(q) if not n.startswith("."))
        except FileNotFoundError:
            return []

    def children(self):
        """PIDs of the master's direct children."""
        try:
            with open("/proc/%d/task/%d/children" % (self.pid, self.pid)) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def stop(self, timeout=15.0):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


# ---- raw SMTP client, spool files ----

# An SMTP reply line with an RFC 3463 enhanced status code.
ENHANCED = re.compile(rb"^[2-5]\d\d[ -][245]\.\d{1,3}\.\d{1,3}( |$)")


class Reply:
    def __init__(self, lines):
        self.lines = lines                      # raw bytes, without CRLF
        self.code = int(lines[-1][:3])
        self.text = b"\n".join(l[4:] for l in lines)

    def __repr__(self):
        return "Reply(%r)" % self.lines


class Client:
    """A line-oriented SMTP client over a plain socket."""

    def __init__(self, port, source=None, timeout=10.0, host="127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        if source:
            self.sock.bind((source, 0))
        self.sock.connect((host, port))
        self.local_port = self.sock.getsockname()[1]
        self.buf = bytearray()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = self.buf[:i]
                del self.buf[:i + 2]
                return bytes(line)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed; partial %r" % self.buf)
            self.buf += chunk

    def reply(self):
        lines = []
        while True:
            line = self._line()
            lines.append(line)
            if len(line) < 4 or line[3:4] != b"-":
                return Reply(lines)

    def replies(self, n):
        return [self.reply() for _ in range(n)]

    def cmd(self, line):
        self.send(line + b"\r\n" if isinstance(line, bytes) else line + "\r\n")
        return self.reply()

    def greet(self, ehlo="client.test"):
        r = self.reply()
        assert r.code == 220, r
        r = self.cmd("EHLO " + ehlo)
        assert r.code == 250, r
        return r

    def closed(self, timeout=5.0):
        """True when the server closes the connection within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def dot_stuff(body):
    """Body bytes (CRLF lines) -> DATA bytes including the final dot."""
    if not body.endswith(b"\r\n"):
        body += b"\r\n"
    out = body.replace(b"\r\n.", b"\r\n..")
    if out.startswith(b"."):
        out = b"." + out
    return out + b".\r\n"


def assert_enhanced(reply):
    """Every reply line except 220/EHLO continuation carries x.y.z."""
    for line in reply.lines:
        assert ENHANCED.match(line), "no enhanced status code: %r" % line


def read_queue_file(path):
    """(envelope dict, body bytes) of one spool queue file."""
    with open(path, "rb") as f:
        data = f.read()
    head, body = data.split(b"\nend\n", 1)
    env = {"rcpt": []}
    for line in head.split(b"\n")[1:]:
        key, _, val = line.partition(b" ")
        if key == b"rcpt":
            env["rcpt"].append(val)
        else:
            env[key.decode()] = val
    return env, body


def xtext_decode(v):
    if v == b"+":
        return None
    return re.sub(rb"\+([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), v)


def spool_files(spool, sub):
    try:
        return sorted(n for n in os.listdir(os.path.join(spool, sub))
                      if not n.startswith("."))
    except FileNotFoundError:
        return []


class Blackhole:
    """A listener that never accepts: delivery attempts toward it hang in
    the kernel's backlog, so accepted messages stay in queue/ for the test
    to read, whatever the delivery code's retry and bounce policy."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]

    def route(self):
        return "smtp:[127.0.0.1]:%d" % self.port

    def close(self):
        self.sock.close()


# ---- messages, sending, waiting ----

ID_RE = re.compile(rb"queued as ([0-9A-F]{16})")


def closed_port():
    """A loopback port nobody listens on (connections are refused), never
    one handed out to an mtad listener of this run."""
    return free_port()


def make_message(n, extra=b"", subject=None):
    """A CRLF message with a unique serial in a header and the body."""
    subj = subject or ("message %d" % n)
    return (b"From: sender@example.org\r\nTo: rcpt@example.net\r\n"
            b"Subject: " + subj.encode() + b"\r\n"
            b"X-Serial: " + str(n).encode() + b"\r\n\r\n"
            b"serial " + str(n).encode() + b"\r\n" + extra)


def send(mtad, sender, rcpts, msg, conn=None):
    """Send one message; returns its queue id (from the 250 reply)."""
    own = conn is None
    s = conn or mtad.smtp()
    try:
        s.ehlo("client.test")
        code, _ = s.mail(sender)
        assert code == 250, code
        for r in rcpts:
            code, resp = s.rcpt(r)
            assert code == 250, (code, resp)
        code, resp = s.data(msg)
        assert code == 250, (code, resp)
        m = ID_RE.search(resp)
        return m.group(1).decode() if m else None
    finally:
        if own:
            s.quit()


def strip_received(data):
    """Split a relayed message into (Received header block, the rest).
    The block is the leading 'Received:' field with its folded lines."""
    assert data.startswith(b"Received:"), data[:200]
    pos = 0
    while True:
        nl = data.index(b"\n", pos) + 1
        pos = nl
        if not data[pos:pos + 1] in (b" ", b"\t"):
            break
    return data[:pos], data[pos:]


def maildir_files(path):
    new = os.path.join(path, "new")
    try:
        return sorted(os.path.join(new, f) for f in os.listdir(new))
    except FileNotFoundError:
        return []


def worker_pid_of(mtad, qid, timeout=10.0):
    """PID of the process that logged the queue id first (the accepting
    worker, which is also the one delivering it)."""
    pat = re.compile(r"mtad\[(\d+)\]: [^:]*: %s:" % qid)

    def find():
        m = pat.search(mtad.log_text())
        return int(m.group(1)) if m else None
    return wait_for(find, timeout, what="a log line for %s" % qid)


# ---- processes ----

def comm(pid):
    """The process's comm ("mtad: worker"), or None when it is gone."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def proc_status(pid):
    """/proc/PID/status as a dict, or {} when the process is gone."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        pass
    return out


def alive(pid):
    """True while the process exists and is not a zombie."""
    st = proc_status(pid)
    return bool(st) and not st.get("State", "").startswith("Z")


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def children_by_comm(pid, name):
    return [c for c in children(pid) if comm(c) == name and alive(c)]


def workers(pid):
    return children_by_comm(pid, "mtad: worker")


def wait_for(pred, timeout=20.0, step=0.05, what="condition"):
    """Polls pred() until it returns a true value and returns that value;
    raises AssertionError at the timeout (a wait never fails silently)."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


def greet(port, host="127.0.0.1", timeout=10.0):
    """Connects, returns (local port, greeting bytes)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(512)
            if not chunk:
                break
            data += chunk
        return s.getsockname()[1], data


def parse_status(text):
    """mtactl status output -> (header dict, list of worker dicts)."""
    head, ws = {}, []
    for line in text.splitlines():
        if line.startswith("worker "):
            ws.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
        elif ": " in line:
            k, _, v = line.partition(": ")
            head[k] = v
    return head, ws
