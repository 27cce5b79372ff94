"""A hostile milter (fakemilter.py) against the milter client: what it
can make of the message, the session and the worker's memory.

- edits it sends and then dies (or breaks the protocol) before its final
  reply: with default_action accept the message goes on as if the milter
  were not there, never with half a replaced body or its headers;
- a replacement body larger than limits.max_message_size, or header edits
  past their bound: a protocol error (tempfail, or accept unedited);
- SMFIR_PROGRESS without end: the wait ends at twice the eom timeout;
- CR/LF in the addresses of change-sender/add-recipient, in a reply text:
  refused or escaped, the envelope and the reply stay well-formed.

One mtad, two listeners with the same milter: default_action tempfail and
accept; 1 s timeouts.
"""
import os
import shutil
import tempfile
import time

import pytest

from fakemilter import FakeMilter, pkt, u32, z     # noqa: F401
from mtadtest import Client, Mtad, free_port
from sink import Sink

MSG = (b"From: a@example.org\r\nTo: b@example.net\r\nSubject: hi\r\n"
       b"\r\nthe original body\r\n")
LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def env():
    d = tempfile.mkdtemp(prefix="mtad-milterh-", dir="/dev/shm")
    os.chmod(d, 0o755)
    fm = FakeMilter()
    sink = Sink().start()
    ports = [free_port() for _ in range(2)]

    def milter(action):
        return [{"name": "evil", "socket": fm.socket_spec,
                 "default_action": action,
                 "timeouts": {"connect": "1s", "command": "1s",
                              "eom": "1s"}}]
    m = Mtad(d, {"relay": {"allow_networks": ["127.0.0.0/8"]},
                 "routes": {"default": sink.route},
                 "limits": {"max_message_size": "64K"}})
    m.cfg["server"]["listen"] = [
        {"address": "127.0.0.1:%d" % ports[0],
         "milters": milter("tempfail")},
        {"address": "127.0.0.1:%d" % ports[1],
         "milters": milter("accept")}]
    m.port = ports[0]
    m.write_config()
    m.start()
    m.ports = ports
    try:
        yield m, fm, sink
    finally:
        m.stop()
        sink.stop()
        fm.stop()
        shutil.rmtree(d, ignore_errors=True)


SEQ = [0]     # each message sent carries its own X-Seq: a late delivery
              # of an earlier test's message is not taken for this one's


def send(port, msg=MSG, rcpts=("b@example.net",)):
    SEQ[0] += 1
    msg = b"X-Seq: %d\r\n" % SEQ[0] + msg
    with Client(port, timeout=20) as c:
        c.greet()
        assert c.cmd("MAIL FROM:<a@example.org>").code == 250
        for r in rcpts:
            assert c.cmd("RCPT TO:<%s>" % r).code == 250
        assert c.cmd("DATA").code == 354
        c.send(msg + b".\r\n")
        r = c.reply()
        c.cmd("QUIT")
    return r


def delivered(sink, timeout=30.0):
    """The delivery of the last message sent (by its X-Seq), waited for."""
    mark = b"X-Seq: %d\r\n" % SEQ[0]
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = [x for x in sink.received() if mark in x.data]
        if got:
            assert len(got) == 1, got
            return got[0]
        time.sleep(0.05)
    raise AssertionError("message %d not delivered in %.0f s" % (SEQ[0],
                                                                timeout))


def test_dead_milter_leaves_no_half_edits(env):
    m, fm, sink = env
    # a body replacement and a header, then the milter dies before its
    # final reply: accept means "as if it were not there"
    fm.script = {"eom": [("b", b"half a bo"), ("h", z("X-Half", "1")),
                         None]}
    assert send(m.ports[1]).code == 250
    got = delivered(sink)
    assert got.data.endswith(MSG), got.data
    assert b"X-Half" not in got.data and b"half a bo" not in got.data
    assert send(m.ports[0]).code == 451


def test_replacement_body_over_the_size_limit(env):
    m, fm, sink = env
    big = b"x" * 1000 + b"\n"                # bare LFs: stored as CRLF
    chunks = [("b", big * 40)] * 2            # 80 KB > 64K as stored
    fm.script = {"eom": chunks + [("c", b"")]}
    assert send(m.ports[0]).code == 451
    assert m.wait_log("protocol error")
    assert send(m.ports[1]).code == 250
    got = delivered(sink)
    assert got.data.endswith(MSG) and len(got.data) < LIMIT
    # just under the limit, counted as stored, is taken
    fm.script = {"eom": [("b", big * 60), ("c", b"")]}
    assert send(m.ports[0]).code == 250
    got = delivered(sink)
    assert got.data.endswith(big.replace(b"\n", b"\r\n") * 60)


def test_header_edits_are_bounded(env):
    m, fm, sink = env
    # each a packet under the milter packet limit; together over the
    # bound of one milter's header edits (memory: 4096 of them would be
    # 4 GB in the worker)
    v = "y" * (600 * 1024)
    fm.script = {"eom": [("h", z("X-Big", v)), ("h", z("X-Big", v)),
                         ("c", b"")]}
    assert send(m.ports[0]).code == 451
    assert send(m.ports[1]).code == 250
    got = delivered(sink)
    assert b"X-Big" not in got.data


def test_endless_progress_ends_at_twice_the_timeout(env):
    m, fm, _ = env
    fm.script = {"eom": [("p", b""), ("sleep", 0.3)] * 30 + [("c", b"")]}
    t0 = time.time()
    r = send(m.ports[0])
    took = time.time() - t0
    assert r.code == 451, r
    assert took < 5, took               # 2 s; the milter would take 9 s
    assert m.wait_log("end-of-message timed out")
    # progress within the bound still extends the wait past one timeout
    fm.script = {"eom": [("p", b""), ("sleep", 0.6), ("p", b""),
                         ("sleep", 0.6), ("c", b"")]}
    assert send(m.ports[0]).code == 250


def test_crlf_in_envelope_edits_and_reply_text(env):
    m, fm, sink = env
    fm.script = {"eom": [("e", z("<x@example.org>\r\nRCPT TO:<y@evil>")),
                         ("+", z("<c@example.net>\r\nDATA")),
                         ("+", z("<d@example.net>")), ("c", b"")]}
    assert send(m.ports[0]).code == 250
    got = delivered(sink)
    assert got.mail_from == "a@example.org"
    assert sorted(got.rcpt_tos) == ["b@example.net", "d@example.net"]
    assert m.wait_log("milter edit with a bad address ignored")
    fm.script = {"eom": [("y", z("550 5.7.1 no\r\n250 2.0.0 Ok: queued "
                                 "as FAKE\x00"))]}
    r = send(m.ports[0])
    assert r.code == 550 and len(r.lines) == 1, r
    assert b"\r" not in r.lines[0] and b"\n" not in r.lines[0]
