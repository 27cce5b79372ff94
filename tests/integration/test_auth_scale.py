"""AUTH that scales, against a real mtad: password hashes run off the
worker's event loop (other sessions on the same worker are answered while
they run), and the failure count of a client address is one count for the
node, whichever worker a connection lands on.

AUTH in clear text on loopback (auth.allow_plaintext_loopback), so the
sessions are plain sockets; the hash is yescrypt at a raised cost, so that
one check takes tens of milliseconds."""
import base64
import ctypes
import os
import re
import select
import socket
import struct

from mtadtest import Client, wait_for

CONNECT = re.compile(r"mtad\[(\d+)\]: [^:]*: connect from \[([0-9.]+)\]:(\d+)")


def yescrypt(password, cost=7):
    """A yescrypt hash from libxcrypt (Python's crypt module makes no
    "$y$" salt); cost 7 is four times libxcrypt's default."""
    lib = ctypes.CDLL("libcrypt.so.1")
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong,
                                  ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$y$", cost, None, 0)
    return lib.crypt(password.encode(), salt).decode()


def plain(user, password):
    return "AUTH PLAIN " + base64.b64encode(
        ("\0%s\0%s" % (user, password)).encode()).decode()


def start(mtad_factory, workdir, workers, auth=None):
    pw = os.path.join(workdir, "passwd")
    with open(pw, "w") as f:
        f.write("alice:%s\n" % yescrypt("s3cret pass"))
    os.chmod(pw, 0o600)
    m = mtad_factory()
    m.cfg["server"]["workers"] = workers
    m.cfg["limits"] = {"max_connections_per_ip": 200}
    m.cfg["auth"] = {"password_file": pw, "allow_plaintext_loopback": True,
                     "failure_delay": "0s", "max_failures": 50}
    m.cfg["auth"].update(auth or {})
    m.write_config()
    m.start()
    return m


def readable_now(c):
    return bool(c.buf) or bool(select.select([c.sock], [], [], 0)[0])


def test_other_sessions_are_answered_while_hashes_run(mtad_factory,
                                                       workdir):
    """Six wrong AUTHs from six addresses are in the worker's sockets
    before a NOOP on a seventh session: the NOOP is answered before any
    of the AUTHs.  Inline hashing (the loop running crypt) answers the
    first AUTH read before it reads the NOOP.  An ordering check, not a
    timing bound: the NOOP needs one loop turn, each hash tens of ms of a
    thread."""
    m = start(mtad_factory, workdir, workers=1)
    guessers = []
    for i in range(6):
        c = Client(m.port, source="127.0.0.%d" % (10 + i), timeout=30)
        c.greet()
        guessers.append(c)
    probe = Client(m.port, source="127.0.0.20", timeout=30)
    probe.greet()
    for c in guessers:
        c.send(plain("alice", "wrong") + "\r\n")
    r = probe.cmd("NOOP")
    assert r.code == 250, r
    early = [i for i, c in enumerate(guessers) if readable_now(c)]
    assert early == [], "AUTH answered before the NOOP: %r" % early
    # every AUTH is still answered, each with its own 535
    for c in guessers:
        assert c.reply().code == 535
    assert probe.cmd("NOOP").code == 250
    for c in guessers + [probe]:
        c.close()


def worker_of(m, clients):
    """{client: worker pid} from the connect lines in the log."""
    want = {c.local_port: c for c in clients}

    def find():
        got = {}
        for pid, _ip, port in CONNECT.findall(m.log_text()):
            if int(port) in want:
                got[want[int(port)]] = int(pid)
        return got if len(got) == len(want) else None
    return wait_for(find, what="the connect lines of %d sessions" % len(want))


def test_failure_count_is_shared_by_the_workers(mtad_factory, workdir):
    """max_failures 4 with 2 workers: the failures of one address add up
    over connections on both workers, so the fourth is the last checked
    and later AUTHs on either worker get 421 at once.  A count per worker
    would let each worker take 4 guesses."""
    m = start(mtad_factory, workdir, workers=2, auth={"max_failures": 4})
    ip = "127.0.0.5"
    conns, by = [], {}
    # a burst of connections spreads over both workers (each accepts
    # while the other is busy); more bursts until both hold three
    for _ in range(10):
        burst = [Client(m.port, source=ip, timeout=30) for _ in range(16)]
        for c in burst:
            c.greet()
        conns += burst
        by = {}
        for c, pid in worker_of(m, conns).items():
            by.setdefault(pid, []).append(c)
        if len(by) == 2 and min(len(v) for v in by.values()) >= 3:
            break
    assert len(by) == 2 and min(len(v) for v in by.values()) >= 3, \
        "connections did not spread over the two workers: %r" % \
        {p: len(v) for p, v in by.items()}
    a, b = by.values()
    order = [a[0], b[0], a[1], b[1]]
    codes = [c.cmd(plain("alice", "guess %d" % i)).code
             for i, c in enumerate(order)]
    assert codes == [535, 535, 535, 421], codes
    # the limit is reached on both workers, even for the right password
    assert a[2].cmd(plain("alice", "s3cret pass")).code == 421
    assert b[2].cmd(plain("alice", "s3cret pass")).code == 421
    # another address is not affected
    with Client(m.port, source="127.0.0.6", timeout=30) as c:
        c.greet()
        assert c.cmd(plain("alice", "s3cret pass")).code == 235
    for c in conns:
        c.close()


def test_sessions_that_leave_while_their_hash_runs(mtad_factory, workdir):
    """Clients that hang up (or reset) while their password is hashed:
    the answers that come later are dropped (no session is touched after
    it was freed: run under ASan too), the failures still count, and the
    worker goes on serving.  A reset is seen at once (the session is freed
    and its job cancelled); a plain close only once the answer is written."""
    m = start(mtad_factory, workdir, workers=1, auth={"max_failures": 8})
    before = m.children()
    for i in range(8):
        c = Client(m.port, source="127.0.0.7", timeout=30)
        c.greet()
        c.send(plain("alice", "gone %d" % i) + "\r\n")
        if i % 2:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                              struct.pack("ii", 1, 0))    # RST
        c.close()
    with Client(m.port, source="127.0.0.7", timeout=30) as c:
        c.greet()
        assert c.cmd(plain("alice", "s3cret pass")).code == 421, \
            "the checks of the sessions that left were counted"
    with Client(m.port, source="127.0.0.8", timeout=30) as c:
        c.greet()
        assert c.cmd(plain("alice", "s3cret pass")).code == 235
    assert m.children() == before, "the worker was restarted"
