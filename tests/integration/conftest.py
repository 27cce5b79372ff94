"""Shared fixtures for mtad's integration tests.

Every test gets its own directory under /dev/shm (tmpfs, like production),
a relay.yaml written from a dict, random free loopback ports, and an mtad
started in the foreground and stopped by its pid.  When the tests run as
root, mtad drops privileges to the system user 'mtad', created here if
missing.  The directory is root's and 0755: traversable, but not writable
by the workers' user (mtad refuses a pid file, control socket or routes db
in a directory the workers could change); a Maildir the workers deliver
into is made with worker_dir().
"""
import os
import pwd
import shutil
import signal
import smtplib
import socket
import subprocess
import tempfile
import time

import pytest

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


def worker_dir(path):
    """A directory the workers may write (a Maildir root): theirs when the
    tests run as root."""
    os.makedirs(path, exist_ok=True)
    if IS_ROOT:
        pw = pwd.getpwnam(USER)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


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


@pytest.fixture(scope="session", autouse=True)
def _system_user():
    ensure_user()


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="mtad-test-", dir="/dev/shm")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def mtad_factory(workdir):
    """Make (not start) an Mtad; every one made is stopped afterwards."""
    made = []

    def make(overrides=None, subdir=None):
        d = workdir
        if subdir:
            d = os.path.join(workdir, subdir)
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o755)
        m = Mtad(d, overrides)
        made.append(m)
        return m

    yield make
    for m in made:
        m.stop()


@pytest.fixture
def mtad(mtad_factory):
    """A started mtad with the default test config."""
    return mtad_factory().start()
