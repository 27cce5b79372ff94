"""Helpers for the mtactl queue tests (test_queue.py): a known queue built
against a running mtad, mtactl with byte-exact output, and parsers for
mtactl's text output.

The known queue (KnownQueue) has, once built:
  deferred   two messages to domains routed to a closed loopback port;
             delivery.retry is ["1h"], so they stay deferred
  held       one more deferred message, then `mtactl hold`
  active     made on demand: a message to the `slow` sink, which holds
             its answer to the end of data until the test opens its gate
             (kq.slow.gate.set()), so a worker holds the message's lock for
             as long as the test needs: no timing involved
Sinks (GatedSink, from the gated_sink_factory fixture): `home` (home.test:
the senders' domain, receives DSNs), `good` (good.test: a working
destination), `slow` (slow.test, gate closed unless gated=False).
"""
import asyncio
import os
import re
import subprocess
import threading
import time

import pytest

from conftest import MTACTL
from delivery_util import closed_port, make_message, send, wait_until
from sink import Sink

GATE_MAX = 60.0         # a closed gate opens by itself after this long


class GatedSink(Sink):
    """A test sink (sink.py) that also waits for `gate` (a threading.Event,
    open by default) before it answers the end of data."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.gate = threading.Event()
        self.gate.set()

    async def _end_of_data(self, reply, state, data, peer, conn_id,
                           reader):
        deadline = time.time() + GATE_MAX
        while not self.gate.is_set() and time.time() < deadline:
            await asyncio.sleep(0.02)
        await super()._end_of_data(reply, state, data, peer, conn_id,
                                   reader)


@pytest.fixture
def gated_sink_factory():
    """Make and start GatedSinks; every one is opened and stopped after
    the test."""
    made = []

    def make(**kw):
        s = GatedSink(**kw).start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.gate.set()
        s.stop()

LINE_RE = re.compile(r"^([0-9A-F]{16}) +(\d+) (\S+) +(\S+) (\S+) +<([^>]*)> ->"
                     r"(.*)$")
SUMMARY_RE = re.compile(r"^-- (\d+) messages?, (\d+) bytes: (\d+) queued, "
                        r"(\d+) active, (\d+) deferred, (\d+) held$")


def ctl_bytes(m, *args, timeout=90):
    """mtactl with stdout/stderr as bytes (no newline translation)."""
    return subprocess.run([MTACTL, "-c", m.cfg_path, *args],
                          capture_output=True, timeout=timeout)


def raw_message(m, qid):
    """The stored message of qid, byte for byte (mtactl show --raw)."""
    r = ctl_bytes(m, "show", qid, "--raw")
    assert r.returncode == 0, r.stderr
    return r.stdout


def parse_queue(text):
    """mtactl queue's text output -> ({id: line fields}, summary tuple).
    Each entry: size, arrived, age, state, sender, rcpts (list), detail
    (the following indented line or None)."""
    msgs, summary, last = {}, None, None
    for line in text.splitlines():
        m = LINE_RE.match(line)
        if m:
            rcpts = re.findall(r"<([^>]*)>", m.group(7))
            last = m.group(1)
            msgs[last] = {"size": int(m.group(2)), "arrived": m.group(3),
                          "age": m.group(4), "state": m.group(5),
                          "sender": m.group(6), "rcpts": rcpts,
                          "rest": m.group(7), "detail": None}
            continue
        s = SUMMARY_RE.match(line)
        if s:
            summary = tuple(int(x) for x in s.groups())
            last = None
            continue
        if line.startswith(" " * 17) and last is not None:
            msgs[last]["detail"] = line.strip()
    return msgs, summary


def parse_show(text):
    """mtactl show's envelope block -> (fields dict, recipients list of
    (address, status, rest, last reply or None), the rest of the output).
    The log lines under "history:" are in fields["history_lines"]."""
    head, sep, rest = text.partition("\n\n")
    assert sep, text
    fields, rcpts = {"history_lines": []}, []
    in_history = False
    for line in head.splitlines():
        if line.startswith("  last reply: ") and not in_history:
            a, s, r, _ = rcpts[-1]
            rcpts[-1] = (a, s, r, line[len("  last reply: "):])
            continue
        if line.startswith("  ") and in_history:
            fields["history_lines"].append(line[2:])
            continue
        in_history = line.startswith("history:")
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "recipient":
            m = re.match(r"<([^>]*)> (\w+)(.*)$", value)
            rcpts.append((m.group(1), m.group(2), m.group(3), None))
        else:
            fields[key] = value
    return fields, rcpts, rest


def state_files(m):
    d = os.path.join(m.spool, "state")
    try:
        return sorted(os.listdir(d))
    except FileNotFoundError:
        return []


def queue_json(m, *args):
    import json
    r = m.ctl("queue", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


class KnownQueue:
    """Builds the known queue on a fresh mtad; see the module docstring."""

    def __init__(self, mtad_factory, gated_sink_factory, gated=True,
                 overrides=None):
        self.home = gated_sink_factory(name="home.sink")
        self.good = gated_sink_factory(name="good.sink")
        self.slow = gated_sink_factory(name="slow.sink")
        if gated:
            self.slow.gate.clear()
        self.dead = "smtp:[127.0.0.1]:%d" % closed_port()
        cfg = {
            "routes": {"default": self.dead,
                       "static": {"home.test": self.home.route,
                                  "good.test": self.good.route,
                                  "slow.test": self.slow.route}},
            "delivery": {"retry": ["1h"], "connect_timeout": "2s"},
        }
        if overrides:
            for k, v in overrides.items():
                cfg.setdefault(k, {}).update(v)
        self.m = mtad_factory(cfg).start()
        self.sent = {}          # id -> (sender, rcpts, message bytes)
        self.times = {}         # id -> (wall ms before, after the send)

    def send(self, sender, rcpts, serial, extra=b""):
        msg = make_message(serial, extra)
        before = int(time.time() * 1000)
        qid = send(self.m, sender, rcpts, msg)
        after = int(time.time() * 1000)
        assert qid, "no queue id in the 250 reply"
        self.sent[qid] = (sender, list(rcpts), msg)
        self.times[qid] = (before, after)
        return qid

    def send_deferred(self, sender, rcpts, serial, extra=b""):
        """Send, then wait until the first attempt deferred it."""
        qid = self.send(sender, rcpts, serial, extra)
        self.wait_deferred(qid)
        return qid

    def wait_deferred(self, qid, attempts=1):
        def done():
            j = queue_json(self.m)
            for e in j["messages"]:
                if e["id"] == qid:
                    return e["attempts"] >= attempts and \
                        e["state"] != "active"
            return False
        assert wait_until(done, 20), "%s never deferred:\n%s" % (
            qid, self.m.log_text()[-3000:])

    def build(self):
        """The standing queue: two deferred, one held."""
        self.d1 = self.send_deferred("alice@home.test",
                                     ["x@far.test", "y@far.test"], 1)
        self.d2 = self.send_deferred("bob@home.test", ["z@other.test"], 2,
                                     b"second body line\r\n")
        self.h = self.send_deferred("carol@home.test",
                                    ["w@other.test", "v@far.test",
                                     "u@third.test", "t@third.test"], 3)
        r = self.m.ctl("hold", self.h)
        assert r.returncode == 0, r.stderr
        return self

    def make_active(self, serial=4):
        """A message a worker is delivering right now (to the slow sink):
        returns its id once the sink has the data and sits on its reply
        (until kq.slow.gate is set)."""
        n = len([e for e in self.slow.events if e[0] == "data_started"])
        qid = self.send("dave@home.test", ["s@slow.test"], serial)
        assert wait_until(lambda: len([e for e in self.slow.events
                                       if e[0] == "data_started"]) > n, 20)
        return qid
