"""The one helper module of mtad's integration tests.

What every test file shares: paths to the binaries, free loopback ports,
the relay.yaml writer and the Mtad process wrapper; a raw line SMTP client
for tests that control the bytes on the wire; message, send and spool
helpers; /proc inspection; a real DNS server (nsd, and unbound for a
DNSSEC-validated zone) and HAProxy for the tests that need them.
Fixtures live in conftest.py.

Every wait here raises AssertionError when it times out (wait_for(),
Mtad.wait_ready(), Mtad.wait_log(), Sink.wait_for()): a test cannot pass
after timing out.  Everything is bounded in time and count; nothing here
kills a process that the test did not start.
"""
import hashlib
import os
import pwd
import random
import re
import select
import shutil
import signal
import smtplib
import socket
import ssl
import struct
import subprocess
import threading
import time

from sink import Sink, tls_server_context  # noqa: F401 (the tests take them from here)


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


def worker_dir(path):
    """A directory the workers may write (a Maildir root): theirs when the
    tests run as root."""
    os.makedirs(path, exist_ok=True)
    if IS_ROOT:
        pw = pwd.getpwnam(USER)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


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


class ScriptedPeer:
    """The listening half of the tests' scripted SMTP next hops: a socket on
    127.0.0.1 (a free port), an accept thread that hands each connection to
    session(conn), one at a time or (threaded) each on a thread of its own.
    An exception from session() is kept in errors (the test asserts it is
    empty) unless the peer is stopping; with eof_ok a client that closes
    (EOFError) is no error.  connections counts the accepted ones.  A
    subclass sets its own attributes before calling __init__, which starts
    serving; session() calls swap(old, new) when it wraps a connection in
    TLS, so that stop() can wake a read blocked on the new one."""

    def __init__(self, threaded=False, eof_ok=False, join_timeout=25.0):
        self.threaded, self.eof_ok = threaded, eof_ok
        self.join_timeout = join_timeout
        self.errors = []
        self.connections = 0
        self.lock = threading.Lock()
        self.open = {}                  # accepted socket -> the one in use
        self.stopping = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def route(self):
        return "smtp:[127.0.0.1]:%d" % self.port

    def session(self, conn):
        raise NotImplementedError

    def swap(self, old, new):
        with self.lock:
            for k, v in self.open.items():
                if v is old:
                    self.open[k] = new

    def stop(self):
        self.stopping = True
        with self.lock:
            for c in self.open.values():
                try:
                    c.shutdown(socket.SHUT_RDWR)    # wake a blocked read
                except OSError:
                    pass
        self.thread.join(timeout=self.join_timeout)
        self.sock.close()

    def _serve(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            with self.lock:
                self.connections += 1
                self.open[conn] = conn
            if self.threaded:
                threading.Thread(target=self._run, args=(conn,),
                                 daemon=True).start()
            else:
                self._run(conn)

    def _run(self, conn):
        try:
            self.session(conn)
        except EOFError:
            if not self.eof_ok and not self.stopping:
                with self.lock:
                    self.errors.append("EOFError: the client closed")
        except Exception as e:          # kept; the test checks errors
            if not self.stopping:
                with self.lock:
                    self.errors.append(repr(e))
        finally:
            with self.lock:
                cur = self.open.pop(conn, conn)
            cur.close()
            conn.close()


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


def tail_logs(d, names):
    """The last 2,000 bytes of each of d's log files that exist, joined."""
    out = []
    for n in names:
        p = os.path.join(d, n)
        if os.path.exists(p):
            with open(p, errors="replace") as f:
                out.append(f.read()[-2000:])
    return " | ".join(out)


def stop_daemon(d):
    """Stop the daemon d started (d.proc, by its PID; d.log its open log
    file): SIGTERM, then SIGKILL after 10 s."""
    if d.proc is None:
        return
    if d.proc.poll() is None:
        os.kill(d.proc.pid, signal.SIGTERM)
        try:
            d.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(timeout=10)
    d.log.close()
    d.proc = None


# ---- DNS: nsd with the test zone, SERVFAIL and silent servers ----

def sbin(name):
    """A Debian daemon binary: /usr/sbin is not on every user's PATH."""
    return shutil.which(name) or os.path.join("/usr/sbin", name)


NSD = sbin("nsd")
ZONE = "mtad.test"

# The test zone.  What each name is for:
#   multi      MX 10 mx1, 10 mx2 (equal), 20 mx3     -> .11 .12 .13
#   one        MX 10 mx.one                          -> .21 (TLSA on it)
#   nullmx     MX 0 .                                (RFC 7505)
#   alias      CNAME multi; alias2 CNAME alias       (CNAME chain to an MX)
#   cnamehost  MX 10 mxalias.cnamehost, a CNAME to real.cnamehost -> .31
#   aonly      A 127.0.0.41, no MX                   (implicit MX)
#   dual       MX 10 mx.dual: A 127.0.0.52 and AAAA ::1
#   v6only     MX 10 mx.v6only: AAAA ::1 only
#   badhost    MX 10 nohost (NXDOMAIN host)
#   short      MX 10 mx.one with TTL 2               (cache expiry)
#   many       MX 10 m1..m4, each with 2 addresses   (address limit)
#   txt        TXT "v=STSv1; id=20261201"
# Simulated providers (tests/integration/shapesim.py listens there; sites
# for traffic shaping: domains with the same MX set share one site):
#   gmail, googlemail, workspace  MX 10 mx1.google, 10 mx2.google
#                                 -> 127.0.1.1, 127.0.1.2 (one site)
#   outlook, hotmail  MX 10 mx.outlook  -> 127.0.2.1
#   yahoo             MX 10 mx.yahoo    -> 127.0.3.1
#   open              MX 10 mx.open     -> 127.0.4.1 (no limits)
#   anything else: NXDOMAIN
ZONE_TEXT = """$ORIGIN mtad.test.
$TTL 300
@          IN SOA ns.mtad.test. hostmaster.mtad.test. 1 3600 600 86400 60
@          IN NS  ns
ns         IN A   127.0.0.1
multi      IN MX  10 mx1.multi
multi      IN MX  10 mx2.multi
multi      IN MX  20 mx3.multi
mx1.multi  IN A   127.0.0.11
mx2.multi  IN A   127.0.0.12
mx3.multi  IN A   127.0.0.13
one        IN MX  10 mx.one
mx.one     IN A   127.0.0.21
_25._tcp.mx.one IN TLSA 3 1 1 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
nullmx     IN MX  0 .
alias      IN CNAME multi
alias2     IN CNAME alias
cnamehost  IN MX  10 mxalias.cnamehost
mxalias.cnamehost IN CNAME real.cnamehost
real.cnamehost IN A 127.0.0.31
aonly      IN A   127.0.0.41
dual       IN MX  10 mx.dual
mx.dual    IN A   127.0.0.52
mx.dual    IN AAAA ::1
v6only     IN MX  10 mx.v6only
mx.v6only  IN AAAA ::1
badhost    IN MX  10 nohost
short 2    IN MX  10 mx.one
many       IN MX  10 m1.many
many       IN MX  10 m2.many
many       IN MX  10 m3.many
many       IN MX  10 m4.many
m1.many    IN A   127.0.0.61
m1.many    IN A   127.0.0.62
m2.many    IN A   127.0.0.63
m2.many    IN A   127.0.0.64
m3.many    IN A   127.0.0.65
m3.many    IN A   127.0.0.66
m4.many    IN A   127.0.0.67
m4.many    IN A   127.0.0.68
txt        IN TXT "v=STSv1; id=20261201"
gmail      IN MX  10 mx1.google
gmail      IN MX  10 mx2.google
googlemail IN MX  10 mx1.google
googlemail IN MX  10 mx2.google
workspace  IN MX  10 mx1.google
workspace  IN MX  10 mx2.google
mx1.google IN A   127.0.1.1
mx2.google IN A   127.0.1.2
outlook    IN MX  10 mx.outlook
hotmail    IN MX  10 mx.outlook
mx.outlook IN A   127.0.2.1
yahoo      IN MX  10 mx.yahoo
mx.yahoo   IN A   127.0.3.1
open       IN MX  10 mx.open
mx.open    IN A   127.0.4.1
"""


def free_udp_port(host="127.0.0.1"):
    """A port free for both UDP and TCP on host (nsd binds both)."""
    for _ in range(200):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            u.bind((host, 0))
            port = u.getsockname()[1]
            try:
                t.bind((host, port))
            except OSError:
                continue
            return port
        finally:
            u.close()
            t.close()
    raise RuntimeError("no free UDP+TCP port on %s" % host)


def build_query(name, qtype, qid=None, ad=False):
    """A DNS query packet (RD=1, and AD=1 when ad) for name/qtype."""
    qid = random.randrange(65536) if qid is None else qid
    q = struct.pack(">HHHHHH", qid, 0x0120 if ad else 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", qtype, 1)


def query(addr, name, qtype, timeout=1.0, ad=False):
    """Send one query over UDP; the raw answer, or None on timeout."""
    host, port = addr.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        pkt = build_query(name, qtype, ad=ad)
        s.sendto(pkt, (host, int(port)))
        try:
            data, _ = s.recvfrom(65535)
        except socket.timeout:
            return None
        return data if data[:2] == pkt[:2] else None
    finally:
        s.close()


def question_end(pkt):
    """Offset just past the (uncompressed) question of a query, or None."""
    i = 12
    while i < len(pkt) and pkt[i] != 0:
        if pkt[i] & 0xc0:
            return None
        i += pkt[i] + 1
    i += 5
    return i if i <= len(pkt) else None


def rcode(answer):
    return answer[3] & 0x0f


def _skip_name(pkt, i):
    """Offset past the (possibly compressed) name at i."""
    while True:
        n = pkt[i]
        if n & 0xc0 == 0xc0:
            return i + 2
        if n == 0:
            return i + 1
        i += n + 1


def answer_rdata(answer, qtype):
    """The RDATA (bytes) of every answer-section record of qtype."""
    qd, an = struct.unpack(">HH", answer[4:8])
    i = 12
    for _ in range(qd):
        i = _skip_name(answer, i) + 4
    out = []
    for _ in range(an):
        i = _skip_name(answer, i)
        t, _c, _ttl, n = struct.unpack(">HHIH", answer[i:i + 10])
        i += 10
        if t == qtype:
            out.append(answer[i:i + n])
        i += n
    return out


class Nsd:
    """nsd authoritative for ZONE on 127.0.0.1:port, in its own dir."""

    def __init__(self, workdir, zone_text=ZONE_TEXT, zone=ZONE):
        self.dir = workdir
        self.zone = zone
        self.zone_text = zone_text
        self.port = None
        self.proc = None

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def _write(self):
        zf = os.path.join(self.dir, "zone")
        with open(zf, "w") as f:
            f.write(self.zone_text)
        conf = os.path.join(self.dir, "nsd.conf")
        with open(conf, "w") as f:
            f.write("""server:
    ip-address: 127.0.0.1@%(port)d
    port: %(port)d
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
    zonefile: "%(zf)s"
""" % {"port": self.port, "dir": self.dir, "zone": self.zone, "zf": zf})
        return conf

    def start(self, timeout=20.0):
        last = None
        for _ in range(3):          # another process may take the port
            self.port = free_udp_port()
            conf = self._write()
            check = subprocess.run([sbin("nsd-checkconf"), conf],
                                   capture_output=True, text=True)
            if check.returncode != 0:
                raise RuntimeError("nsd.conf: %s" % check.stderr)
            self.log = open(os.path.join(self.dir, "nsd.stderr"), "w")
            self.proc = subprocess.Popen([NSD, "-d", "-c", conf],
                                         stdout=self.log, stderr=self.log)
            try:
                self._wait_ready(timeout)
                return self
            except RuntimeError as e:
                last = e
                self.stop()
        raise last

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("nsd exited with %s: %s" % (
                    self.proc.returncode, self._logs()))
            ans = query(self.addr, self.zone, 6, timeout=0.2)
            if ans is not None and rcode(ans) == 0 and ans[7] > 0:
                return
            time.sleep(0.05)
        raise RuntimeError("nsd on %s not answering for %s after %.0fs: %s" % (
            self.addr, self.zone, timeout, self._logs()))

    def _logs(self):
        return tail_logs(self.dir, ("nsd.stderr", "nsd.log"))

    def stop(self):
        stop_daemon(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class ServfailServer:
    """Answers every UDP query with SERVFAIL (rcode 2), question echoed.
    Counts the queries it saw (for the joining test)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def _run(self):
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            if len(data) < 12:
                continue
            end = question_end(data)
            if end is None:
                continue
            self.count += 1
            flags = 0x8000 | (data[2] & 0x01) << 8 | 0x80 | 2   # QR RD RA SERVFAIL
            self.sock.sendto(data[:2] + struct.pack(">HHHHH", flags, 1, 0, 0, 0)
                             + data[12:end], peer)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            raise RuntimeError("SERVFAIL server thread did not stop")
        self.sock.close()


class SilentServer:
    """A bound UDP (and TCP, listening) port that never answers: lookups
    against it can only time out.  Queries pile up unread in the kernel."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def stop(self):
        self.sock.close()


class DnsServers:
    def __init__(self, workdir):
        self.nsd_server = Nsd(workdir).start()
        self.servfail_server = ServfailServer()
        self.silent_server = SilentServer()
        self.nsd = self.nsd_server.addr
        self.servfail = self.servfail_server.addr
        self.silent = self.silent_server.addr

    def stop(self):
        self.nsd_server.stop()
        self.servfail_server.stop()
        self.silent_server.stop()


class Unbound:
    """Debian's unbound as a validating resolver on 127.0.0.1:port that
    sends every query for ZONE to the given nsd (a stub zone) and holds
    the zone's DS as its trust anchor, so validated answers carry AD=1."""

    def __init__(self, workdir, stub_addr, anchor_file, zone=ZONE,
                 stubs=()):
        self.dir = workdir
        self.stub = stub_addr.replace(":", "@")
        self.anchor = anchor_file
        self.zone = zone
        # more (zone, "ip:port") stubs, without a trust anchor: insecure
        self.stubs = list(stubs)
        self.port = None
        self.proc = None

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def _write(self):
        conf = os.path.join(self.dir, "unbound.conf")
        with open(conf, "w") as f:
            f.write("""server:
    interface: 127.0.0.1@%(port)d
    port: %(port)d
    do-ip6: no
    username: ""
    chroot: ""
    directory: "%(dir)s"
    pidfile: "%(dir)s/unbound.pid"
    use-syslog: no
    logfile: "%(dir)s/unbound.log"
    verbosity: 1
    val-log-level: 2
    num-threads: 1
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    local-zone: "test." nodefault
    module-config: "validator iterator"
    trust-anchor-file: "%(anchor)s"
    qname-minimisation: no
remote-control:
    control-enable: no
stub-zone:
    name: "%(zone)s"
    stub-addr: %(stub)s
""" % {"port": self.port, "dir": self.dir, "anchor": self.anchor,
       "zone": self.zone, "stub": self.stub})
            for name, addr in self.stubs:
                f.write('stub-zone:\n    name: "%s"\n    stub-addr: %s\n'
                        % (name, addr.replace(":", "@")))
        return conf

    def start(self, timeout=20.0):
        last = None
        for _ in range(3):
            self.port = free_udp_port()
            conf = self._write()
            check = subprocess.run([sbin("unbound-checkconf"), conf],
                                   capture_output=True, text=True)
            if check.returncode != 0:
                raise RuntimeError("unbound.conf: %s%s" % (check.stdout,
                                                            check.stderr))
            self.log = open(os.path.join(self.dir, "unbound.stderr"), "w")
            self.proc = subprocess.Popen(
                [sbin("unbound"), "-d", "-c", conf], stdout=self.log,
                stderr=self.log)
            try:
                self._wait_ready(timeout)
                return self
            except RuntimeError as e:
                last = e
                self.stop()
        raise last

    def _wait_ready(self, timeout):
        """Ready when it answers for the zone's SOA with AD=1 (so the
        trust anchor and the signatures work, not only the socket)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("unbound exited with %s: %s" % (
                    self.proc.returncode, self._logs()))
            ans = query(self.addr, self.zone, 6, timeout=0.5, ad=True)
            if ans is not None and rcode(ans) == 0 and ans[3] & 0x20:
                return
            time.sleep(0.05)
        raise RuntimeError("unbound on %s gave no validated answer for %s "
                           "after %.0fs: %s" % (self.addr, self.zone, timeout,
                                                self._logs()))

    def _logs(self):
        return tail_logs(self.dir, ("unbound.stderr", "unbound.log"))

    def stop(self):
        stop_daemon(self)


def sign_zone(workdir, zone_text=ZONE_TEXT, zone=ZONE, bogus=()):
    """Sign zone_text with a fresh KSK and ZSK (ldns-keygen, ldns-signzone).
    Returns (signed zone text, path of a trust-anchor file with the KSK's
    DS).  Names in bogus get their RRSIGs' signature bytes flipped, so a
    validator must refuse them."""
    def keygen(*extra):
        r = subprocess.run(["ldns-keygen", "-a", "ECDSAP256SHA256", *extra,
                            zone], cwd=workdir, capture_output=True,
                           text=True, check=True)
        return r.stdout.strip()
    ksk = keygen("-k")
    zsk = keygen()
    zf = os.path.join(workdir, "zone.unsigned")
    with open(zf, "w") as f:
        f.write(zone_text)
    subprocess.run(["ldns-signzone", "-o", zone, "-f",
                    os.path.join(workdir, "zone.signed"), zf, zsk, ksk],
                   cwd=workdir, capture_output=True, text=True, check=True)
    with open(os.path.join(workdir, "zone.signed")) as f:
        signed = f.read()
    if bogus:
        lines = []
        for line in signed.splitlines():
            f = line.split()
            if len(f) > 4 and f[3] == "RRSIG" and f[0].rstrip(".") in [
                    "%s.%s" % (b, zone) for b in bogus]:
                sig = f[-1]
                f[-1] = ("B" if sig[0] != "B" else "C") + sig[1:]
                line = "\t".join(f)
            lines.append(line)
        signed = "\n".join(lines) + "\n"
    anchor = os.path.join(workdir, "anchor.ds")
    shutil.copy(os.path.join(workdir, ksk + ".ds"), anchor)
    return signed, anchor


class SignedDns:
    """The test zone signed, served by nsd, validated by unbound: point
    dns.servers at .resolver and answers for ZONE carry AD=1 (names in
    bogus fail validation: SERVFAIL).  extra: more records for ZONE (zone
    file lines relative to it, e.g. TLSA records made at set-up).
    unsigned: (zone, zone text) served unsigned by a second nsd that the
    same unbound asks: its answers are insecure (AD=0), as for any zone
    without a chain of trust."""

    def __init__(self, workdir, bogus=("bogus",), extra="", unsigned=None):
        zone_text = ZONE_TEXT + "bogus      IN MX  10 mx.one\n" + extra
        os.makedirs(os.path.join(workdir, "nsd"), exist_ok=True)
        os.makedirs(os.path.join(workdir, "unbound"), exist_ok=True)
        signed, anchor = sign_zone(workdir, zone_text, bogus=bogus)
        self.nsd_server = Nsd(os.path.join(workdir, "nsd"), signed).start()
        self.plain_server = None
        stubs = []
        try:
            if unsigned is not None:
                os.makedirs(os.path.join(workdir, "plain"), exist_ok=True)
                self.plain_server = Nsd(os.path.join(workdir, "plain"),
                                        unsigned[1], zone=unsigned[0]).start()
                stubs.append((unsigned[0], self.plain_server.addr))
            self.unbound = Unbound(os.path.join(workdir, "unbound"),
                                   self.nsd_server.addr, anchor,
                                   stubs=stubs).start()
        except Exception:
            if self.plain_server is not None:
                self.plain_server.stop()
            self.nsd_server.stop()
            raise
        self.resolver = self.unbound.addr
        self.nsd = self.nsd_server.addr

    def stop(self):
        self.unbound.stop()
        if self.plain_server is not None:
            self.plain_server.stop()
        self.nsd_server.stop()


def tlsa_record(cert, usage=3, selector=1, mtype=1):
    """The TLSA RDATA "usage selector mtype hex" (RFC 6698 2) of the PEM
    certificate file cert: selector 0 = the whole certificate, 1 = its
    SubjectPublicKeyInfo; mtype 0 = the data itself, 1 = SHA2-256,
    2 = SHA2-512.  Made with openssl(1), independently of mtad's code."""
    der = subprocess.run(["openssl", "x509", "-in", cert, "-outform", "DER"],
                         check=True, capture_output=True, timeout=60).stdout
    if selector == 1:
        pub = subprocess.run(["openssl", "x509", "-in", cert, "-noout",
                              "-pubkey"], check=True, capture_output=True,
                             timeout=60).stdout
        der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"],
                             input=pub, check=True, capture_output=True,
                             timeout=60).stdout
    if mtype == 1:
        data = hashlib.sha256(der).hexdigest()
    elif mtype == 2:
        data = hashlib.sha512(der).hexdigest()
    else:
        data = der.hex()
    return "%d %d %d %s" % (usage, selector, mtype, data)


# ---- scale-out: PROXY headers, HAProxy, nodes ----

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


def v1_header(src, sport, dst="127.0.0.1", dport=25):
    fam = "TCP6" if ":" in src else "TCP4"
    return ("PROXY %s %s %s %d %d\r\n" % (fam, src, dst, sport,
                                          dport)).encode()


def v2_header(src, sport, dst="127.0.0.1", dport=25, tlv=b""):
    sig = b"\r\n\r\n\x00\r\nQUIT\n"
    block = (socket.inet_aton(src) + socket.inet_aton(dst) +
             struct.pack("!HH", sport, dport) + tlv)
    return sig + bytes([0x21, 0x11]) + struct.pack("!H", len(block)) + block


def recv_until_eof(sock):
    """Everything until the peer closes (the socket timeout raises)."""
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk


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
        wait_for(lambda: _dead(k), timeout=10, what="child %d gone" % k)


def _dead(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


# ---- TLS: certificates by key type, TLS records, a memory-BIO client ----

TCP_INFO = getattr(socket, "TCP_INFO", 11)
TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", 12)
# struct tcp_info (linux/tcp.h): tcpi_segs_out is the u32 at byte 136
# (after 8 u8, 24 u32 and 4 u64: bytes_acked .. and pacing/max_pacing,
# bytes_received); present since Linux 4.2.
TCPI_SEGS_OUT = 136


def make_keyed_cert(d, name, kind, days=30):
    """A self-signed certificate and key in d: kind "rsa" (2048) or "ec"
    (P-256).  Returns (cert, key)."""
    cert = os.path.join(d, name + ".crt")
    key = os.path.join(d, name + ".key")
    newkey = (["-newkey", "rsa:2048"] if kind == "rsa" else
              ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
    subprocess.run(["openssl", "req", "-x509", *newkey, "-nodes",
                    "-keyout", key, "-out", cert, "-days", str(days),
                    "-subj", "/CN=%s.test.example" % name],
                   check=True, capture_output=True, timeout=120)
    os.chmod(cert, 0o644)
    os.chmod(key, 0o600)
    return cert, key


class TestCA:
    """A certificate authority made at set-up with openssl(1), for TLS
    tests: ca.cert is the PEM to give as tls.ca_file; issue() makes leaf
    certificates signed by it.  Shared by the outbound TLS tests (plain
    STARTTLS, DANE, MTA-STS, REQUIRETLS): use this, not another CA."""

    def __init__(self, d, name="mtad Test CA", kind="ec"):
        self.dir = d
        self.cert = os.path.join(d, "ca.crt")
        self.key = os.path.join(d, "ca.key")
        self.kind = kind
        _openssl("req", "-x509", *_newkey(kind), "-nodes", "-keyout",
                 self.key, "-out", self.cert, "-days", "30", "-subj",
                 "/CN=%s" % name, "-addext",
                 "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        os.chmod(self.cert, 0o644)
        self._n = 0

    def issue(self, names, days=30, kind=None):
        """A leaf for names (DNS names or IP addresses; the first is the
        CN).  Returns (chain, key): chain is the leaf then the CA, PEM."""
        self._n += 1
        base = os.path.join(self.dir, "leaf%d" % self._n)
        key, csr, crt = base + ".key", base + ".csr", base + ".crt"
        chain, ext = base + ".chain.pem", base + ".ext"
        _openssl("req", *_newkey(kind or self.kind), "-nodes", "-keyout",
                 key, "-out", csr, "-subj", "/CN=%s" % names[0])
        sans = ",".join(("IP:%s" if re.match(r"^[0-9.:]+$", n) else
                         "DNS:%s") % n for n in names)
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\n"
                    "extendedKeyUsage=serverAuth\n" % sans)
        args = ["x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey",
                self.key, "-CAcreateserial", "-out", crt, "-extfile", ext]
        args += ["-days", str(days)]
        _openssl(*args)
        with open(chain, "w") as out:
            for p in (crt, self.cert):
                with open(p) as f:
                    out.write(f.read())
        os.chmod(chain, 0o644)
        os.chmod(key, 0o644)
        return chain, key


def make_test_ca(d, name="mtad Test CA"):
    """A TestCA in d (see there)."""
    return TestCA(d, name)


def issue_cert(ca, names, **kw):
    """Shorthand for ca.issue(names): (chain, key)."""
    return ca.issue(names, **kw)


def _newkey(kind):
    return (["-newkey", "rsa:2048"] if kind == "rsa" else
            ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])


def _openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), r.stderr))
    return r.stdout


def cert_der(path):
    with open(path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def segs_out(sock):
    """Segments this socket has sent (data and pure ACKs alike)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 256)
    assert len(info) >= TCPI_SEGS_OUT + 4, "tcp_info too short"
    return struct.unpack_from("I", info, TCPI_SEGS_OUT)[0]


def records(data):
    """Split raw TLS bytes into (content type, length) of whole records;
    returns (list, leftover bytes)."""
    out = []
    while len(data) >= 5:
        ctype, _ver, n = struct.unpack("!BHH", data[:5])
        if len(data) < 5 + n:
            break
        out.append((ctype, n))
        data = data[5 + n:]
    return out, data


class BioClient:
    """STARTTLS over a plain socket through memory BIOs, so the test
    decides what goes out in which segment and sees each record that
    comes in."""

    def __init__(self, port, ctx, timeout=20.0):
        self.sock = socket.create_connection(("127.0.0.1", port),
                                             timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.inb, self.outb = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.ctx = ctx
        self.tls = None
        self.raw = b""              # bytes of a partial record
        self.recs = []              # (type, length) of every record seen

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def recv_line_plain(self):
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = self.sock.recv(4096)
            assert chunk, "closed in clear text"
            data += chunk
        return data

    def starttls(self, session=None):
        """Greeting, STARTTLS, then the handshake up to the moment the
        client's last flight (its Finished) waits in outb, unsent."""
        assert self.recv_line_plain().startswith(b"220 ")
        self.sock.sendall(b"STARTTLS\r\n")
        assert self.recv_line_plain().startswith(b"220 2.0.0")
        self.tls = self.ctx.wrap_bio(self.inb, self.outb, session=session)
        for _ in range(50):
            try:
                self.tls.do_handshake()
                return
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outb.read())
                self.feed(self.wait_data())
        raise AssertionError("handshake did not finish in 50 rounds")

    def wait_data(self):
        r, _, _ = select.select([self.sock], [], [], self.timeout)
        assert r, "nothing from the server in %ss" % self.timeout
        data = self.sock.recv(65536)
        assert data, "closed by the server"
        return data

    def feed(self, data):
        self.inb.write(data)
        recs, self.raw = records(self.raw + data)
        self.recs += recs

    def read_reply(self, nlines_last=1):
        """Application bytes up to and including nlines_last final reply
        lines ("ddd " lines)."""
        got = b""
        while True:
            try:
                got += self.tls.read(65536)
            except ssl.SSLWantReadError:
                pass
            finals = [l for l in got.split(b"\r\n") if l[3:4] == b" "]
            if len(finals) >= nlines_last and got.endswith(b"\r\n"):
                return got
            self.feed(self.wait_data())


def tree_copy(dst, binaries=False):
    """A copy of the real tree at dst, never the tree itself, for a test
    that plants something in it: its sources, and BUILD's objects and
    libraries (with the binaries too when binaries) with their times, so
    that make there rebuilds only what the test changes."""
    top = ("build", "build-asan", "build-fuzz", ".git", "var",
           os.path.basename(BUILD))

    def sources(d, names):
        return [n for n in names if n == "__pycache__" or
                (os.path.samefile(d, ROOT) and n in top)]

    def objects(d, names):
        return [n for n in names if not os.path.isdir(os.path.join(d, n))
                and not n.endswith((".o", ".d", ".a"))]

    shutil.copytree(ROOT, dst, symlinks=True, ignore=sources)
    shutil.copytree(BUILD, os.path.join(dst, os.path.basename(BUILD)),
                    symlinks=True, ignore=None if binaries else objects)
    return dst


def make_in(root, *args, timeout=240, **kw):
    """make ARGS in root with BUILD's directory name, as a make of its own
    (not a sub-make of the `make test` that may be running this suite)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    cmd = ["make", "-s", "--no-print-directory", *args,
           "BUILD=" + os.path.basename(BUILD)]
    if kw:
        return subprocess.Popen(cmd, cwd=root, env=env, **kw)
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)
