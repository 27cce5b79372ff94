"""Helpers for the robustness tests (test_robustness.py): a seeded live
SMTP protocol fuzzer, reply-syntax checks, and queue verification.

The fuzzer runs N connections (a few at a time, in threads), each a seeded
random script of valid commands, mutated commands and whole transactions.
Every body sent after a 354 carries a unique marker line, so a queue file
can be matched to the bytes that were sent whatever order the replies came
in.  Everything is bounded: socket timeouts, step counts, total bytes.
"""
import os
import random
import re
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from smtp_util import read_queue_file, strip_received

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


def dot_stuff(body):
    """CRLF-line dot stuffing + terminator (body must end with CRLF)."""
    out = body.replace(b"\r\n.", b"\r\n..")
    if out.startswith(b"."):
        out = b"." + out
    return out + b".\r\n"


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
