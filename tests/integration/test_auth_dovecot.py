"""SMTP AUTH answered by a real Dovecot (auth.backend: dovecot): Debian's
dovecot-core runs here with a config of its own in the test's directory
(`dovecot -F -c conf`, no protocols, only its auth service), a
passwd-file with a {SHA512-CRYPT} and a {PLAIN} user, its auth-client
unix socket and an auth inet_listener on loopback.

The unix socket is connected by mtad's master and passed to the worker
(the worker's sandbox makes no unix sockets); the inet listener the
worker connects itself.  Clients are smtplib and swaks over plaintext on
loopback (auth.allow_plaintext_loopback); 127.0.0.1 may relay, 127.0.0.2
only once authenticated."""
import base64
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from mtadtest import MTACTL, free_port, make_message, wait_for

DOVECOT = "/usr/sbin/dovecot"
MTAD = os.path.join(os.path.dirname(MTACTL), "mtad")

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT),
                                reason="dovecot-core not installed")


def b64(b):
    return base64.b64encode(b).decode()


class Dovecot:
    """A dovecot master with only its auth service, all under d."""

    def __init__(self, d):
        self.d = d
        os.makedirs(os.path.join(d, "run"), exist_ok=True)
        os.makedirs(os.path.join(d, "state"), exist_ok=True)
        self.sock = os.path.join(d, "auth-client")
        self.port = free_port()
        self.conf = os.path.join(d, "dovecot.conf")
        self.log = os.path.join(d, "dovecot.log")
        h = subprocess.run(["doveadm", "pw", "-s", "SHA512-CRYPT", "-p",
                            "s3cret pass"], capture_output=True, text=True,
                           check=True, timeout=20).stdout.strip()
        assert h.startswith("{SHA512-CRYPT}$6$"), h
        with open(os.path.join(d, "passwd"), "w") as f:
            f.write("alice:%s\nbob@example.org:{PLAIN}hunter2\n" % h)
        # root as the internal user: the test runs as root in its own
        # namespace and needs no dovecot system user
        with open(self.conf, "w") as f:
            f.write("""base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
protocols =
listen = 127.0.0.1
ssl = no
auth_mechanisms = plain login
auth_failure_delay = 0
default_internal_user = root
default_internal_group = root
default_login_user = root
passdb {{
  driver = passwd-file
  args = {d}/passwd
}}
userdb {{
  driver = static
  args = uid=root gid=root home={d}
}}
service auth {{
  unix_listener auth-client {{
    path = {sock}
    mode = 0600
  }}
  inet_listener auth-inet {{
    address = 127.0.0.1
    port = {port}
  }}
}}
""".format(d=d, sock=self.sock, port=self.port))
        self.proc = None

    def start(self):
        # a process group of its own: its auth process outlives the master
        # while clients are connected, and a stop stops them all
        self.proc = subprocess.Popen([DOVECOT, "-F", "-c", self.conf],
                                     stdout=subprocess.DEVNULL,
                                     stderr=open(self.log + ".err", "ab"),
                                     start_new_session=True)

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("dovecot exited: %s" % self.logs())
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.sock)
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return True
            except OSError:
                return False
        wait_for(up, timeout=15, what="dovecot's auth listeners")
        return self

    def logs(self):
        out = ""
        for p in (self.log, self.log + ".err"):
            try:
                out += open(p, errors="replace").read()
            except OSError:
                pass
        return out[-3000:]

    def stop(self):
        if self.proc is None:
            return
        pgid = self.proc.pid             # its own session: pgid == pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(5)

        def gone():
            try:
                os.killpg(pgid, 0)
                return False
            except ProcessLookupError:
                return True
        wait_for(gone, timeout=10, what="dovecot's processes gone")
        self.proc = None


@pytest.fixture
def dovecot(workdir):
    d = Dovecot(os.path.join(workdir, "dc"))
    d.start()
    yield d
    d.stop()


def start_mtad(mtad_factory, socket_spec, hole, auth=None):
    m = mtad_factory()
    m.cfg["server"]["workers"] = 1
    m.cfg["relay"] = {"allow_networks": ["127.0.0.1/32"]}
    m.cfg["routes"]["default"] = hole.route()
    m.cfg["auth"] = {"backend": "dovecot", "dovecot_socket": socket_spec,
                     "allow_plaintext_loopback": True,
                     "failure_delay": "10ms", "failure_delay_max": "40ms"}
    m.cfg["auth"].update(auth or {})
    m.write_config()
    m.start()
    return m


def smtp(m, source="127.0.0.2"):
    import smtplib
    s = smtplib.SMTP("127.0.0.1", m.port, timeout=10,
                     source_address=(source, 0))
    s.ehlo("client.test")
    return s


def auth_plain(m, user, pw, source="127.0.0.2"):
    s = smtp(m, source)
    code, text = s.docmd("AUTH", "PLAIN " + b64(b"\0" + user + b"\0" + pw))
    return s, code, text


def wait_auth_ready(m):
    """AUTH works once the worker's connection has its handshake."""
    def ok():
        s, code, _ = auth_plain(m, b"alice", b"s3cret pass")
        s.close()
        return code == 235
    wait_for(ok, timeout=15, what="AUTH through dovecot")


def test_plain_and_login(mtad_factory, dovecot, hole):
    m = start_mtad(mtad_factory, dovecot.sock, hole)
    m.wait_log("auth: dovecot %s: connected; mechanisms: PLAIN LOGIN"
               % dovecot.sock)
    wait_auth_ready(m)
    # smtplib: EHLO shows Dovecot's mechanisms; PLAIN (a {SHA512-CRYPT}
    # user), then relaying from an address that may not relay without it
    s = smtp(m)
    assert s.esmtp_features["auth"].split() == ["PLAIN", "LOGIN"]
    s.user, s.password = "alice", "s3cret pass"
    assert s.auth("PLAIN", s.auth_plain)[0] == 235
    assert s.sendmail("alice@example.org", ["rcpt@remote.test"],
                      make_message(1)) == {}
    s.quit()
    # LOGIN with Dovecot's own challenges (CONT) for a {PLAIN} user
    s = smtp(m)
    s.user, s.password = "bob@example.org", "hunter2"
    assert s.auth("LOGIN", s.auth_login)[0] == 235
    s.quit()
    # by hand: the 334s are Dovecot's
    s = smtp(m)
    code, text = s.docmd("AUTH", "LOGIN")
    assert (code, base64.b64decode(text)) == (334, b"Username:"), text
    code, text = s.docmd(b64(b"bob@example.org"))
    assert (code, base64.b64decode(text)) == (334, b"Password:"), text
    code, text = s.docmd(b64(b"wrong"))
    assert code == 535, (code, text)
    s.close()
    # a wrong PLAIN password and an unknown user fail
    s, code, _ = auth_plain(m, b"alice", b"nope")
    assert code == 535
    s.close()
    s, code, _ = auth_plain(m, b"mallory", b"x")
    assert code == 535
    s.close()
    text = m.wait_log("authenticated as bob@example.org (LOGIN)")
    assert "authenticated as alice (PLAIN)" in text
    assert re.search(r"failed for user bob@example.org \(LOGIN\), failure 1 "
                     r"of 5", text), text[-2000:]
    assert re.search(r"failed for user alice \(PLAIN\), failure 2 of 5", text)
    assert re.search(r"failed for user mallory \(PLAIN\), failure 3 of 5",
                     text)
    # an unadvertised mechanism
    s = smtp(m)
    assert s.docmd("AUTH", "CRAM-MD5")[0] == 504
    s.close()
    # swaks, both mechanisms
    for mech, user, pw, want in (("PLAIN", "alice", "s3cret pass", 0),
                                 ("LOGIN", "bob@example.org", "hunter2", 0),
                                 ("LOGIN", "bob@example.org", "bad", 28)):
        r = subprocess.run(["swaks", "--server", "127.0.0.1:%d" % m.port,
                            "--quit-after", "AUTH", "--auth", mech,
                            "--auth-user", user, "--auth-password", pw,
                            "--local-interface", "127.0.0.2"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == want, (mech, user, r.stdout[-1500:])


def test_requests_share_one_connection(mtad_factory, dovecot, hole):
    """Many exchanges at once on one worker's one connection, answered
    each to its own session (request ids)."""
    m = start_mtad(mtad_factory, dovecot.sock, hole)
    wait_auth_ready(m)
    results = []

    def one(i):
        good = i % 2 == 0
        # an address each: failures count per address
        s, code, _ = auth_plain(m, b"alice",
                                b"s3cret pass" if good else b"bad",
                                source="127.0.0.%d" % (10 + i))
        s.close()
        results.append((good, code))
    ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert sorted(results) == sorted((i % 2 == 0, 235 if i % 2 == 0 else 535)
                                     for i in range(16)), results
    # one connection for the worker: Dovecot counted one client
    assert m.log_text().count("auth: dovecot %s: connected" % dovecot.sock) \
        == 1


def test_failures_counted_and_banned(mtad_factory, dovecot, hole):
    """Dovecot's FAILs count as the file's: auth.max_failures (421), and
    toward limits.ban as 5xx replies."""
    m = start_mtad(mtad_factory, dovecot.sock, hole,
                   auth={"max_failures": 2})
    m.stop()
    m.cfg["limits"] = {"ban": {"errors": 2, "window": "1m",
                               "duration": "1h"}}
    m.write_config()
    m.start()
    wait_auth_ready(m)
    # the failure that reaches max_failures is answered 421 (and closes);
    # later AUTHs from the address get 421 unchecked, even the right one
    for want in (535, 421):
        s, code, _ = auth_plain(m, b"alice", b"bad", source="127.0.0.3")
        assert code == want
        s.close()
    s, code, text = auth_plain(m, b"alice", b"s3cret pass",
                               source="127.0.0.3")
    assert code == 421, (code, text)
    s.close()
    # a second 5xx (an unknown command) after the 535: banned at connect
    s = smtp(m, "127.0.0.3")
    assert s.docmd("BOGUS")[0] == 500
    s.close()
    s = socket.create_connection(("127.0.0.1", m.port), 10,
                                 source_address=("127.0.0.3", 0))
    s.settimeout(10)
    first = s.recv(512)
    s.close()
    assert first.startswith(b"421 4.7.0 mx.test.example Too many errors"), \
        first


def test_dovecot_down_then_back(mtad_factory, dovecot, hole):
    m = start_mtad(mtad_factory, dovecot.sock, hole)
    wait_auth_ready(m)
    dovecot.stop()
    m.wait_log("dovecot closed the connection")
    s, code, text = auth_plain(m, b"alice", b"s3cret pass")
    assert (code, text[:5]) == (454, b"4.7.0"), (code, text)
    s.close()
    # a 454 is not a guess: after more 454s than max_failures, the right
    # password still works once Dovecot is back
    for _ in range(6):
        s, code, _ = auth_plain(m, b"alice", b"s3cret pass")
        assert code == 454
        s.close()
    dovecot.start()
    wait_auth_ready(m)
    wait_for(lambda: m.log_text().count("auth: dovecot %s: connected"
                                        % dovecot.sock) == 2,
             what="the second connect in the log")


def test_inet_listener(mtad_factory, dovecot, hole):
    m = start_mtad(mtad_factory, "inet:127.0.0.1:%d" % dovecot.port, hole)
    wait_auth_ready(m)
    s, code, _ = auth_plain(m, b"bob@example.org", b"hunter2")
    assert code == 235
    s.close()
    s, code, _ = auth_plain(m, b"bob@example.org", b"hunter3")
    assert code == 535
    s.close()


class FakeAuth:
    """An auth-client socket that does Dovecot's handshake, then answers
    each AUTH with answer % id (None: never answers)."""

    def __init__(self, path, answer=None):
        self.path, self.answer = path, answer
        self.l = socket.socket(socket.AF_UNIX)
        self.l.bind(path)
        self.l.listen(4)
        self.conns = []
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            try:
                c, _ = self.l.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        try:
            c.sendall(b"VERSION\t1\t2\nMECH\tPLAIN\tplaintext\nSPID\t1\n"
                      b"CUID\t1\nCOOKIE\t00\nDONE\n")
            f = c.makefile("rb")
            for line in f:
                if line.startswith(b"AUTH\t") and self.answer is not None:
                    c.sendall(self.answer % int(line.split(b"\t")[1]))
        except OSError:
            pass

    def close(self):
        self.l.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


def test_timeout_is_454(mtad_factory, workdir, hole):
    mute = FakeAuth(os.path.join(workdir, "mute.sock"))
    try:
        m = start_mtad(mtad_factory, mute.path, hole,
                       auth={"dovecot_timeout": "300ms"})
        m.wait_log("connected; mechanisms: PLAIN")
        t0 = time.monotonic()
        s, code, text = auth_plain(m, b"alice", b"s3cret pass")
        took = time.monotonic() - t0
        assert (code, text[:5]) == (454, b"4.7.0"), (code, text)
        assert 0.25 < took < 5, took
        s.close()
        m.wait_log("no answer within auth.dovecot_timeout")
    finally:
        mute.close()


@pytest.mark.parametrize("answer,logged", [
    # a login that would write a header of its own into Received:
    (b"OK\t%d\tuser=evil\001nX-Injected: yes\n", "usable user name"),
    (b"OK\t%d\n", "usable user name"),
    # a challenge that is not base64 would reach the client as is
    (b"CONT\t%d\t334 fake\n", "a malformed line from dovecot"),
])
def test_bad_answers_are_not_logins(mtad_factory, workdir, hole, answer,
                                    logged):
    fake = FakeAuth(os.path.join(workdir, "fake.sock"), answer)
    try:
        m = start_mtad(mtad_factory, fake.path, hole,
                       auth={"received_header": True})
        m.wait_log("connected; mechanisms: PLAIN")
        s, code, text = auth_plain(m, b"alice", b"s3cret pass")
        assert (code, text[:5]) == (454, b"4.7.0"), (code, text)
        # not authenticated: relaying from 127.0.0.2 is still refused
        assert s.docmd("MAIL", "FROM:<evil@example.org>")[0] == 250
        assert s.docmd("RCPT", "TO:<x@remote.test>")[0] >= 500
        s.close()
        text = m.wait_log(logged)
        assert "authenticated as" not in text
    finally:
        fake.close()


def test_check_errors(mtad_factory, workdir):
    m = mtad_factory()
    base = dict(m.cfg)
    cases = [
        ({"backend": "ldap"}, r"relay\.yaml:\d+:\d+: auth\.backend: unknown "
         r"backend \"ldap\""),
        ({"backend": "dovecot"}, r"relay\.yaml:\d+:\d+: auth\.backend: "
         r"dovecot needs auth\.dovecot_socket"),
        ({"backend": "dovecot", "dovecot_socket": "run/auth-client"},
         r"relay\.yaml:\d+:\d+: auth\.dovecot_socket: run/auth-client: "
         r"expected an absolute path"),
        ({"backend": "dovecot", "dovecot_socket": "inet:localhost:12345"},
         r"relay\.yaml:\d+:\d+: auth\.dovecot_socket: inet:localhost:12345: "
         r"the address is not an IPv4 or IPv6 literal"),
        ({"backend": "dovecot", "dovecot_socket": "inet:127.0.0.1:0"},
         r"relay\.yaml:\d+:\d+: auth\.dovecot_socket: .*the port"),
        ({"dovecot_socket": "/run/dovecot/auth-client"},
         r"relay\.yaml:\d+:\d+: auth\.dovecot_socket: needs auth\.backend"),
    ]
    for auth, want in cases:
        cfg = dict(base)
        cfg["auth"] = auth
        m.write_config(cfg)
        r = subprocess.run([MTAD, "-t", "-c", m.cfg_path],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0, (auth, r.stdout)
        assert re.search(want, r.stderr), (auth, r.stderr)
    cfg = dict(base)
    cfg["auth"] = {"backend": "dovecot",
                   "dovecot_socket": "inet:[::1]:12345"}
    m.write_config(cfg)
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_socket_in_a_directory_others_may_change(mtad_factory, workdir, hole):
    """The master connects as root: not to a socket whose directory
    anyone could put a fake auth server in (every OK would be a login)."""
    d = os.path.join(workdir, "open")
    os.makedirs(d)
    os.chmod(d, 0o777)
    fake = FakeAuth(os.path.join(d, "auth.sock"),
                    b"OK\t%d\tuser=alice\n")
    try:
        m = start_mtad(mtad_factory, fake.path, hole)
        m.wait_log("directory writable by anyone")
        s, code, text = auth_plain(m, b"alice", b"anything")
        assert (code, text[:5]) == (454, b"4.7.0"), (code, text)
        s.close()
        assert "authenticated as" not in m.log_text()
        # the same server in a directory only root changes: connected
        os.chmod(d, 0o755)
        def ok():
            s, code, _ = auth_plain(m, b"alice", b"anything")
            s.close()
            return code == 235
        wait_for(ok, timeout=15, what="AUTH once the directory is root's")
    finally:
        fake.close()


def test_over_starttls(mtad_factory, dovecot, hole, workdir):
    """Without allow_plaintext_loopback AUTH waits for TLS (538 before,
    not in EHLO); over TLS Dovecot is told "secured" and says OK."""
    import smtplib
    import ssl
    from mtadtest import make_keyed_cert
    cert, key = make_keyed_cert(workdir, "server", "ec")
    m = mtad_factory()
    m.cfg["server"]["workers"] = 1
    m.cfg["tls"] = {"cert_file": cert, "key_file": key}
    m.cfg["relay"] = {"allow_networks": ["127.0.0.1/32"]}
    m.cfg["routes"]["default"] = hole.route()
    m.cfg["auth"] = {"backend": "dovecot", "dovecot_socket": dovecot.sock}
    m.write_config()
    m.start()
    m.wait_log("auth: dovecot %s: connected" % dovecot.sock)
    s = smtplib.SMTP("127.0.0.1", m.port, timeout=10,
                     source_address=("127.0.0.2", 0))
    s.ehlo("client.test")
    assert "auth" not in s.esmtp_features
    assert s.docmd("AUTH", "PLAIN " + b64(b"\0alice\0s3cret pass"))[0] == 538
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s.starttls(context=ctx)
    s.ehlo("client.test")
    assert s.esmtp_features["auth"].split() == ["PLAIN", "LOGIN"]
    assert s.login("alice", "s3cret pass")[0] == 235
    assert s.sendmail("alice@example.org", ["rcpt@remote.test"],
                      make_message(1)) == {}
    s.quit()
    m.wait_log("authenticated as alice (PLAIN)")
