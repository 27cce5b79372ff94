"""shapesim - simulated mail providers that enforce per-source-IP limits.

A receiver simulator for traffic-shaping tests and benches (issue 35):
several providers ("gmail", "outlook", ...), each listening on its own
loopback addresses, each enforcing limits per *source IP* the way the big
receivers do, scripting recipient replies by class, recording every
delivery and counting every time a source broke a limit (a *violation*:
what tests and benches assert on).  Python 3 standard library only
(asyncio in one background thread); loopback only.

In-process use (pytest)
-----------------------
    from shapesim import Sim, Provider, standard_providers

    sim = Sim([Provider("gmail", ["127.0.1.1", "127.0.1.2"], port=25,
                        max_conns=2, max_msgs=10, per_minute=100,
                        penalty=30)]).start()
    ...                              # mtad delivers to gmail.mtad.test
    recs = sim.wait_for(5, timeout=30)      # at least 5 deliveries
    assert sim.violations("gmail") == 0
    sim.set_mode("gmail", "silent")         # dead from now on
    sim.set("gmail", per_minute=10)         # change a limit live
    print(sim.stats())                      # JSON-able dict, below
    sim.stop()
or `with Sim(...) as sim:`.  `standard_providers(port=25)` gives the
providers behind the test zone's MX records (tests/integration/mtadtest.py):

    name     domains (MX)                    addresses
    gmail    gmail, googlemail, workspace    127.0.1.1, 127.0.1.2
    outlook  outlook, hotmail                127.0.2.1
    yahoo    yahoo                           127.0.3.1
    open     open                            127.0.4.1  (no limits)
  (all under .mtad.test; mtad's egress sources are 127.0.0.2-127.0.0.5)
each with its preset limits (PRESETS; override per provider:
`standard_providers(gmail={"max_conns": 2}, open=None)` - None leaves a
provider out).  A limit of None (the default for every limit) is no limit.
Port 25 needs root (tests run in their own network namespace: see
docs/TESTING.md); port=0 picks one free port shared by all addresses of a
provider (Provider.port tells which after start()).

Provider(name, addrs, port=25, **limits) - limits and behaviour
(every one can be changed live with sim.set(name, key=value)):
  max_conns     concurrent connections per source IP, counted across all
                the provider's addresses.  One more is answered at the
                greeting with conn_reply ("421 4.7.0 too many connections
                from your IP") and closed.  Violation "conns".  A
                connection counts from accept until it closes; before
                refusing, the simulator lets the event loop run a few
                turns and waits conn_grace (0.05 s) so that a client that
                closed one connection and opened the next at once is not
                miscounted.
  conn_rates    [(count, seconds), ...]: new connections per source per
                sliding window (conn_per_minute=N is [(N, 60)]); one more
                gets conn_rate_reply at the greeting.  Violation
                "conn_rate".
  max_msgs      transactions (MAIL commands taken) per connection.  One
                more: msgs_action "close" (default) answers mailmax_reply
                ("421 4.7.0 too many messages in this connection") and
                closes; "reply" answers "451 4.7.0 ..." and keeps the
                connection (the client must QUIT).  Violation "msgs".
  max_rcpts     recipients per transaction; more get "452 4.5.3 Too many
                recipients".  Violation "rcpts".
  per_second, per_minute, per_hour, rates=[(count, seconds), ...]
                messages per source IP per sliding window (all that are
                set apply).  A message over any of them is answered with
                rate_reply (Gmail's "421 4.7.28 [SRC] ... rate limited")
                and the connection closes.  Violation "rate".  Where it is
                checked: rate_at = "mail" (default, at MAIL FROM), "rcpt"
                (first RCPT) or "data" (end of data, the message is not
                taken).  A message taken counts in the windows at that
                point.
  penalty       seconds: a rate violation starts a penalty *episode* for
                that source (stats "episodes"); until it ends every new
                connection is answered with rate_reply at the greeting and
                every MAIL with rate_reply (close).  Each such attempt is a
                violation "penalty".  0 (default): no penalty, only the
                message over the rate is refused.  A well-behaved sender
                provokes at most one violation per episode.
  replies       [(local-part glob, stage, reply, delay), ...] scripted
                recipient replies, first match wins (case-insensitive
                fnmatch on the local part).  stage "rcpt": RCPT is answered
                `reply` after `delay` seconds (reply None: the normal 250
                after the delay); stage "data": RCPT is taken and the end
                of data is answered `reply` when any recipient of the
                message matches (the message is not taken).  "{src}" in a
                reply becomes the source IP.  Any reply starting "421"
                closes the connection after it is sent.  DEFAULT_REPLIES:
                    nouser*   rcpt 550 5.1.1 (no such user)
                    full*     rcpt 452 4.2.2 (mailbox full)
                    spam*     rcpt 550 5.7.1 (IP reputation, spam)
                    policy*   rcpt 554 5.7.1 (local policy)
                    defer*    rcpt 451 4.3.0 (temporary)
                    baddomain* rcpt 550 5.1.2 (bad destination domain)
                    protocol* rcpt 501 5.5.4 (syntax error)
                    content*  data 554 5.6.0 (content rejected)
                    toobig*   data 554 5.3.4 (message too big)
                    slow*     rcpt 250 after 2 s
                Every non-2xx reply the simulator gives is in sim.events().
  mode          "normal"; "silent" (accept TCP, never greet: a dead host
                that times out), "refuse" (listening sockets closed:
                connection refused), "busy" (greeting "421 4.3.2 Service
                not available" and close), "reset" (accept and reset).
                sim.set_mode(name, mode) switches at run time (connections
                already open go on).
  greet_delay, data_delay   seconds before the banner / the end-of-data
                reply (slow but alive).  A client that hangs up during a
                data_delay or a scripted RCPT delay ends its session at
                once (as a real server's read would see the FIN): it is
                not counted open for the rest of the delay.
  caps          EHLO keywords (default PIPELINING, SIZE, 8BITMIME,
                ENHANCEDSTATUSCODES, SMTPUTF8; no CHUNKING, so DATA)
  hostname      the name in the banner and EHLO reply
  conn_reply, conn_rate_reply, mailmax_reply, rate_reply  reply texts
                (PRESETS give each provider its own style)

Records and statistics
----------------------
sim.records(provider=None) -> list of dicts, one per message taken (250
after data), in order:
    provider, addr (address it connected to), port, src (source IP),
    sport, ehlo, mail_from, rcpts (taken), message_id, x ({X-* header:
    value}, the first 16), size, time (time.time()), conn (connection
    number, unique), n (transaction number in that connection)
sim.wait_for(n, timeout, provider=None) -> the records once there are
    at least n (AssertionError with the stats when the deadline passes).
sim.events() -> every non-2xx reply given and each refused connection:
    {provider, src, stage (greeting/mail/rcpt/data), reply, rcpt, kind
    (the violation kind, or None), time}; the first 200,000.
sim.violations(provider=None, src=None, kind=None) -> int.
sim.stats() -> {"time", "deliveries", "violations",
    "providers": {name: {"mode", "addrs", "port", "limits": {...},
      "deliveries", "violations", "sources": {src: {
        "connections" (past the greeting checks), "open" (now),
        "max_open" (most open at once),
        "messages" (taken), "rcpts", "refused" (connections refused),
        "violations": {kind: n}, "episodes", "penalty_until" (seconds
        from now, 0 when none), "first", "last" (time of the first and
        last message taken), "ehlo" ({name: connections})}}}}}
sim.source(provider, src) -> that one source's dict as in stats().
sim.wait(cond, timeout, what) polls cond(sim) until true (AssertionError
    with the stats at the deadline); sim.records_since(n) -> (records from
    the n-th on, the count now), for polling without copying them all.
sim.reset() clears records, events, counters, windows and penalties.

CLI (for benches and manual tests)
----------------------------------
    python3 tests/integration/shapesim.py serve [--config FILE.json]
        [--port 25] [--stats FILE] [--stats-every 1.0] [--records FILE]
        [--control SOCKET] [--quiet]
  serves the providers of --config (JSON: {"port": 25, "providers":
  [{"name": ..., "addrs": [...], "port": ..., "max_conns": ..., ...}]},
  keys as for Provider; replies as lists) or the standard ones.  Prints
  "shapesim: ready" on stdout once listening.  --stats rewrites FILE
  (atomically) every --stats-every seconds and at exit with sim.stats();
  --records appends one JSON line per record; SIGTERM/SIGINT end it
  after a final write.  --control SOCKET serves a Unix socket: one JSON
  request per line, one JSON answer per line:
    {"cmd": "stats"}                              -> the stats
    {"cmd": "records", "since": N}               -> {"records": [...], "next": M}
    {"cmd": "events", "since": N}                -> {"events": [...], "next": M}
    {"cmd": "mode", "provider": P, "mode": M}     -> {"ok": true}
    {"cmd": "set", "provider": P, "limits": {...}} -> {"ok": true}
    {"cmd": "reset"}                              -> {"ok": true}
  errors: {"error": "text"}.  From a shell:
    python3 tests/integration/shapesim.py ctl SOCKET stats
    python3 tests/integration/shapesim.py ctl SOCKET mode gmail silent
    python3 tests/integration/shapesim.py ctl SOCKET set gmail per_minute=60
  In Python: ctl(socket_path, {"cmd": "stats"}).

Text from clients (EHLO names, addresses, headers) is kept as received
(decoded with errors="replace"); escape it before printing it anywhere.
"""
import argparse
import asyncio
import copy
import fnmatch
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque

GMAIL_RATE = ("421 4.7.28 [{src}] Our system has detected an unusual rate "
              "of unsolicited mail originating from your IP address. To "
              "protect our users from spam, mail sent from your IP address "
              "has been temporarily rate limited.")
CONN_REPLY = "421 4.7.0 too many connections from your IP"
CONN_RATE_REPLY = "421 4.7.0 too many new connections from your IP, slow down"
MAILMAX_REPLY = "421 4.7.0 too many messages in this connection"
MAILMAX_SOFT = "451 4.7.0 too many messages in this connection, try later"

DEFAULT_REPLIES = [
    ("nouser*", "rcpt", "550 5.1.1 The email account that you tried to "
     "reach does not exist.", 0),
    ("full*", "rcpt", "452 4.2.2 The recipient's inbox is out of storage "
     "space.", 0),
    ("spam*", "rcpt", "550 5.7.1 [{src}] Our system has detected that this "
     "message is likely unsolicited mail; the IP you are using has a poor "
     "reputation.", 0),
    ("policy*", "rcpt", "554 5.7.1 Message rejected due to local policy.", 0),
    ("defer*", "rcpt", "451 4.3.0 Temporary local problem, try again "
     "later.", 0),
    ("baddomain*", "rcpt", "550 5.1.2 The recipient's domain does not "
     "accept mail here.", 0),
    ("protocol*", "rcpt", "501 5.5.4 Syntax error in parameters.", 0),
    ("content*", "data", "554 5.6.0 Message content rejected.", 0),
    ("toobig*", "data", "554 5.3.4 Message too big for system.", 0),
    ("slow*", "rcpt", None, 2.0),
]

DEFAULT_CAPS = ("PIPELINING", "SIZE 52428800", "8BITMIME",
                "ENHANCEDSTATUSCODES", "SMTPUTF8")

# Starting points in each provider's own style (the real ones do not
# publish their limits; these are small enough for tests to reach).
PRESETS = {
    "gmail": dict(max_conns=10, max_msgs=100, per_minute=600, penalty=60,
                  rate_reply=GMAIL_RATE),
    "outlook": dict(max_conns=5, max_msgs=30, per_minute=300, penalty=60,
                    conn_reply="421 4.3.2 The maximum number of concurrent "
                    "server connections has exceeded a limit, closing "
                    "transmission channel",
                    rate_reply="421 4.7.500 Server busy. Please try again "
                    "later from [{src}]. (S77714) rate limited"),
    "yahoo": dict(max_conns=4, max_msgs=20, per_minute=200, penalty=60,
                  rate_reply="421 4.7.0 [TSS04] Messages from {src} "
                  "temporarily deferred due to unexpected volume or user "
                  "complaints - 4.16.55.1; see https://postmaster.yahooinc"
                  ".com/error-codes (rate limited)"),
    "open": dict(),
}

STANDARD = [
    ("gmail", ["127.0.1.1", "127.0.1.2"]),
    ("outlook", ["127.0.2.1"]),
    ("yahoo", ["127.0.3.1"]),
    ("open", ["127.0.4.1"]),
]

MODES = ("normal", "silent", "refuse", "busy", "reset")
STAGES = ("mail", "rcpt", "data")
EVENTS_MAX = 200000
SILENT_HOLD = 600.0         # a silent connection is closed after this


class Provider:
    """One simulated provider: addresses, limits, behaviour (see the
    module docstring for every key)."""

    KEYS = ("max_conns", "conn_rates", "conn_per_minute", "max_msgs",
            "msgs_action", "max_rcpts", "per_second", "per_minute",
            "per_hour", "rates", "rate_at", "penalty", "replies", "mode",
            "greet_delay", "data_delay", "caps", "hostname", "conn_reply",
            "conn_rate_reply", "mailmax_reply", "rate_reply", "conn_grace")

    def __init__(self, name, addrs, port=25, **kw):
        self.name = name
        self.addrs = list(addrs)
        self.port = port
        self.max_conns = None
        self.conn_rates = []
        self.conn_per_minute = None
        self.max_msgs = None
        self.msgs_action = "close"
        self.max_rcpts = None
        self.per_second = None
        self.per_minute = None
        self.per_hour = None
        self.rates = []
        self.rate_at = "mail"
        self.penalty = 0.0
        self.replies = list(DEFAULT_REPLIES)
        self.mode = "normal"
        self.greet_delay = 0.0
        self.data_delay = 0.0
        self.caps = list(DEFAULT_CAPS)
        self.hostname = "mx.%s.sim" % name
        self.conn_reply = CONN_REPLY
        self.conn_rate_reply = CONN_RATE_REPLY
        self.mailmax_reply = MAILMAX_REPLY
        self.rate_reply = GMAIL_RATE
        self.conn_grace = 0.05
        self.configure(**kw)

    def configure(self, **kw):
        for k, v in kw.items():
            if k not in self.KEYS:
                raise ValueError("shapesim: provider %s: unknown key %r"
                                 % (self.name, k))
            if k == "mode" and v not in MODES:
                raise ValueError("shapesim: mode %r not one of %s"
                                 % (v, ", ".join(MODES)))
            if k == "rate_at" and v not in STAGES:
                raise ValueError("shapesim: rate_at %r not one of %s"
                                 % (v, ", ".join(STAGES)))
            if k == "msgs_action" and v not in ("close", "reply"):
                raise ValueError("shapesim: msgs_action is close or reply")
            if k in ("replies", "rates", "conn_rates"):
                v = [tuple(x) for x in v or []]
            setattr(self, k, v)

    def windows(self):
        """The message rate windows in force: [(count, seconds)]."""
        w = list(self.rates)
        for n, secs in ((self.per_second, 1.0), (self.per_minute, 60.0),
                        (self.per_hour, 3600.0)):
            if n is not None:
                w.append((n, secs))
        return w

    def conn_windows(self):
        w = list(self.conn_rates)
        if self.conn_per_minute is not None:
            w.append((self.conn_per_minute, 60.0))
        return w

    def limits(self):
        return {k: getattr(self, k) for k in self.KEYS
                if k not in ("replies", "caps", "hostname", "mode")}

    def script(self, local):
        local = local.lower()
        for pat, stage, reply, delay in self.replies:
            if fnmatch.fnmatchcase(local, pat.lower()):
                return stage, reply, delay
        return None


def standard_providers(port=25, **over):
    """The providers behind the test zone's MX records, with PRESETS;
    over[name] is a dict of keys to change, or None to leave it out."""
    out = []
    for name, addrs in STANDARD:
        o = over.get(name, {})
        if o is None:
            continue
        kw = dict(PRESETS[name])
        kw.update(o)
        out.append(Provider(name, addrs, port=port, **kw))
    return out


class _Source:
    """Per (provider, source IP) state and counters."""

    def __init__(self):
        self.connections = 0
        self.open = 0
        self.max_open = 0
        self.messages = 0
        self.rcpts = 0
        self.refused = 0
        self.violations = {}
        self.episodes = 0
        self.penalty_until = 0.0
        self.first = None
        self.last = None
        self.ehlo = {}
        self.over = False               # the last message was refused
        self.msg_win = {}               # (count, secs) -> deque of times
        self.conn_win = {}

    def view(self, now):
        return {"connections": self.connections, "open": self.open,
                "max_open": self.max_open, "messages": self.messages,
                "rcpts": self.rcpts, "refused": self.refused,
                "violations": dict(self.violations),
                "episodes": self.episodes,
                "penalty_until": max(0.0, self.penalty_until - now),
                "first": self.first, "last": self.last,
                "ehlo": dict(self.ehlo)}


def _over(wins, windows, now):
    """True when one more event now would exceed one of windows
    [(count, secs)]; wins maps each window to the deque of its events'
    times (a window added at run time starts empty)."""
    over = False
    for w in windows:
        dq = wins.get(w)
        if dq is None:
            dq = wins[w] = deque()
        while dq and dq[0] <= now - w[1]:
            dq.popleft()
        if len(dq) >= w[0]:
            over = True
    return over


def _take(wins, windows, now):
    for w in windows:
        wins[w].append(now)


def _path(arg):
    """'FROM:<a@b> SIZE=1' -> 'a@b'."""
    _, _, rest = arg.partition(":")
    rest = rest.strip()
    if rest.startswith("<"):
        end = rest.find(">")
        return rest[1:end] if end > 0 else rest[1:]
    return rest.split()[0] if rest.split() else ""


def _headers(data):
    """Message-ID and the X-* headers of a message (bytes)."""
    head = data.split(b"\r\n\r\n", 1)[0].decode("utf-8", "replace")
    mid, xs = None, {}
    name = None
    for line in head.split("\r\n"):
        if line[:1] in (" ", "\t") and name:
            if name == "message-id":
                mid += line.strip()
            continue
        k, sep, v = line.partition(":")
        if not sep:
            name = None
            continue
        name = k.strip().lower()
        if name == "message-id" and mid is None:
            mid = v.strip()
        elif name.startswith("x-") and len(xs) < 16:
            xs[k.strip()] = v.strip()
    return mid, xs


class _Conn:
    def __init__(self, sim, p, reader, writer, cid):
        self.sim = sim
        self.p = p
        self.r = reader
        self.w = writer
        self.cid = cid
        peer = writer.get_extra_info("peername") or ("?", 0)
        local = writer.get_extra_info("sockname") or ("?", 0)
        self.src, self.sport = peer[0], peer[1]
        self.addr, self.port = local[0], local[1]
        self.ehlo = None
        self.n = 0                      # transactions taken (MAIL 250)
        self.reset()

    def reset(self):
        self.mail_from = None
        self.rcpts = []
        self.data_reply = None
        self.admitted = False

    def say(self, line):
        self.w.write(line.encode("utf-8", "replace") + b"\r\n")

    async def run(self):
        """Returns when the session is over; the caller closes."""
        p = self.p
        if p.greet_delay:
            await asyncio.sleep(p.greet_delay)
        self.say("220 %s ESMTP shapesim %s" % (p.hostname, p.name))
        while True:
            line = await self.r.readline()
            if not line:
                return
            if not line.endswith(b"\n"):
                return                  # overlong or cut: drop it
            cmd = line.decode("utf-8", "replace").rstrip("\r\n")
            verb, _, arg = cmd.partition(" ")
            verb = verb.upper()
            h = getattr(self, "c_" + verb.lower(), None) if verb.isalpha() \
                else None
            if h is None:
                self.say("502 5.5.2 command not recognized")
                continue
            if await h(arg) is False:
                await self.w.drain()
                return
            if not self.r._buffer:      # answer pipelined batches at once
                await self.w.drain()

    async def pause(self, secs):
        """Wait secs, as a server busy with a command does, but notice a
        client that hangs up meanwhile (its FIN, as a real server's read
        would): False then, and the session ends, so a dead client's
        connection does not stay counted open for the whole delay."""
        end = time.monotonic() + secs
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            # a FIN (EOF), or a reset (a client that closes with our
            # replies unread, or is killed, resets)
            if (self.r._eof or self.r.exception() is not None or
                    self.w.is_closing()):
                return False
            await asyncio.sleep(min(0.05, left))

    def reply_closes(self, reply):
        self.say(reply)
        return not reply.startswith("421")

    async def c_ehlo(self, arg):
        self.ehlo = arg.strip()
        self.sim._note_ehlo(self)
        self.reset()
        lines = [self.p.hostname] + list(self.p.caps)
        for i, l in enumerate(lines):
            self.say("250%s%s" % ("-" if i < len(lines) - 1 else " ", l))

    async def c_helo(self, arg):
        self.ehlo = arg.strip()
        self.sim._note_ehlo(self)
        self.reset()
        self.say("250 %s" % self.p.hostname)

    async def c_mail(self, arg):
        if self.ehlo is None:
            self.say("503 5.5.1 EHLO first")
            return
        if self.mail_from is not None:
            self.say("503 5.5.1 nested MAIL")
            return
        verdict = self.sim._check_mail(self)
        if verdict is not None:
            return self.reply_closes(verdict)
        self.mail_from = _path(arg)
        self.n += 1
        self.say("250 2.1.0 OK")

    async def c_rcpt(self, arg):
        if self.mail_from is None:
            self.say("503 5.5.1 MAIL first")
            return
        rcpt = _path(arg)
        p = self.p
        if p.max_rcpts is not None and len(self.rcpts) >= p.max_rcpts:
            self.sim._violate(self, "rcpts", "rcpt",
                              "452 4.5.3 Too many recipients", rcpt)
            self.say("452 4.5.3 Too many recipients")
            return
        s = p.script(rcpt.partition("@")[0])
        if s is not None:
            stage, reply, delay = s
            if delay and not await self.pause(delay):
                return False
            if stage == "rcpt" and reply is not None:
                reply = reply.replace("{src}", self.src)
                self.sim._event(self, "rcpt", reply, rcpt, None)
                return self.reply_closes(reply)
            if stage == "data" and self.data_reply is None:
                self.data_reply = (reply or "").replace("{src}", self.src)
        if p.rate_at == "rcpt" and not self.admitted:
            verdict = self.sim._admit(self)
            if verdict is not None:
                return self.reply_closes(verdict)
            self.admitted = True
        self.rcpts.append(rcpt)
        self.say("250 2.1.5 OK")

    async def c_data(self, arg):
        if not self.rcpts:
            self.say("554 5.5.1 no valid recipients")
            return
        self.say("354 go ahead")
        await self.w.drain()
        chunks, size = [], 0
        while True:
            line = await self.r.readline()
            if not line:
                return False
            if line == b".\r\n" or line == b".\n":
                break
            if line.startswith(b"."):
                line = line[1:]
            size += len(line)
            if size <= 64 * 1024 * 1024:
                chunks.append(line)
        data = b"".join(chunks)
        if self.p.data_delay and not await self.pause(self.p.data_delay):
            return False
        try:
            if self.p.rate_at == "data":
                verdict = self.sim._admit(self)
                if verdict is not None:
                    return self.reply_closes(verdict)
            if self.data_reply:
                self.sim._event(self, "data", self.data_reply,
                                ",".join(self.rcpts), None)
                return self.reply_closes(self.data_reply)
            self.sim._deliver(self, data, size)
            self.say("250 2.0.0 OK queued as %d.%d" % (self.cid, self.n))
        finally:
            self.reset()

    async def c_rset(self, arg):
        self.reset()
        self.say("250 2.0.0 OK")

    async def c_noop(self, arg):
        self.say("250 2.0.0 OK")

    async def c_quit(self, arg):
        self.say("221 2.0.0 bye")
        return False


class Sim:
    """The simulator: providers served from one asyncio loop in a
    background thread.  Thread-safe queries; see the module docstring."""

    def __init__(self, providers=None, records_file=None):
        self.providers = {}
        for p in providers if providers is not None else standard_providers():
            if p.name in self.providers:
                raise ValueError("shapesim: provider %s twice" % p.name)
            self.providers[p.name] = p
        self.lock = threading.Lock()
        self.records_file = records_file
        self._loop = None
        self._thread = None
        self._servers = {}
        self._ready = threading.Event()
        self._error = None
        self._cid = 0
        self.reset()

    # ---- lifecycle ----
    def start(self, timeout=10.0):
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="shapesim")
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("shapesim did not start in %ss" % timeout)
        if self._error is not None:
            self._thread.join(timeout)
            raise self._error
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()

    def _run(self):
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            for p in self.providers.values():
                if p.mode != "refuse":
                    loop.run_until_complete(self._listen(p))
        except Exception as e:          # reported by start()
            self._error = e
            self._ready.set()
            for srvs in self._servers.values():
                for s in srvs:
                    s.close()
            loop.close()
            return
        self._ready.set()
        loop.run_forever()
        for srvs in self._servers.values():
            for s in srvs:
                s.close()
        pending = asyncio.all_tasks(loop)
        for t in pending:
            t.cancel()
        loop.run_until_complete(asyncio.gather(*pending,
                                               return_exceptions=True))
        loop.close()

    def stop(self):
        if self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def call(self, coro, timeout=10.0):
        """Run a coroutine on the simulator's loop, wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(
            timeout)

    async def _listen(self, p):
        if p.port == 0:
            p.port = _free_port(p.addrs)
        srvs = []
        try:
            for a in p.addrs:
                srvs.append(await asyncio.start_server(
                    lambda r, w, p=p: self._session(p, r, w), a, p.port,
                    reuse_address=True, backlog=1024, limit=1 << 20))
        except Exception:
            for s in srvs:
                s.close()
            raise
        self._servers[p.name] = srvs

    # ---- control ----
    def provider(self, name):
        try:
            return self.providers[name]
        except KeyError:
            raise ValueError("shapesim: no provider %r" % name) from None

    def set(self, name, **kw):
        """Change limits or behaviour of a provider at run time."""
        p = self.provider(name)
        mode = kw.pop("mode", None)
        with self.lock:
            p.configure(**kw)
        if mode is not None:
            self.set_mode(name, mode)

    def set_mode(self, name, mode):
        p = self.provider(name)
        if mode not in MODES:
            raise ValueError("shapesim: mode %r not one of %s"
                             % (mode, ", ".join(MODES)))
        if self._loop is None:
            p.mode = mode
            return
        self.call(self._set_mode(p, mode))

    async def _set_mode(self, p, mode):
        old = p.mode
        p.mode = mode
        if mode == "refuse" and old != "refuse":
            for s in self._servers.pop(p.name, []):
                s.close()
        elif old == "refuse" and mode != "refuse":
            await self._listen(p)

    def reset(self):
        with self.lock:
            self._records = []
            self._events = []
            self._src = {}              # (provider, ip) -> _Source

    # ---- queries ----
    def records(self, provider=None):
        with self.lock:
            return [r for r in self._records
                    if provider is None or r["provider"] == provider]

    def records_since(self, n):
        with self.lock:
            return self._records[n:], len(self._records)

    def events(self, provider=None):
        with self.lock:
            return [e for e in self._events
                    if provider is None or e["provider"] == provider]

    def violations(self, provider=None, src=None, kind=None):
        with self.lock:
            n = 0
            for (pn, ip), s in self._src.items():
                if provider not in (None, pn) or src not in (None, ip):
                    continue
                for k, v in s.violations.items():
                    if kind in (None, k):
                        n += v
            return n

    def source(self, provider, src):
        """The counters of one (provider, source IP) as in stats()."""
        with self.lock:
            s = self._src.get((provider, src))
            return s.view(time.monotonic()) if s else _Source().view(0)

    def stats(self):
        now = time.monotonic()
        with self.lock:
            out = {"time": time.time(), "deliveries": len(self._records),
                   "violations": 0, "providers": {}}
            for p in self.providers.values():
                lim = copy.deepcopy(p.limits())
                lim["conn_rates"] = [list(x) for x in p.conn_windows()]
                lim["rates"] = [list(x) for x in p.windows()]
                pv = {"mode": p.mode, "addrs": list(p.addrs),
                      "port": p.port, "limits": lim, "deliveries": 0,
                      "violations": 0, "sources": {}}
                out["providers"][p.name] = pv
            for (pn, ip), s in self._src.items():
                pv = out["providers"][pn]
                v = s.view(now)
                pv["sources"][ip] = v
                pv["deliveries"] += s.messages
                nv = sum(s.violations.values())
                pv["violations"] += nv
                out["violations"] += nv
            return out

    def wait_for(self, n, timeout=30.0, provider=None):
        """The records once at least n are there; fails loudly."""
        deadline = time.monotonic() + timeout
        while True:
            recs = self.records(provider)
            if len(recs) >= n:
                return recs
            if time.monotonic() >= deadline:
                raise AssertionError(
                    "shapesim: %d of %d deliveries%s after %ss; stats: %s"
                    % (len(recs), n, " to " + provider if provider else "",
                       timeout, json.dumps(self.stats(), indent=1)))
            time.sleep(0.02)

    def wait(self, cond, timeout=30.0, what="condition"):
        """Poll cond(sim) until true (bounded); returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            v = cond(self)
            if v:
                return v
            if time.monotonic() >= deadline:
                raise AssertionError("shapesim: %s not met in %ss; stats: %s"
                                     % (what, timeout,
                                        json.dumps(self.stats(), indent=1)))
            time.sleep(0.02)

    # ---- bookkeeping (loop thread, under the lock) ----
    def _s(self, p, ip):
        s = self._src.get((p.name, ip))
        if s is None:
            s = self._src[(p.name, ip)] = _Source()
        return s

    def _event(self, c, stage, reply, rcpt, kind):
        with self.lock:
            self._event_locked(c.p.name, c.src, stage, reply, rcpt, kind)

    def _event_locked(self, pname, src, stage, reply, rcpt, kind):
        if len(self._events) < EVENTS_MAX:
            self._events.append({"provider": pname, "src": src,
                                 "stage": stage, "reply": reply,
                                 "rcpt": rcpt, "kind": kind,
                                 "time": time.time()})

    def _violate_locked(self, p, src, kind, stage, reply, rcpt=None):
        s = self._s(p, src)
        s.violations[kind] = s.violations.get(kind, 0) + 1
        self._event_locked(p.name, src, stage, reply, rcpt, kind)

    def _violate(self, c, kind, stage, reply, rcpt=None):
        with self.lock:
            self._violate_locked(c.p, c.src, kind, stage, reply, rcpt)

    def _note_ehlo(self, c):
        with self.lock:
            s = self._s(c.p, c.src)
            s.ehlo[c.ehlo] = s.ehlo.get(c.ehlo, 0) + 1

    def _penalized_locked(self, p, src, now):
        s = self._s(p, src)
        return s.penalty_until > now

    def _gate(self, p, src):
        """At accept: None to go on, or the reply to refuse with."""
        now = time.monotonic()
        s = self._s(p, src)
        if self._penalized_locked(p, src, now):
            reply = p.rate_reply.replace("{src}", src)
            self._violate_locked(p, src, "penalty", "greeting", reply)
            return reply
        if p.max_conns is not None and s.open >= p.max_conns:
            return "conns"
        if _over(s.conn_win, p.conn_windows(), now):
            reply = p.conn_rate_reply.replace("{src}", src)
            self._violate_locked(p, src, "conn_rate", "greeting", reply)
            return reply
        return None

    def _check_mail(self, c):
        """At MAIL: None when taken, else the reply (violation counted)."""
        p, now = c.p, time.monotonic()
        with self.lock:
            if self._penalized_locked(p, c.src, now):
                reply = p.rate_reply.replace("{src}", c.src)
                self._violate_locked(p, c.src, "penalty", "mail", reply)
                return reply
            if p.max_msgs is not None and c.n >= p.max_msgs:
                reply = p.mailmax_reply if p.msgs_action == "close" \
                    else MAILMAX_SOFT
                self._violate_locked(p, c.src, "msgs", "mail", reply)
                return reply
        if p.rate_at == "mail":
            v = self._admit(c)
            if v is None:
                c.admitted = True
            return v
        return None

    def _admit(self, c):
        """Take one message into the rate windows, or refuse it."""
        p, now = c.p, time.monotonic()
        with self.lock:
            s = self._s(p, c.src)
            wins = p.windows()
            reply = p.rate_reply.replace("{src}", c.src)
            if s.penalty_until > now:   # taken at MAIL before it began
                self._violate_locked(p, c.src, "penalty", p.rate_at, reply)
                return reply
            if _over(s.msg_win, wins, now):
                self._violate_locked(p, c.src, "rate", p.rate_at, reply)
                if p.penalty:
                    s.episodes += 1
                    s.penalty_until = now + p.penalty
                elif not s.over:
                    s.episodes += 1
                s.over = True
                return reply
            _take(s.msg_win, wins, now)
            s.over = False
            return None

    def _deliver(self, c, data, size):
        mid, xs = _headers(data)
        rec = {"provider": c.p.name, "addr": c.addr, "port": c.port,
               "src": c.src, "sport": c.sport, "ehlo": c.ehlo,
               "mail_from": c.mail_from, "rcpts": list(c.rcpts),
               "message_id": mid, "x": xs, "size": size,
               "time": time.time(), "conn": c.cid, "n": c.n}
        with self.lock:
            s = self._s(c.p, c.src)
            s.messages += 1
            s.rcpts += len(c.rcpts)
            if s.first is None:
                s.first = rec["time"]
            s.last = rec["time"]
            self._records.append(rec)
        if self.records_file is not None:
            self.records_file.write(json.dumps(rec) + "\n")

    # ---- a connection ----
    async def _session(self, p, reader, writer):
        sock = writer.get_extra_info("socket")
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass
        with self.lock:
            self._cid += 1
            cid = self._cid
        c = _Conn(self, p, reader, writer, cid)
        try:
            if p.mode != "normal":
                await self._dead(p, c, sock)
                return
            if not await self._open(p, c):
                return
            try:
                await c.run()
            finally:
                with self.lock:
                    self._s(p, c.src).open -= 1
        except (ConnectionError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError,
                asyncio.CancelledError):
            pass                        # (cancelled: the simulator stops)
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def _open(self, p, c):
        """Count the connection in, or refuse it at the greeting."""
        src = c.src
        verdict = None
        for turn in range(8):
            with self.lock:
                verdict = self._gate(p, src)
                if verdict is None:
                    s = self._s(p, src)
                    s.connections += 1
                    _take(s.conn_win, p.conn_windows(), time.monotonic())
                    s.open += 1
                    s.max_open = max(s.max_open, s.open)
                    return True
                if verdict != "conns":
                    self._s(p, src).refused += 1
                    break
            # Over the concurrency limit: let a connection the client has
            # just closed finish closing here before calling it a violation.
            if turn < 6:
                await asyncio.sleep(0)
            else:
                await asyncio.sleep(p.conn_grace)
        if verdict == "conns":
            verdict = p.conn_reply.replace("{src}", src)
            with self.lock:
                s = self._s(p, src)
                s.refused += 1
                self._violate_locked(p, src, "conns", "greeting", verdict)
        c.say(verdict)
        await c.w.drain()
        return False

    async def _dead(self, p, c, sock):
        if p.mode == "busy":
            c.say("421 4.3.2 Service not available")
            await c.w.drain()
        elif p.mode == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                            struct.pack("ii", 1, 0))
        elif p.mode == "silent":
            deadline = time.monotonic() + SILENT_HOLD
            while time.monotonic() < deadline:
                try:
                    b = await asyncio.wait_for(c.r.read(65536), 5.0)
                except asyncio.TimeoutError:
                    continue
                if not b:
                    break
        with self.lock:
            self._event_locked(p.name, c.src, "greeting", "(%s)" % p.mode,
                               None, None)


def _free_port(addrs):
    """A TCP port free on every address of addrs."""
    for _ in range(200):
        t = socket.socket()
        t.bind((addrs[0], 0))
        port = t.getsockname()[1]
        t.close()
        ok = True
        for a in addrs:
            u = socket.socket()
            try:
                u.bind((a, port))
            except OSError:
                ok = False
            finally:
                u.close()
            if ok:
                continue
            break
        if ok:
            return port
    raise RuntimeError("shapesim: no port free on %s" % addrs)


# ---- control socket and CLI ----

def ctl(path, req, timeout=10.0):
    """One request to a running `shapesim serve --control path`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            b = s.recv(1 << 20)
            if not b:
                break
            buf += b
    finally:
        s.close()
    return json.loads(buf)


async def _handle(sim, req):
    """One control request, on the simulator's loop."""
    cmd = req.get("cmd")
    if cmd == "stats":
        return sim.stats()
    if cmd in ("records", "events"):
        since = int(req.get("since", 0))
        with sim.lock:
            lst = sim._records if cmd == "records" else sim._events
            return {cmd: lst[since:], "next": len(lst)}
    if cmd in ("mode", "set"):
        p = sim.provider(req.get("provider"))
        lim = dict(req.get("limits", {}))
        mode = req.get("mode", lim.pop("mode", None))
        if mode is not None and mode not in MODES:
            raise ValueError("mode %r not one of %s"
                             % (mode, ", ".join(MODES)))
        with sim.lock:
            p.configure(**lim)
        if mode is not None:
            await sim._set_mode(p, mode)
        return {"ok": True}
    if cmd == "reset":
        sim.reset()
        return {"ok": True}
    return {"error": "unknown cmd %r" % cmd}


async def _control(sim, path):
    async def serve(r, w):
        try:
            line = await r.readline()
            try:
                ans = await _handle(sim, json.loads(line))
            except Exception as e:
                ans = {"error": str(e)}
            w.write(json.dumps(ans).encode() + b"\n")
            await w.drain()
        finally:
            w.close()
    if os.path.exists(path):
        os.unlink(path)
    return await asyncio.start_unix_server(serve, path)


def _value(v):
    try:
        return json.loads(v)
    except ValueError:
        return v


def _write_stats(sim, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(sim.stats(), f)
    os.replace(tmp, path)


def _serve(a):
    port = a.port
    if a.config:
        with open(a.config) as f:
            conf = json.load(f)
        port = conf.get("port", port)
        provs = []
        for d in conf["providers"]:
            d = dict(d)
            provs.append(Provider(d.pop("name"), d.pop("addrs"),
                                  port=d.pop("port", port), **d))
    else:
        provs = standard_providers(port=port)
    rf = open(a.records, "a", buffering=1 << 16) if a.records else None
    sim = Sim(provs, records_file=rf)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sim.start()
    if a.control:
        sim.call(_control(sim, a.control))
    if not a.quiet:
        for p in sim.providers.values():
            print("shapesim: %s on %s port %d (%s)" % (
                p.name, ", ".join(p.addrs), p.port, p.mode))
    print("shapesim: ready", flush=True)
    try:
        while not stop.wait(a.stats_every):
            if a.stats:
                _write_stats(sim, a.stats)
            if rf:
                sim.call(_flush(rf))
    finally:
        sim.stop()
        if a.stats:
            _write_stats(sim, a.stats)
        if rf:
            rf.close()
        if a.control and os.path.exists(a.control):
            os.unlink(a.control)
    return 0


async def _flush(f):
    f.flush()


def _ctl_main(a):
    words = a.words
    if not words:
        print("ctl: stats | records [SINCE] | events [SINCE] | "
              "mode PROVIDER MODE | set PROVIDER KEY=VALUE... | reset",
              file=sys.stderr)
        return 2
    cmd = words[0]
    req = {"cmd": cmd}
    if cmd in ("records", "events") and len(words) > 1:
        req["since"] = int(words[1])
    elif cmd == "mode":
        req.update(provider=words[1], mode=words[2])
    elif cmd == "set":
        req["provider"] = words[1]
        req["limits"] = {k: _value(v) for k, _, v in
                         (w.partition("=") for w in words[2:])}
    ans = ctl(a.socket, req)
    print(json.dumps(ans, indent=1))
    return 1 if "error" in ans else 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="shapesim",
                                 description="simulated mail providers "
                                 "(see the module docstring)")
    sub = ap.add_subparsers(dest="what")
    s = sub.add_parser("serve")
    s.add_argument("--config")
    s.add_argument("--port", type=int, default=25)
    s.add_argument("--stats")
    s.add_argument("--stats-every", type=float, default=1.0)
    s.add_argument("--records")
    s.add_argument("--control")
    s.add_argument("--quiet", action="store_true")
    c = sub.add_parser("ctl")
    c.add_argument("socket")
    c.add_argument("words", nargs="*")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("serve", "ctl", "-h", "--help"):
        argv.insert(0, "serve")
    a = ap.parse_args(argv)
    if a.what == "ctl":
        return _ctl_main(a)
    return _serve(a)


if __name__ == "__main__":
    sys.exit(main())
