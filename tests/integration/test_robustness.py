"""Robustness of a running mtad against hostile or broken input: a seeded
live SMTP protocol fuzzer (with and without TLS), broken configuration
files (mtad -t, mtactl check, reload), a damaged spool at start (and
mtactl's queue commands on it), garbage on the control socket, and kill -9
of every process (or only the children) in the middle of a load.  The
standard: bad input gets a clear SMTP error or a message naming the file;
no worker ever dies of it; a 250 after the final dot means the message is
in the spool (and, after a crash and restart, it is still there or
delivered).  Seeds are fixed; everything is bounded in time.

Helpers used only by this file come first.
"""
import os
import pytest
import random
import re
import signal
import socket
import ssl
import subprocess
import threading
import time

from concurrent.futures import ThreadPoolExecutor

from mtadtest import (MTACTL, MTAD, dot_stuff, make_message,
                      read_queue_file, recv_until_eof, spool_files,
                      strip_received, wait_for)
from test_tls import make_cert


QUEUED_RE = re.compile(rb"queued as ([0-9A-F]{16})")
MARKER_RE = re.compile(rb"X-Fuzz-Marker: (m\d+-\d+)\r\n")
LINE_RE = re.compile(rb"^[2-5]\d\d([ -]|$)")
ENHANCED_RE = re.compile(rb"^[245]\d\d[ -][245]\.\d{1,3}\.\d{1,3}( |$)")

SMUGGLE = [b"\n.\n", b"\r.\r\n", b"\n.\r\n", b"\r\n.\n", b"\r\n.\r",
           b"\r.\n", b"\n.\r", b".\r\r\n", b"\r\n\x00.\r\n"]


class Conn:
    """One fuzzing connection: raw socket, every byte received, parsed
    replies.  Never raises on I/O errors: a closed peer ends the script."""

    def __init__(self, port, ctx=None, timeout=3.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.raw = bytearray()
        self.pos = 0
        self.replies = []           # list of lists of reply lines
        self.partial = []
        self.dead = False
        self.opaque = False         # after STARTTLS without our own TLS:
                                    # the peer speaks TLS records, not SMTP

    def send(self, data):
        if self.dead:
            return False
        try:
            self.sock.sendall(data)
            return True
        except (OSError, ssl.SSLError):
            self.dead = True
            return False

    def _parse(self):
        if self.opaque:
            self.pos = len(self.raw)
            return
        while True:
            i = self.raw.find(b"\r\n", self.pos)
            if i < 0:
                return
            line = bytes(self.raw[self.pos:i])
            self.pos = i + 2
            self.partial.append(line)
            if len(line) < 4 or line[3:4] != b"-":
                self.replies.append(self.partial)
                self.partial = []

    def _recv_once(self, wait):
        if self.dead:
            return False
        self.sock.settimeout(wait)
        try:
            chunk = self.sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            return False
        except (OSError, ssl.SSLError):
            self.dead = True
            return False
        if not chunk:
            self.dead = True
            return False
        self.raw += chunk
        self._parse()
        return True

    def drain(self, idle=0.05, total=2.0):
        """Read until the peer is quiet for `idle` seconds."""
        end = time.time() + total
        while time.time() < end and self._recv_once(idle):
            pass

    def wait_replies(self, n, total=3.0):
        """Wait until n more replies than now have arrived (or timeout);
        returns the new ones."""
        start = len(self.replies)
        end = time.time() + total
        while len(self.replies) < start + n and time.time() < end:
            if not self._recv_once(max(0.01, min(0.5, end - time.time()))) \
                    and self.dead:
                break
        return self.replies[start:]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def code_of(reply):
    try:
        return int(reply[-1][:3])
    except (ValueError, IndexError):
        return 0


def unstuff(data):
    """What a server should store for DATA bytes (without terminator):
    one leading dot removed from every CRLF-delimited line."""
    lines = data.split(b"\r\n")
    return b"\r\n".join(l[1:] if l.startswith(b".") else l for l in lines)


class Fuzzer:
    """Seeded live SMTP fuzzer.  After run(): .replies (all replies of all
    connections), .expected {marker: body bytes}, .aborted {markers of
    bodies cut off mid-DATA}, .queued {id: marker or None}."""

    def __init__(self, port, seed, n=300, tls_ctx=None, threads=12):
        self.port = port
        self.seed = seed
        self.n = n
        self.tls_ctx = tls_ctx
        self.threads = threads
        self.lock = threading.Lock()
        self.expected = {}
        self.aborted = set()
        self.replies = []
        self.errors = []

    # -- one connection ---------------------------------------------------
    def run_one(self, i):
        rnd = random.Random(self.seed * 100003 + i)
        try:
            c = Conn(self.port)
        except OSError as e:
            with self.lock:
                self.errors.append("connect %d: %r" % (i, e))
            return
        st = {"i": i, "k": 0}
        try:
            c.wait_replies(1)
            if rnd.random() < 0.8:
                c.send(rnd.choice([b"EHLO fuzz.test\r\n", b"HELO fuzz.test\r\n",
                                   b"ehlo \xc3\xa9.test\r\n"]))
                c.drain()
            for _ in range(rnd.randrange(1, 9)):
                if c.dead:
                    break
                step = rnd.choices(STEP_NAMES, STEP_WEIGHTS)[0]
                if getattr(self, "step_" + step)(c, rnd, st) == "closed" \
                        or c.opaque:
                    break
                c.drain()
            else:
                if rnd.random() < 0.7:
                    c.send(b"QUIT\r\n")
                    c.drain(idle=0.2)
        finally:
            c.close()
            with self.lock:
                self.replies.extend(c.replies)
                if c.partial:
                    self.replies.append(c.partial + [b"<partial>"])

    def marker(self, st):
        st["k"] += 1
        return b"m%d-%d" % (st["i"], st["k"])

    def body(self, rnd, mk, extra=b""):
        lines = [b"From: f@x.test", b"Subject: fuzz " + mk,
                 b"X-Fuzz-Marker: " + mk, b""]
        for _ in range(rnd.randrange(0, 12)):
            kind = rnd.random()
            if kind < 0.2:
                lines.append(b"." * rnd.randrange(1, 3) + b"dotted")
            elif kind < 0.3:
                lines.append(bytes(rnd.randrange(128, 256) for _ in range(20)))
            elif kind < 0.35:
                lines.append(b"y" * rnd.randrange(900, 5000))
            else:
                lines.append(b"line %d" % rnd.randrange(10 ** 6))
        return b"\r\n".join(lines) + b"\r\n" + extra

    def envelope(self, c, rnd):
        """RSET, MAIL, RCPT(s), waiting for each reply; True when all 250."""
        c.send(b"RSET\r\n")
        c.wait_replies(1)
        c.drain(idle=0.02)
        params = rnd.choice([b"", b" BODY=8BITMIME", b" SIZE=1000",
                             b" SMTPUTF8", b" RET=HDRS ENVID=abc"])
        c.send(b"MAIL FROM:<s%d@x.test>%s\r\n" % (rnd.randrange(99), params))
        r = c.wait_replies(1)
        if not r or code_of(r[-1]) != 250:
            return False
        ok = False
        for _ in range(rnd.randrange(1, 4)):
            c.send(b"RCPT TO:<r%d@y.test>\r\n" % rnd.randrange(999))
            r = c.wait_replies(1)
            if r and code_of(r[-1]) == 250:
                ok = True
        return ok

    def track(self, mk, stored):
        with self.lock:
            self.expected[mk] = stored

    # -- steps -------------------------------------------------------------
    def step_valid(self, c, rnd, st):
        cmds = [b"NOOP", b"RSET", b"HELP", b"VRFY postmaster", b"EXPN list",
                b"EHLO again.test", b"HELO h.test", b"MAIL FROM:<a@x.test>",
                b"RCPT TO:<b@y.test>", b"MAIL FROM:<>", b"DATA", b"BDAT 0 LAST",
                b"noop hello", b"ETRN x", b"AUTH PLAIN AAAA"]
        c.send(rnd.choice(cmds) + b"\r\n")

    def step_txn(self, c, rnd, st):
        if not self.envelope(c, rnd):
            return
        c.send(b"DATA\r\n")
        r = c.wait_replies(1)
        if not r or code_of(r[-1]) != 354:
            return
        mk = self.marker(st)
        body = self.body(rnd, mk)
        self.track(mk, body)
        # send in random pieces to split the terminator across reads
        data = dot_stuff(body)
        while data and not c.dead:
            n = rnd.randrange(1, len(data) + 1)
            c.send(data[:n])
            data = data[n:]
        c.wait_replies(1, total=5.0)

    def step_smuggle(self, c, rnd, st):
        if not self.envelope(c, rnd):
            return
        c.send(b"DATA\r\n")
        r = c.wait_replies(1)
        if not r or code_of(r[-1]) != 354:
            return
        mk = self.marker(st)
        seq = rnd.choice(SMUGGLE)
        raw = (self.body(rnd, mk) + b"before" + seq +
               b"MAIL FROM:<evil@x.test>\r\nRCPT TO:<victim@y.test>\r\n"
               b"after\r\n")
        self.track(mk, unstuff(raw))
        c.send(raw + b".\r\n")
        c.wait_replies(1, total=5.0)

    def step_bdat_txn(self, c, rnd, st):
        if not self.envelope(c, rnd):
            return
        mk = self.marker(st)
        body = self.body(rnd, mk)
        self.track(mk, body)
        cuts = sorted(rnd.sample(range(1, len(body)), min(rnd.randrange(0, 3),
                                                          len(body) - 1)))
        parts = [body[a:b] for a, b in zip([0] + cuts, cuts + [len(body)])]
        out = b""
        for j, p in enumerate(parts):
            last = b" LAST" if j == len(parts) - 1 else b""
            out += b"BDAT %d%s\r\n" % (len(p), last) + p
        if rnd.random() < 0.5:
            c.send(out)                 # pipelined
        else:
            c.send(out[:len(out) // 2])
            c.send(out[len(out) // 2:])
        c.wait_replies(len(parts), total=5.0)

    def step_burst(self, c, rnd, st):
        """Pipelined transactions in one write (bodies tracked)."""
        out = b"RSET\r\n"
        n = 0
        for _ in range(rnd.randrange(1, 4)):
            mk = self.marker(st)
            body = self.body(rnd, mk)
            self.track(mk, body)
            out += (b"MAIL FROM:<p@x.test>\r\nRCPT TO:<q@y.test>\r\n"
                    b"DATA\r\n" + dot_stuff(body))
            n += 4
        out += b"NOOP\r\n" * rnd.randrange(0, 50)
        c.send(out)
        c.wait_replies(n + 1, total=5.0)

    def step_long(self, c, rnd, st):
        n = rnd.choice([513, 1000, 1001, 4096, 65536, 200000])
        c.send(rnd.choice([b"NOOP ", b"MAIL FROM:<", b"RCPT TO:<", b"EHLO "])
               + b"a" * n + b"\r\n")

    def step_nul(self, c, rnd, st):
        c.send(rnd.choice([b"NO\0OP\r\n", b"\0\r\n", b"MAIL FROM:<a\0b@x.test>\r\n",
                           b"RCPT TO:<b@y.test>\0\r\n", b"EHLO \0\0\0\r\n",
                           b"\0" * 2000 + b"\r\n"]))

    def step_bare(self, c, rnd, st):
        c.send(rnd.choice([b"NOOP\n", b"NOOP\r", b"NOOP\rNOOP\r\n", b"\n\n\n",
                           b"RSET\n\rNOOP\r\n", b"\r\r\r\n", b"QUI\nT\r\n"]))

    def step_8bit(self, c, rnd, st):
        c.send(rnd.choice([b"MAIL FROM:<\xff\xfe@x.test>\r\n",
                           b"RCPT TO:<\xc3\xa9t\xc3\xa9@y.test>\r\n",
                           b"\xe4\xb8\xad\xe6\x96\x87\r\n",
                           b"EHLO \x80\x81\x82\r\n",
                           bytes(rnd.randrange(128, 256) for _ in range(300)) + b"\r\n"]))

    def step_hugeparam(self, c, rnd, st):
        c.send(rnd.choice([
            b"MAIL FROM:<a@x.test> SIZE=99999999999999999999999999\r\n",
            b"MAIL FROM:<a@x.test> SIZE=-1\r\n",
            b"MAIL FROM:<a@x.test> " + b"X=Y " * 200 + b"\r\n",
            b"MAIL FROM:<a@x.test> ENVID=" + b"+41" * 300 + b"\r\n",
            b"RCPT TO:<b@y.test> NOTIFY=" + b"SUCCESS," * 100 + b"\r\n",
            b"RCPT TO:<b@y.test> ORCPT=rfc822;" + b"+" * 400 + b"\r\n",
            b"MAIL FROM:<" + b"a" * 300 + b"@" + b"b" * 300 + b">\r\n",
            b"RCPT TO:<" + b"@r1," * 80 + b"b@y.test>\r\n",
            b"MAIL FROM:<a@x.test> BODY=" + b"Z" * 500 + b"\r\n",
            b"MAIL FROM:<<<>>>\r\n", b"RCPT TO:<\r\n", b"MAIL FROM:\r\n",
            b"MAIL FROM:<a@[" + b"1" * 300 + b"]>\r\n",
            b"MAIL FROM:<\"" + b"\\" * 301 + b"\"@x.test>\r\n",
        ]))

    def step_bdat_wrong(self, c, rnd, st):
        if rnd.random() < 0.5:
            self.envelope(c, rnd)
        n = rnd.choice([0, 1, 10, 100, 5000])
        got = max(0, n + rnd.choice([-5, -1, 1, 7, 100]))
        c.send(rnd.choice([b"BDAT %d\r\n", b"BDAT %d LAST\r\n", b"BDAT %d  last\r\n",
                           b"BDAT %d LAST extra\r\n", b"BDAT +%d\r\n",
                           b"BDAT 0x%d\r\n"]) % n + b"z" * got)
        if rnd.random() < 0.3:
            c.send(b"BDAT 18446744073709551616 LAST\r\nabc")

    def step_starttls(self, c, rnd, st):
        c.send(b"STARTTLS\r\n")
        r = c.wait_replies(1)
        if not r or code_of(r[-1]) != 220:
            return
        choice = rnd.random()
        if choice < 0.35 and self.tls_ctx is not None:
            return self.tls_session(c, rnd, st)
        c.opaque = True
        if choice < 0.7:
            c.send(client_hello(rnd))       # a real, maybe truncated, hello
        else:
            c.send(rnd.choice([
                b"\x16\x03\x01\x00\x05hello",
                b"\x16\x03\x03\xff\xff" + os.urandom(100),
                b"EHLO plain.test\r\n",
                b"\x80\x2e\x01\x00\x02" + b"\x00" * 40,
                bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 3000))),
            ]))
        c.drain(idle=0.1)
        return "closed" if rnd.random() < 0.5 else None

    def tls_session(self, c, rnd, st):
        try:
            c.sock.settimeout(5)
            c.sock = self.tls_ctx.wrap_socket(c.sock)
        except (OSError, ssl.SSLError) as e:
            with self.lock:
                self.errors.append("handshake: %r" % e)
            c.dead = True
            return "closed"
        c.raw = bytearray()
        c.pos = 0
        c.send(b"EHLO tls.test\r\n")
        c.wait_replies(1)
        self.step_txn(c, rnd, st)
        c.send(b"QUIT\r\n")
        c.drain(idle=0.1)
        return "closed"

    def step_abort_cmd(self, c, rnd, st):
        c.send(rnd.choice([b"MAIL FROM:<a@x.t", b"EHL", b"RCPT TO:<b@y.test>\r",
                           b"BDAT 100 LAST\r\nabc", b"DATA"]))
        return "closed"

    def step_abort_data(self, c, rnd, st):
        if not self.envelope(c, rnd):
            return
        c.send(b"DATA\r\n")
        r = c.wait_replies(1)
        if not r or code_of(r[-1]) != 354:
            return
        mk = self.marker(st)
        with self.lock:
            self.aborted.add(mk)
        body = dot_stuff(self.body(rnd, mk))
        cut = rnd.choice([len(body) - 1, len(body) - 2, len(body) - 3,
                          len(body) // 2])
        c.send(body[:cut])
        if rnd.random() < 0.5:
            try:            # RST instead of FIN
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                  b"\x01\x00\x00\x00\x00\x00\x00\x00")
            except OSError:
                pass
        return "closed"

    def step_flood_close(self, c, rnd, st):
        """Thousands of pipelined commands, then a reset without reading:
        the server's replies hit a dead socket."""
        c.send(rnd.choice([b"NOOP\r\n", b"RSET\r\n", b"HELP\r\n",
                           b"MAIL FROM:<a@x.test>\r\n"]) * rnd.randrange(100, 20000))
        try:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                              b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        return "closed"

    def step_huge_data(self, c, rnd, st):
        """A body with one very long line (no CRLF for up to 2 MiB)."""
        if not self.envelope(c, rnd):
            return
        c.send(b"DATA\r\n")
        r = c.wait_replies(1)
        if not r or code_of(r[-1]) != 354:
            return
        mk = self.marker(st)
        body = self.body(rnd, mk) + b"z" * rnd.choice([999, 1000, 65536, 1 << 21]) + b"\r\n"
        self.track(mk, body)
        c.send(dot_stuff(body))
        c.wait_replies(1, total=5.0)

    def step_garbage(self, c, rnd, st):
        c.send(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 4000))))

    # -- driver --------------------------------------------------------------
    def run(self, deadline_s=40.0):
        end = time.time() + deadline_s
        with ThreadPoolExecutor(self.threads) as ex:
            futs = [ex.submit(self._guarded, i, end) for i in range(self.n)]
            for f in futs:
                f.result()
        return self

    def _guarded(self, i, end):
        if time.time() > end:
            with self.lock:
                self.errors.append("time budget exhausted before conn %d" % i)
            return
        try:
            self.run_one(i)
        except Exception as e:      # a bug in the fuzzer, not in mtad
            with self.lock:
                self.errors.append("conn %d: %r" % (i, e))

    def queued_ids(self):
        ids = set()
        for r in self.replies:
            for line in r:
                m = QUEUED_RE.search(line)
                if m and line.startswith(b"250"):
                    ids.add(m.group(1).decode())
        return ids


STEPS = {"valid": 6, "txn": 5, "smuggle": 3, "bdat_txn": 3, "burst": 2,
         "long": 2, "nul": 2, "bare": 2, "8bit": 2, "hugeparam": 3,
         "bdat_wrong": 2, "starttls": 2, "abort_cmd": 1, "abort_data": 1,
         "garbage": 2, "flood_close": 1, "huge_data": 1}
STEP_NAMES = list(STEPS)
STEP_WEIGHTS = [STEPS[k] for k in STEP_NAMES]


def client_hello(rnd):
    """The first flight of a real TLS client (a ClientHello), sometimes cut
    short or with a flipped byte."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = out.read()
    k = rnd.random()
    if k < 0.3:
        return hello[:rnd.randrange(1, len(hello))]
    if k < 0.6:
        b = bytearray(hello)
        j = rnd.randrange(len(b))
        b[j] ^= 1 << rnd.randrange(8)
        return bytes(b)
    return hello + bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 500)))


def bad_reply_lines(replies, hostname, enhanced=True):
    """Reply lines that are not valid SMTP: 3 digits + ' ' / '-' / end, code
    2xx-5xx; with ENHANCEDSTATUSCODES, 2xx/4xx/5xx lines carry x.y.z except
    the 220 greeting, 221, and the EHLO/HELO replies."""
    bad = []
    for r in replies:
        if r and r[-1] == b"<partial>":
            r = r[:-1]
            if not r:
                continue
        first = r[0]
        greet = first.startswith(b"220 " + hostname.encode()) or \
            first.startswith(b"220-" + hostname.encode())
        helo = first[:4] in (b"250-", b"250 ") and \
            first[4:].startswith(hostname.encode())
        for line in r:
            if not LINE_RE.match(line) or len(line) > 512:
                bad.append(line)
                continue
            code = int(line[:3])
            if not enhanced or greet or helo or code in (221, 354):
                continue
            if code // 100 in (2, 4, 5) and not ENHANCED_RE.match(line):
                bad.append(line)
    return bad


def check_queue(spool, fuzz, ids):
    """Problems: acknowledged ids without a queue file, stored bodies that
    differ from what was sent, and cut-off bodies that were queued."""
    problems = []
    qdir = os.path.join(spool, "queue")
    present = set(n for n in os.listdir(qdir) if not n.startswith("."))
    for qid in sorted(ids):
        if qid not in present:
            problems.append("acknowledged %s missing from queue/" % qid)
            continue
        try:
            _, body = read_queue_file(os.path.join(qdir, qid))
            _, rest = strip_received(body)
        except (ValueError, AssertionError) as e:
            problems.append("%s unreadable: %r" % (qid, e))
            continue
        m = MARKER_RE.search(rest)
        if not m:
            continue
        mk = m.group(1).decode()
        if mk in fuzz.aborted:
            problems.append("%s: cut-off body %s was queued" % (qid, mk))
        elif mk in fuzz.expected and fuzz.expected[mk] != rest:
            problems.append("%s: body of %s differs: sent %r stored %r" % (
                qid, mk, fuzz.expected[mk][-200:], rest[-200:]))
    for qid in present - set(ids):
        try:
            _, body = read_queue_file(os.path.join(qdir, qid))
        except (ValueError, OSError):
            continue
        m = MARKER_RE.search(body)
        if m and m.group(1).decode() in fuzz.aborted:
            problems.append("%s: cut-off body %s was queued" % (qid, m.group(1)))
    return problems


def worker_deaths(log_text):
    return [l for l in log_text.splitlines()
            if "exited on signal" in l or "restarting" in l or "dumped core" in l]


# ROBUST_SEED shifts the fuzzers' seeds for exploratory runs; the default
# keeps every run identical.
SEED = int(os.environ.get("ROBUST_SEED", "0"))



def run_fuzz(m, seed, n, tls_ctx=None):
    workers = sorted(m.children())
    assert len(workers) >= 2, workers       # logd + workers
    fz = Fuzzer(m.port, seed=seed, n=n, tls_ctx=tls_ctx).run(deadline_s=40)
    assert not fz.errors, fz.errors[:5]
    # let the last sessions and group commits finish
    wait_for(lambda: spool_files(m.spool, "tmp") == [], timeout=5)
    deaths = worker_deaths(m.log_text())
    assert not deaths, deaths
    assert m.proc.poll() is None, "master died"
    assert sorted(m.children()) == workers, "a worker or the log process was replaced"
    bad = bad_reply_lines(fz.replies, "mx.test.example")
    assert not bad, bad[:10]
    ids = fz.queued_ids()
    assert ids, "the fuzzer never got a message through"
    problems = check_queue(m.spool, fz, ids)
    assert not problems, problems[:5]
    # and the daemon still serves
    s = m.smtp()
    s.ehlo("after.test")
    code, _ = s.noop()
    assert code == 250
    s.quit()
    return fz


def test_fuzz_plain(mtad_factory, hole):
    m = mtad_factory({"routes": {"default": hole.route()}}).start()
    fz = run_fuzz(m, seed=1 + SEED, n=300)
    assert len(fz.queued_ids()) > 20


def test_fuzz_tls(mtad_factory, workdir, hole):
    cert, key = make_cert(workdir)
    m = mtad_factory({"routes": {"default": hole.route()},
                      "tls": {"cert_file": cert, "key_file": key}}).start()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    fz = run_fuzz(m, seed=2 + SEED, n=200, tls_ctx=ctx)
    assert len(fz.queued_ids()) > 20


# --- broken configuration files ----------------------------------------------

def base_config(d):
    return {
        "server": {"hostname": "mx.test.example", "listen": ["127.0.0.1:2525"],
                   "workers": 2, "pid_file": os.path.join(d, "p.pid"),
                   "control_socket": os.path.join(d, "c.sock"),
                   "shutdown_timeout": "5s"},
        "limits": {"max_message_size": "10M", "max_recipients": 100,
                   "max_connections": 100, "max_connections_per_ip": 10,
                   "command_timeout": "5m", "data_timeout": "10m",
                   "max_errors": 20, "bare_newline": "reject"},
        "relay": {"allow_networks": ["127.0.0.0/8"]},
        "spool": {"dir": os.path.join(d, "spool"), "fsync": True},
        "routes": {"db": os.path.join(d, "r.mdb"),
                   "default": "smtp:[127.0.0.1]:1",
                   "static": {"example.org": "smtp:[127.0.0.1]:2"}},
        "delivery": {"retry": ["1s", "2s"], "connect_timeout": "2s"},
        "log": {"file": os.path.join(d, "m.log"), "level": "info"},
    }


def wrong_type_variants(cfg):
    """(description, config) with one leaf or section replaced by a value
    of the wrong type."""
    import copy
    out = []
    for sec, body in cfg.items():
        for bad in ("scalar-for-map", [1, 2]):
            c = copy.deepcopy(cfg)
            c[sec] = "oops" if bad == "scalar-for-map" else bad
            out.append(("%s=%r" % (sec, c[sec]), c))
        for key, val in body.items():
            if isinstance(val, list):
                bads = [{"a": 1}, "not-a-list", [[1, 2]], [{"k": "v"}]]
            elif isinstance(val, dict):
                bads = [[1], "str", {"x": [1]}]
            elif isinstance(val, bool):
                bads = ["maybe", [True], 2]
            elif isinstance(val, int):
                bads = ["many", -1, 99999999999999999999999, 1.5, [3], {"n": 1}]
            else:
                bads = [[val], {"v": val}, ""]
            for b in bads:
                c = copy.deepcopy(cfg)
                c[sec][key] = b
                out.append(("%s.%s=%r" % (sec, key, b), c))
    return out


def raw_variants(d):
    """(name, bytes or None for a directory) of broken files."""
    import random
    rnd = random.Random(7)
    laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 12):
        laughs += "a%d: &a%d [%s]\n" % (i, i, ", ".join(["*a%d" % (i - 1)] * 10))
    return [
        ("binary", bytes(rnd.randrange(256) for _ in range(4096))),
        ("nul", b"server:\n  hostname: mx\0.example\nroutes:\n  default: smtp:[127.0.0.1]:1\n"),
        ("bad-utf8", b"server:\n  hostname: \xff\xfe\nroutes:\n  default: x\n"),
        # (libyaml's scanner is quadratic in flow depth: 100,000 '[' take
        # 13 s in mtad -t; 10,000 keep the test fast)
        ("deep-flow", b"server: " + b"[" * 10000 + b"\n"),
        ("deep-flow-map", b"server: " + b"{a: " * 5000 + b"\n"),
        ("deep-valid-flow", b"server:\n  listen: " + b"[" * 10000 + b"]" * 10000
         + b"\n"),
        ("deep-valid-map", b"routes:\n  static: " + b"{a: " * 3000 + b"1"
         + b"}" * 3000 + b"\n"),
        ("laughs-in-key", (laughs + "relay:\n  allow_networks: *a11\n"
                           "routes:\n  static: {x: *a11}\n").encode()),
        ("deep-block", b"".join(b"  " * i + b"k%d:\n" % i for i in range(3000))),
        ("deep-seq", b"server:\n" + b"- " * 20000 + b"x\n"),
        ("laughs", laughs.encode()),
        ("alias-loop", b"a: &x\n  b: *x\n"),
        ("alias-server", b"base: &b\n  hostname: mx.example\nserver: *b\n"
                         b"routes:\n  default: smtp:[127.0.0.1]:1\n"),
        ("merge-key", b"base: &b {hostname: h}\nserver:\n  <<: *b\n"),
        ("undefined-alias", b"server: *nope\n"),
        ("big", b"# " + b"c" * 100 + b"\n" * 1 + (b"# padding line\n" * 700000)
         + b"server: [\n"),
        ("big-scalar", b"server:\n  hostname: \"" + b"h" * (10 << 20) + b"\"\n"),
        ("empty", b""),
        ("comments", b"# nothing here\n   # still nothing\n"),
        ("only-doc-markers", b"---\n...\n---\n"),
        ("two-docs", b"routes:\n  default: smtp:[127.0.0.1]:1\n---\nserver: 1\n"),
        ("tags", b"server: !!binary aGVsbG8=\nroutes:\n  default: !custom x\n"),
        ("dup-keys", b"routes:\n  default: smtp:[127.0.0.1]:1\n  default: smtp:[127.0.0.1]:2\n"),
        ("scalar-root", b"just a string\n"),
        ("list-root", b"- 1\n- 2\n"),
        ("tabs", b"server:\n\thostname: x\n"),
        ("unterminated-quote", b"server:\n  hostname: \"abc\n"),
        ("huge-int", b"server:\n  workers: " + b"9" * 5000 + b"\n"),
        ("huge-duration", b"server:\n  shutdown_timeout: 99999999999999999999999d\n"),
        ("complex-key", b"? [a, b]\n: c\n"),
        ("directory", None),
    ]


def check_cli(path, tool):
    if tool == "mtad":
        argv = [MTAD, "-t", "-c", path]
    else:
        argv = [MTACTL, "-c", path, "check"]
    r = subprocess.run(argv, capture_output=True, timeout=20)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def assert_clean_failure(path, tool, rc, out, want_line=True):
    assert rc >= 0, "%s killed by signal %d on %s" % (tool, -rc, path)
    assert rc == 1, "%s: rc=%d on %s: %s" % (tool, rc, path, out[-500:])
    assert path in out or os.path.basename(path) in out, (tool, path, out[-500:])
    if want_line:
        import re
        # FILE:LINE:COL, or FILE: ... at byte N for an encoding error
        assert re.search(re.escape(os.path.basename(path)) + r":\d+:\d+: ", out) \
            or re.search(r"at byte \d+", out), (tool, path, out[-500:])
    assert len(out) < 20000, "%s: %d bytes of output" % (tool, len(out))


@pytest.mark.parametrize("tool", ["mtad", "mtactl"])
def test_broken_config_files(workdir, tool):
    failures = []
    for name, data in raw_variants(workdir):
        path = os.path.join(workdir, "%s.yaml" % name)
        if data is None:
            os.makedirs(path, exist_ok=True)
        else:
            with open(path, "wb") as f:
                f.write(data)
        rc, out = check_cli(path, tool)
        try:
            assert_clean_failure(path, tool, rc, out,
                                 want_line=name not in ("directory",))
        except AssertionError as e:
            failures.append("%s: %s" % (name, e))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("tool", ["mtad", "mtactl"])
def test_wrong_types_everywhere(workdir, tool):
    from mtadtest import to_yaml
    base = base_config(workdir)
    path = os.path.join(workdir, "ok.yaml")
    with open(path, "w") as f:
        f.write(to_yaml(base))
    rc, out = check_cli(path, tool)
    assert rc == 0, out                 # the base is valid: variants can fail
    failures = []
    for i, (desc, cfg) in enumerate(wrong_type_variants(base)):
        path = os.path.join(workdir, "v%d.yaml" % i)
        with open(path, "w") as f:
            f.write(to_yaml(cfg))
        rc, out = check_cli(path, tool)
        if rc == 0:
            failures.append("%s accepted" % desc[:100])
            continue
        try:
            assert_clean_failure(path, tool, rc, out)
        except AssertionError as e:
            failures.append("%s: %s" % (desc[:100], str(e)[:300]))
    assert not failures, "\n".join(failures)


# --- a damaged spool at start ------------------------------------------------

def test_damaged_spool_at_start(mtad_factory, sink):
    from mtadtest import closed_port, send
    m = mtad_factory({"routes": {"default": "smtp:[127.0.0.1]:%d" % closed_port()},
                      "delivery": {"retry": ["1s", "30s"]}})
    m.start()
    ids = [send(m, "a@example.org", ["r%d@example.net" % i], make_message(i))
           for i in range(6)]
    for qid in ids:                     # a deferral writes state/<id>
        m.wait_log("%s: to=<r" % qid)
    m.stop()
    assert sorted(m.queue_ids()) == sorted(ids)
    q = os.path.join(m.spool, "queue")
    st = os.path.join(m.spool, "state")
    good, garbled, truncated, empty, badstate, binary = ids
    with open(os.path.join(q, garbled), "r+b") as f:
        f.write(b"\xff\xfegarbage header\n\0\0\0")
    with open(os.path.join(q, truncated), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(q, truncated)) // 2)
    with open(os.path.join(q, empty), "r+b") as f:
        f.truncate(0)
    with open(os.path.join(q, binary), "wb") as f:
        f.write(bytes(range(256)) * 8)
    with open(os.path.join(st, badstate), "wb") as f:
        f.write(b"\0garbage\xff\nrcpt 99 zz\n" * 50)
    # a state file without its queue file, stray names, a directory and a
    # dangling symlink where queue files belong
    with open(os.path.join(st, "0000000000000001"), "wb") as f:
        f.write(b"junk")
    with open(os.path.join(q, "not-an-id"), "wb") as f:
        f.write(b"junk")
    os.mkdir(os.path.join(q, "0000000000000002"))
    os.symlink("/nonexistent/x", os.path.join(q, "0000000000000003"))
    with open(os.path.join(q, "0000000000000004"), "wb") as f:
        f.write(b"mtad-queue 1\n")      # a bare header line, no envelope

    m.cfg["routes"]["default"] = sink.route
    m.write_config()
    m.start()
    workers = sorted(m.children())
    # the good message arrives; a new one is accepted and delivered
    newid = send(m, "a@example.org", ["new@example.net"], make_message(99))
    # (r4's damaged state file counts as none, so it is delivered too)
    got = sink.wait_for(3, timeout=20)
    rcpts = sorted(g.rcpt_tos[0] for g in got)
    assert rcpts == ["new@example.net", "r0@example.net", "r4@example.net"], rcpts
    time.sleep(1.5)                     # a retry round over the bad files
    text = m.log_text()
    assert not worker_deaths(text), worker_deaths(text)
    assert m.proc.poll() is None
    assert sorted(m.children()) == workers
    # every damaged file is named in the log; none was delivered as is
    for qid in (garbled, truncated, empty, binary):
        assert qid in text, "%s (damaged) not logged:\n%s" % (qid, text[-3000:])
    delivered = [g.rcpt_tos[0] for g in sink.received()]
    for i in (1, 2, 3, 5):
        assert "r%d@example.net" % i not in delivered, delivered
    # the message with a garbage state file is not lost: delivered, or
    # kept in queue/ and logged
    assert "r4@example.net" in delivered or (
        badstate in m.queue_ids() and badstate in text), (delivered, text[-3000:])
    assert newid not in m.queue_ids() or wait_for(
        lambda: newid not in m.queue_ids(), 10)
    r = m.ctl("queue")
    if os.environ.get("ROBUST_DEBUG"):
        print(text[-4000:], r.returncode, r.stdout, r.stderr)
    assert r.returncode >= 0, "mtactl queue killed by signal %d" % -r.returncode
    assert r.returncode in (0, 1), (r.returncode, r.stdout, r.stderr)
    r = m.ctl("queue", "--json")
    assert r.returncode in (0, 1), (r.returncode, r.stdout, r.stderr)
    import json
    json.loads(r.stdout)
    damaged = (garbled, truncated, empty, binary, badstate, "0000000000000002",
               "0000000000000003", "0000000000000004")
    for args in (["queue", "--by-domain"], ["queue", "--state", "deferred"],
                 ["flush"], ["kick", "*"]):
        r = m.ctl(*args)
        assert r.returncode in (0, 1), (args, r.returncode, r.stdout, r.stderr)
    for qid in damaged:
        for args in (["show", qid], ["show", qid, "--body"],
                     ["show", qid, "--raw"], ["hold", qid], ["release", qid],
                     ["flush", qid], ["kick", qid], ["bounce", qid]):
            r = m.ctl(*args)
            assert r.returncode in (0, 1), (args, r.returncode, r.stdout,
                                            r.stderr)
            if r.returncode == 1:
                assert qid in r.stderr or qid.lower() in r.stderr, (
                    args, r.stderr)
    assert m.proc.poll() is None
    assert not worker_deaths(m.log_text())


# --- kill -9 of every process in the middle of a load ------------------------

def load_until_killed(m, total, kill_after, threads=6, master=True):
    """Send messages 0..total-1 from several connections; once kill_after
    were acknowledged, SIGKILL every child and the master.  Returns
    {serial: queue id} of the messages that got 250 after the final dot."""
    import threading
    from mtadtest import Client, dot_stuff
    acked = {}
    lock = threading.Lock()
    counter = iter(range(total))
    killed = threading.Event()

    def client():
        try:
            c = Client(m.port, timeout=5)
            c.greet()
        except (OSError, EOFError, AssertionError):
            return
        try:
            while not killed.is_set():
                with lock:
                    n = next(counter, None)
                if n is None:
                    return
                if c.cmd("MAIL FROM:<a@example.org>").code != 250:
                    return
                if c.cmd("RCPT TO:<r%d@example.net>" % n).code != 250:
                    return
                if c.cmd("DATA").code != 354:
                    return
                c.send(dot_stuff(make_message(n)))
                r = c.reply()
                mm = QUEUED_RE.search(r.text)
                if r.code == 250 and mm:
                    with lock:
                        acked[n] = mm.group(1).decode()
        except (OSError, EOFError, ValueError):
            return
        finally:
            c.close()

    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    deadline = time.time() + 20
    while time.time() < deadline:
        with lock:
            if len(acked) >= kill_after:
                break
        time.sleep(0.002)
    victims = m.children()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    if master:
        os.kill(m.pid, signal.SIGKILL)
        killed.set()
        m.proc.wait(10)
    for t in ts:
        t.join(15)
    killed.set()
    with lock:
        return dict(acked), victims


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_kill_everything_mid_load_loses_nothing(mtad_factory, sink):
    from mtadtest import strip_received as split_received
    sink.data_delay = 0.02              # keep some messages in flight
    m = mtad_factory({"routes": {"default": sink.route},
                      "delivery": {"retry": ["1s", "2s"]}}).start()
    acked, victims = load_until_killed(m, total=200, kill_after=100)
    assert len(acked) >= 100, len(acked)
    # wait for the killed children to be gone before the restart
    assert wait_for(lambda: not any(alive(p) for p in victims), 10)
    left = len(m.queue_ids())
    tmp_left = len(spool_files(m.spool, "tmp"))
    m.start()
    if os.environ.get("ROBUST_DEBUG"):
        print("acked", len(acked), "queued at restart", left, "tmp", tmp_left,
              "delivered before", len(sink.received()))
    serials = lambda: {int(g.data.split(b"X-Serial: ")[1].split(b"\r\n")[0])
                       for g in sink.received() if b"X-Serial: " in g.data}
    wait_for(lambda: set(acked) <= serials(), 30,
             what="every acknowledged message at the sink (missing: %s)" %
             sorted(set(acked) - serials())[:20])
    # bodies intact
    for g in sink.received():
        if b"X-Serial: " not in g.data:
            continue
        n = int(g.data.split(b"X-Serial: ")[1].split(b"\r\n")[0])
        _, rest = split_received(g.data)
        assert rest == make_message(n), n
    # the restarted daemon is healthy
    assert not worker_deaths(m.log_text().split("master: starting")[-1])
    assert wait_for(lambda: spool_files(m.spool, "tmp") == [], 10), \
        spool_files(m.spool, "tmp")


# --- reload with a broken configuration ---------------------------------------

def test_reload_with_broken_config_keeps_the_old_one(mtad_factory, hole, workdir):
    m = mtad_factory({"routes": {"default": hole.route()}}).start()
    workers = sorted(m.children())
    good = open(m.cfg_path, "rb").read()
    variants = [
        ("binary", bytes(range(256)) * 4),
        ("syntax", b"server: [\n"),
        ("wrong-type", good.replace(b"workers: 2", b"workers: [2]")),
        ("empty", b""),
    ]
    for name, data in variants:
        with open(m.cfg_path, "wb") as f:
            f.write(data)
        r = subprocess.run([MTACTL, "-s", m.sock, "-c", m.cfg_path, "reload"],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode >= 0, (name, r.returncode)
        assert r.returncode != 0, (name, r.stdout, r.stderr)
        # the same file via SIGHUP
        os.kill(m.pid, signal.SIGHUP)
        time.sleep(0.2)
        assert m.proc.poll() is None, name
        s = m.smtp()
        s.ehlo("after.test")
        assert s.noop()[0] == 250, name
        s.quit()
    os.rename(m.cfg_path, m.cfg_path + ".gone")
    os.mkdir(m.cfg_path)
    os.kill(m.pid, signal.SIGHUP)
    time.sleep(0.3)
    assert m.proc.poll() is None
    os.rmdir(m.cfg_path)
    os.rename(m.cfg_path + ".gone", m.cfg_path)
    with open(m.cfg_path, "wb") as f:
        f.write(good)
    text = m.log_text()
    assert not worker_deaths(text), worker_deaths(text)
    assert sorted(m.children()) == workers
    assert m.cfg_path in text, "reload errors do not name the file"


def test_fuzz_bare_newline_accept_small_limits(mtad_factory, hole):
    """bare_newline: accept lets the smuggling bodies through, so their
    stored bytes are compared; small limits exercise the error paths."""
    m = mtad_factory({"routes": {"default": hole.route()},
                      "server": {"workers": 1},
                      "limits": {"bare_newline": "accept", "max_errors": 5,
                                 "max_message_size": "64K",
                                 "max_recipients": 2}}).start()
    run_fuzz(m, seed=3 + SEED, n=150)


def test_kill_workers_mid_load_master_restarts_them(mtad_factory, sink):
    """Only the workers (and the log process) die; the master restarts
    them and every acknowledged message still arrives."""
    sink.data_delay = 0.02
    m = mtad_factory({"routes": {"default": sink.route},
                      "delivery": {"retry": ["1s", "2s"]}}).start()
    acked, victims = load_until_killed(m, total=150, kill_after=60,
                                       master=False)
    assert m.proc.poll() is None
    assert len(acked) >= 60
    serials = lambda: {int(g.data.split(b"X-Serial: ")[1].split(b"\r\n")[0])
                       for g in sink.received() if b"X-Serial: " in g.data}
    wait_for(lambda: set(acked) <= serials() and not m.queue_ids(), 30)
    missing = sorted(set(acked) - serials())
    assert not missing, "acknowledged but lost: %s (queue %s)" % (
        missing[:20], m.queue_ids()[:20])
    assert m.wait_log("restarting")


# --- once bugs, now fixed: a damaged state file, an over-long socket path ----

def test_message_with_garbage_state_is_still_delivered(mtad_factory, sink):
    from mtadtest import closed_port, send
    m = mtad_factory({"routes": {"default": "smtp:[127.0.0.1]:%d" % closed_port()},
                      "delivery": {"retry": ["1s", "30s"]}})
    m.start()
    qid = send(m, "a@example.org", ["r@example.net"], make_message(1))
    m.wait_log("%s: to=<r" % qid)
    m.stop()
    with open(os.path.join(m.spool, "state", qid), "wb") as f:
        f.write(b"\0garbage\xff\n")
    m.cfg["routes"]["default"] = sink.route
    m.write_config()
    m.start()
    m.wait_log(qid + ": ")
    got = sink.wait_for(1, timeout=5)
    assert got[0].rcpt_tos == ["r@example.net"]


def test_check_rejects_a_control_socket_path_too_long(workdir):
    from mtadtest import to_yaml
    cfg = base_config(workdir)
    cfg["server"]["control_socket"] = os.path.join(workdir, "s" * 150)
    path = os.path.join(workdir, "long.yaml")
    with open(path, "w") as f:
        f.write(to_yaml(cfg))
    rc, out = check_cli(path, "mtad")
    assert rc == 1 and "control_socket" in out, (rc, out)


# --- the control socket ----------------------------------------------------------

def test_control_socket_garbage_never_kills_the_master(mtad_factory, hole):
    import random
    import socket as so
    m = mtad_factory({"routes": {"default": hole.route()}}).start()
    rnd = random.Random(11 + SEED)
    requests = [b"status\n", b"kick *\n", b"kick " + b"A" * 16 + b"\n",
                b"kick \0\n", b"kick " + b"z" * 2000 + b"\n", b"\n", b"\0\n",
                b"status", b"reload\n", b"check\n", b"x" * 5000,
                b"status\r\n\r\n\r\n", b"stat", b"reload", b"\xff\xfe\n",
                b"kick" + b" " * 1023 + b"\n", b"check\nstatus\nreload\n"]
    held = []
    for i in range(150):
        t0 = time.time()
        s = so.socket(so.AF_UNIX, so.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(m.sock)
        except OSError:
            s.close()
            time.sleep(0.05)
            continue
        kind = rnd.random()
        try:
            if kind < 0.6:
                req = rnd.choice(requests)
            elif kind < 0.8:
                req = bytes(rnd.randrange(256)
                            for _ in range(rnd.randrange(1, 3000)))
            else:
                req = b""
            s.sendall(req)
            # read the answer of a complete request (an incomplete one is
            # only answered when the master's 5 s client timeout fires)
            if (b"\n" in req or len(req) >= 1024) and rnd.random() < 0.3:
                s.recv(65536)
        except OSError:
            pass
        if os.environ.get("ROBUST_DEBUG") and time.time() - t0 > 0.5:
            print("slow", i, time.time() - t0, kind, len(held))
        if rnd.random() < 0.15 and len(held) < 40:
            held.append(s)                  # keep it open, silent
        else:
            if rnd.random() < 0.5:
                s.setsockopt(so.SOL_SOCKET, so.SO_LINGER,
                             b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
    for s in held:
        s.close()
    assert m.proc.poll() is None, "master died: %s" % m.stderr_text()
    # mtad still answers mtactl and SMTP
    r = m.ctl("status")
    assert r.returncode == 0, (r.stdout, r.stderr)
    s = m.smtp()
    s.ehlo("after.test")
    assert s.noop()[0] == 250
    s.quit()
    text = m.log_text()
    if os.environ.get("ROBUST_DEBUG"):
        print("\n".join(l for l in text.splitlines() if "master" in l)[-3000:])
    assert "exited on signal" not in text, worker_deaths(text)


def test_control_answers_quote_no_control_byte_and_drain_wants_digits(
        mtad_factory):
    """The control socket's error answers escape what they quote of the
    request (mtactl prints them to a terminal), and "drain" takes a plain
    number of ms: "drain -1" once wrapped to 2^64-1 ms, a deadline in the
    past (master/ctl_req.c)."""
    import socket as so
    m = mtad_factory().start()

    def ask(req):
        s = so.socket(so.AF_UNIX, so.SOCK_STREAM)
        s.settimeout(10)
        try:
            s.connect(m.sock)
            s.sendall(req)
            return recv_until_eof(s)
        finally:
            s.close()
    got = ask(b"\x1b]0;owned\x07\x9b2J\r\n")
    assert got == b"error: unknown request '\\x1b]0;owned\\x07\\x9b2J'\n", got
    for req in (b"drain -1\n", b"drain +5\n", b"drain  5\n",
                b"drain 99999999999999999999\n"):
        got = ask(req)
        assert got == b"error: drain: expected a timeout in ms\n", (req, got)
    assert m.ctl("status").returncode == 0
