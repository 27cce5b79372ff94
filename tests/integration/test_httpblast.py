"""bench/httpblast, the HTTP load of bench/inject.py: what it says was
accepted is what the server answered 201 to, the requests are what the
API's contract asks (POST /v1/messages, a bearer token, JSON with from, to
and a message of exactly -z bytes of CRLF lines), keep-alive reuses one
connection per client and -k 1 makes one per request, and refusals are
counted by kind.  No timing is asserted.  Loopback only; the server is a
thread of this test, stopped in a finally block."""
import json
import os
import re
import socket
import subprocess
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("MTAD_BUILD", "build"))
HTTPBLAST = os.path.join(BUILD, "bench", "httpblast")

pytestmark = pytest.mark.skipif(not os.access(HTTPBLAST, os.X_OK),
                                reason="build/bench/httpblast not built")


class Server:
    """A keep-alive HTTP/1.1 server: every `refuse`-th request gets that
    status, the others 201; counts connections, requests and keeps the
    first body.  One response is one send (no delayed-ACK stall)."""

    def __init__(self, refuse_every=0, refuse_status=503):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.refuse_every, self.refuse_status = refuse_every, refuse_status
        self.lock = threading.Lock()
        self.conns = self.requests = self.created = 0
        self.bad = []
        self.first = None
        self.stop_ev = threading.Event()
        self.ls.settimeout(0.2)
        self.t = threading.Thread(target=self.accept_loop, daemon=True)
        self.t.start()

    def accept_loop(self):
        while not self.stop_ev.is_set():
            try:
                c, _ = self.ls.accept()
            except socket.timeout:
                continue
            with self.lock:
                self.conns += 1
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        buf = b""
        c.settimeout(10)
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                while len(buf) < n:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                body, buf = buf[:n], buf[n:]
                closes = re.search(rb"(?i)connection: *close", head)
                with self.lock:
                    self.requests += 1
                    k = self.requests
                    if self.first is None:
                        self.first = (head, body)
                    if not head.startswith(b"POST /v1/messages HTTP/1.1\r\n") \
                            or b"\r\nAuthorization: Bearer t0k\r\n" \
                            not in head + b"\r\n":
                        self.bad.append(head)
                refuse = self.refuse_every and k % self.refuse_every == 0
                status = self.refuse_status if refuse else 201
                out = json.dumps({"error": {"status": status}} if refuse else
                                 {"queue_id": "Q%d" % k}).encode()
                if not refuse:
                    with self.lock:
                        self.created += 1
                c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (status, len(out), out))
                if closes:
                    return
        except OSError:
            return
        finally:
            c.close()

    def stop(self):
        self.stop_ev.set()
        self.t.join(5)
        self.ls.close()


@pytest.fixture
def server_factory():
    made = []

    def make(*a, **kw):
        s = Server(*a, **kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.stop()


def blast(port, *args):
    r = subprocess.run([HTTPBLAST, "-s", "127.0.0.1:%d" % port, "-t", "t0k",
                        "-T", "30"] + list(args),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", r.stdout)}, \
        r.stderr


def test_keep_alive_counts_match_the_server(server_factory):
    srv = server_factory()
    res, _ = blast(srv.port, "-c", "5", "-m", "300", "-z", "1024")
    assert res["accepted"] == srv.created == srv.requests == 300
    assert res["sent"] == 300 and res["errors"] == 0
    assert res["conns"] == 5 and srv.conns == 5       # one per client
    assert srv.bad == []
    head, body = srv.first
    d = json.loads(body)
    assert d["from"] == "blast@bench.example"
    assert d["to"] == ["rcpt0@sink.example"]
    msg = d["message"].encode()
    assert len(msg) == 1024 and msg.endswith(b"\r\n")
    assert b"\r\n\r\n" in msg and b"\n." not in msg
    assert all(line.endswith(b"\r") for line in msg.split(b"\n")[:-1])


def test_one_connection_per_request_and_recipients(server_factory):
    srv = server_factory()
    res, _ = blast(srv.port, "-c", "3", "-m", "40", "-k", "1", "-r", "3")
    assert res["accepted"] == srv.requests == 40
    assert res["conns"] == 40 and srv.conns == 40
    d = json.loads(srv.first[1])
    assert d["to"] == ["rcpt0@sink.example", "rcpt1@sink.example",
                       "rcpt2@sink.example"]


@pytest.mark.parametrize("status,key", [(503, "tempfail"), (429, "tempfail"),
                                        (422, "permfail")])
def test_refusals_are_counted_by_kind(server_factory, status, key):
    srv = server_factory(refuse_every=4, refuse_status=status)
    res, err = blast(srv.port, "-c", "2", "-m", "100")
    assert res["accepted"] == srv.created == 75
    assert res[key] == 25 and res["sent"] == 100
    assert "first refusal: HTTP/1.1 %d" % status in err
