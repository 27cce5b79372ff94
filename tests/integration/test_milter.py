"""The milter client against a milter written here (fakemilter.py, the
protocol's server side): every action (accept, reject with the milter's
text, tempfail, discard, quarantine, add/change/insert/delete header,
replace body, change sender, add/delete recipient) checked on the message
a sink gets; what mtad sends (macros, headers, body, the steps a milter
declined in SMFIC_OPTNEG); a milter that dies mid-message, one that
stalls past its timeout, one that is down: each holds its default action
(tempfail or accept).  `mtad -t` on bad milter keys.

One mtad for the module with four listeners: the fake milter with
default_action tempfail, the same with accept, and a milter that is down
with each.  Each SMTP session opens its own milter connection, which
reads the script the test set before the session began.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from fakemilter import FakeMilter, body, headers, macros, pkt, u32, z
from mtadtest import MTAD, Client, Mtad, closed_port, free_port, wait_for
from sink import Sink
from test_ops import scrape

MSG = (b"From: a@example.org\r\nTo: b@example.net\r\nSubject: hello\r\n"
       b"X-Serial: 1\r\nX-Serial: 2\r\n\r\nline one\r\nline two\r\n")


@pytest.fixture(scope="module")
def env():
    d = tempfile.mkdtemp(prefix="mtad-milter-", dir="/dev/shm")
    os.chmod(d, 0o755)
    fm = FakeMilter()
    fm2 = FakeMilter()
    sink = Sink().start()
    down = "inet:127.0.0.1:%d" % closed_port()
    ports = [free_port() for _ in range(6)]

    def milter(sock, action):
        return [{"name": "m1", "socket": sock, "default_action": action,
                 "timeouts": {"connect": "2s", "command": "2s",
                              "eom": "2s"}}]
    mport = free_port()
    m = Mtad(d, {"relay": {"allow_networks": ["127.0.0.0/8"]},
                 "routes": {"default": sink.route},
                 "metrics": {"listen": "127.0.0.1:%d" % mport}})
    m.mport = mport
    m.port = ports[0]
    m.cfg["server"]["listen"] = [
        {"address": "127.0.0.1:%d" % ports[0],
         "milters": milter(fm.socket_spec, "tempfail")},
        {"address": "127.0.0.1:%d" % ports[1],
         "milters": milter(fm.socket_spec, "accept")},
        {"address": "127.0.0.1:%d" % ports[2],
         "milters": milter(down, "tempfail")},
        {"address": "127.0.0.1:%d" % ports[3],
         "milters": milter(down, "accept")},
        {"address": "127.0.0.1:%d" % ports[4],
         "milters": [dict(milter(fm.socket_spec, "tempfail")[0],
                          skip=["connect", "helo", "body"])]},
        {"address": "127.0.0.1:%d" % ports[5],
         "milters": milter(fm.socket_spec, "tempfail") +
         [dict(milter(fm2.socket_spec, "tempfail")[0], name="m2")]}]
    m.write_config()
    m.start()
    m.ports = ports
    m.fm2 = fm2
    try:
        yield m, fm, sink
    finally:
        m.stop()
        sink.stop()
        fm.stop()
        fm2.stop()
        shutil.rmtree(d, ignore_errors=True)


def session(port, rcpts=("b@example.net",), msg=MSG, sender="a@example.org"):
    """One transaction; the replies to MAIL, each RCPT and the data (None
    where the session did not get that far)."""
    out = {"mail": None, "rcpt": [], "data": None}
    with Client(port, timeout=15) as c:
        c.greet()
        out["mail"] = c.cmd("MAIL FROM:<%s> SIZE=%d" % (sender, len(msg)))
        if out["mail"].code != 250:
            return out
        for r in rcpts:
            out["rcpt"].append(c.cmd("RCPT TO:<%s>" % r))
        if not any(r.code == 250 for r in out["rcpt"]):
            return out
        r = c.cmd("DATA")
        assert r.code == 354, r
        c.send(msg + b".\r\n")
        out["data"] = c.reply()
        c.cmd("QUIT")
    return out


def queued_id(reply):
    m = re.search(rb"queued as ([0-9A-F]{16})", reply.lines[-1])
    assert m, reply
    return m.group(1).decode()


def wait_msg(sink, qid_text, n_before):
    msgs = sink.wait_for(n_before + 1)
    return msgs[n_before]


def test_clean_message_and_what_is_sent(env):
    m, fm, sink = env
    fm.script = {}
    n = len(sink.received())
    out = session(m.ports[0])
    assert out["data"].code == 250, out
    got = wait_msg(sink, None, n)
    assert got.mail_from == "a@example.org"
    assert got.rcpt_tos == ["b@example.net"]
    assert got.data.endswith(MSG)
    log = fm.last()
    cmds = [c for c, _ in log if c != "D"]
    # negotiation, connect, helo, mail, rcpt, data, 5 headers (ours:
    # Received), eoh, one body chunk, eom; then ABORT (the transaction's
    # end) and QUIT may follow
    assert cmds[:6] == ["O", "C", "H", "M", "R", "T"], cmds
    assert cmds.count("T") == 1, cmds       # at DATA, not again
    assert cmds[-3:] in (["N", "B", "E"], ["B", "E", "A"],
                         ["E", "A", "Q"]) or "E" in cmds, cmds
    mac = macros(log)
    assert mac["j"] == "mx.test.example"
    assert mac["{client_addr}"] == "127.0.0.1"
    assert mac["{daemon_addr}"] == "127.0.0.1"
    assert mac["_"] == "unknown [127.0.0.1]"
    assert mac["{mail_addr}"] == "a@example.org"
    assert mac["{rcpt_addr}"] == "b@example.net"
    assert re.fullmatch(r"[0-9A-F]{16}", mac["i"]), mac
    hs = headers(log)
    assert hs[0][0] == "Received"
    assert ("Subject", "hello") in hs          # one space eaten
    assert body(log) == b"line one\r\nline two\r\n"
    mail = [d for c, d in log if c == "M"][0]
    assert mail.split(b"\0")[:2] == [b"<a@example.org>", b"SIZE=%d" % len(MSG)]


def test_every_edit(env):
    m, fm, sink = env
    fm.script = {"eom": [
        ("h", z("X-Added", "yes")),
        ("m", u32(1) + z("Subject", "changed")),
        ("m", u32(2) + z("X-Serial", "")),     # delete the second
        ("i", u32(0) + z("X-First", "top")),
        ("b", b"new body\r\n"),
        ("e", z("<new@example.org>")),
        ("+", z("<added@example.net>")),
        ("-", z("<b@example.net>")),
        ("c", b"")]}
    n = len(sink.received())
    out = session(m.ports[0], rcpts=("b@example.net", "c@example.net"))
    assert out["data"].code == 250, out
    got = wait_msg(sink, None, n)
    assert got.mail_from == "new@example.org"
    assert sorted(got.rcpt_tos) == ["added@example.net", "c@example.net"]
    head, _, rest = got.data.partition(b"\r\n\r\n")
    assert rest == b"new body\r\n"
    lines = head.split(b"\r\n")
    assert lines[0] == b"X-First: top", lines
    assert b"Subject: changed" in lines and b"Subject: hello" not in lines
    assert b"X-Serial: 1" in lines and b"X-Serial: 2" not in lines
    assert lines[-1] == b"X-Added: yes"
    assert m.wait_log("milter edits applied")


def test_header_value_cannot_start_a_field(env):
    m, fm, sink = env
    fm.script = {"eom": [("h", z("X-Folded", "a\nInjected: no")),
                         ("c", b"")]}
    n = len(sink.received())
    assert session(m.ports[0])["data"].code == 250
    got = wait_msg(sink, None, n)
    assert b"X-Folded: a\r\n\tInjected: no\r\n" in got.data
    assert b"\r\nInjected:" not in got.data


def test_reject_and_tempfail_with_text(env):
    m, fm, _ = env
    fm.script = {"rcpt_replies": {
        "<bad@example.net>": ("y", z("550 5.7.1 no \x1b[31mthanks"))}}
    out = session(m.ports[0], rcpts=("bad@example.net", "b@example.net"))
    bad, good = out["rcpt"]
    assert bad.code == 550 and bad.lines[0] == \
        b"550 5.7.1 no \\x1b[31mthanks", bad
    assert good.code == 250
    assert out["data"].code == 250
    fm.script = {"replies": {"M": ("t", b"")}}
    out = session(m.ports[0])
    assert out["mail"].code == 451 and b"4.7.1" in out["mail"].lines[0]
    fm.script = {"eom": [("y", z("554 5.7.1 spam\r\n554 5.7.1 go away"))]}
    out = session(m.ports[0])
    # a multi-line reply joined into one line
    assert out["data"].lines == [b"554 5.7.1 spam go away"], out
    fm.script = {"eom": [("y", z("250 fine"))]}     # not a refusal: 451
    before = scrape(m.mport)[1].get("mtad_rejections_total{reason=milter}",
                                    0)
    assert session(m.ports[0])["data"].code == 451
    assert m.wait_log("milter-reject")
    wait_for(lambda: scrape(m.mport)[1].get(
        "mtad_rejections_total{reason=milter}") == before + 1,
        timeout=5, what="the milter's refusal in /metrics")


def test_discard_and_quarantine(env):
    m, fm, sink = env
    fm.script = {"eom": [("d", b"")]}
    n = len(sink.received())
    out = session(m.ports[0])
    assert out["data"].code == 250
    assert m.wait_log("milter-discard")
    fm.script = {"eom": [("q", z("looks odd")), ("c", b"")]}
    out = session(m.ports[0])
    assert out["data"].code == 250
    qid = queued_id(out["data"])

    def held():
        r = m.ctl("queue", "--json", "--state", "held")
        return r.returncode == 0 and qid in r.stdout
    wait_for(held, timeout=10, what="the quarantined message held")
    assert m.wait_log("quarantined: looks odd")
    time.sleep(0.5)                 # delivery had its chance: none
    assert len(sink.received()) == n
    r = m.ctl("release", qid)
    assert r.returncode == 0, r.stderr
    sink.wait_for(n + 1)


def test_declined_steps_and_no_replies(env):
    m, fm, sink = env
    # no connect, no helo, headers and body sent without replies
    fm.script = {"protocol": 0x01 | 0x02 | 0x80 | 0x80000}
    n = len(sink.received())
    assert session(m.ports[0])["data"].code == 250
    sink.wait_for(n + 1)
    cmds = [c for c, _ in fm.last()]
    assert "C" not in cmds and "H" not in cmds and "L" in cmds, cmds


def test_milter_dies_mid_body(env):
    m, fm, sink = env
    fm.script = {"die_at": "B"}
    out = session(m.ports[0])
    assert out["data"].code == 451, out
    n = len(sink.received())
    out = session(m.ports[1])       # default_action accept
    assert out["data"].code == 250, out
    got = wait_msg(sink, None, n)
    assert got.data.endswith(MSG)
    assert m.wait_log("connection closed by the milter")


def test_milter_stalls(env):
    m, fm, sink = env
    fm.script = {"stall_at": "E"}
    t0 = time.time()
    out = session(m.ports[0])
    took = time.time() - t0
    assert out["data"].code == 451, out
    assert 1.5 < took < 10, took
    assert m.wait_log("end-of-message timed out")
    n = len(sink.received())
    assert session(m.ports[1])["data"].code == 250
    sink.wait_for(n + 1)


def test_milter_down(env):
    m, fm, sink = env
    out = session(m.ports[2])
    assert out["mail"].code == 451, out
    n = len(sink.received())
    assert session(m.ports[3])["data"].code == 250
    sink.wait_for(n + 1)


def test_connect_reject(env):
    m, fm, _ = env
    fm.script = {"replies": {"C": ("y", z("554 5.7.1 go away"))}}
    with Client(m.ports[0], timeout=10) as c:
        assert c.reply().code == 220
        r = c.cmd("EHLO client.test")
        assert r.lines == [b"554 5.7.1 go away"], r
        assert c.closed()


def test_check_refuses_bad_milters(tmp_path):
    cfg = tmp_path / "relay.yaml"
    cfg.write_text(
        "server:\n  hostname: mx.test\n  listen:\n"
        "    - address: 127.0.0.1:2525\n      milters:\n"
        "        - {name: a, socket: \"unix:/run/m.sock\"}\n"
        "        - {name: b, socket: \"inet:127.0.0.1:1\","
        " default_action: maybe}\n"
        "        - {name: c, socket: \"inet:localhost:1\"}\n"
        "        - {name: d, socket: \"inet:127.0.0.1:1\", skip: [nope]}\n"
        "spool: {dir: %s}\nroutes: {db: %s, default: \"smtp:[127.0.0.1]:1\"}\n"
        % (tmp_path / "s", tmp_path / "r.mdb"))
    r = subprocess.run([MTAD, "-t", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    err = r.stderr
    assert re.search(r"relay\.yaml:6:\d+: .*milters\[0\]\.socket: unix "
                     r"sockets are not supported", err), err
    assert re.search(r"relay\.yaml:7:\d+: .*default_action: expected "
                     r"tempfail or accept", err), err
    assert re.search(r"relay\.yaml:8:\d+: .*milters\[2\]\.socket: expected "
                     r"inet:IP:port", err), err
    assert re.search(r"relay\.yaml:9:\d+: .*skip\[0\]: expected a step",
                     err), err


def test_pipelined_commands_wait_in_order(env):
    m, fm, sink = env
    fm.script = {"rcpt_replies": {"<no@example.net>": ("r", b"")}}
    n = len(sink.received())
    with Client(m.ports[0], timeout=15) as c:
        c.greet()
        c.send("MAIL FROM:<a@example.org>\r\nRCPT TO:<no@example.net>\r\n"
               "RCPT TO:<b@example.net>\r\nDATA\r\n")
        rs = c.replies(4)
        assert [r.code for r in rs] == [250, 550, 250, 354], rs
        assert rs[1].lines == [b"550 5.7.1 Command rejected"]
        c.send(MSG + b".\r\nQUIT\r\n")
        assert c.reply().code == 250
        assert c.reply().code == 221
    got = sink.wait_for(n + 1)[n]
    assert got.rcpt_tos == ["b@example.net"]


def test_bdat_waits_for_the_verdict(env):
    m, fm, sink = env
    fm.script = {"eom": [("h", z("X-Bdat", "seen")), ("c", b"")]}
    n = len(sink.received())
    with Client(m.ports[0], timeout=15) as c:
        c.greet()
        assert c.cmd("MAIL FROM:<a@example.org>").code == 250
        assert c.cmd("RCPT TO:<b@example.net>").code == 250
        half = len(MSG) // 2
        c.send(b"BDAT %d\r\n" % half + MSG[:half])
        assert c.reply().code == 250
        c.send(b"BDAT %d LAST\r\n" % (len(MSG) - half) + MSG[half:])
        r = c.reply()
        assert r.code == 250 and b"queued as" in r.lines[-1], r
    got = sink.wait_for(n + 1)[n]
    assert b"\r\nX-Bdat: seen\r\n" in got.data
    cmds = [c for c, _ in fm.last() if c != "D"]
    assert cmds.count("T") == 1 and cmds.index("T") < cmds.index("L"), cmds


def test_client_leaves_while_the_milter_thinks(env):
    m, fm, sink = env
    fm.script = {"stall_at": "E"}
    with Client(m.ports[0], timeout=15) as c:
        c.greet()
        assert c.cmd("MAIL FROM:<a@example.org>").code == 250
        assert c.cmd("RCPT TO:<b@example.net>").code == 250
        assert c.cmd("DATA").code == 354
        c.send(MSG + b".\r\n")
        wait_for(lambda: fm.last() and fm.last()[-1][0] == "E", timeout=5,
                 what="the end of message at the milter")
    # a closed connection is seen when the verdict (here the timeout's
    # tempfail) is written: nothing was queued, the worker goes on
    n = len(sink.received())
    m.wait_log("end-of-message timed out")
    fm.script = {}
    assert session(m.ports[0])["data"].code == 250     # the worker is fine
    assert len(sink.wait_for(n + 1)) == n + 1


def test_ehlo_waits_for_a_slow_connect_stage(env):
    m, fm, sink = env
    fm.script = {"delay": {"C": 0.5}}
    t0 = time.time()
    with Client(m.ports[0], timeout=10) as c:
        assert c.reply().code == 220       # the 220 does not wait
        assert time.time() - t0 < 0.4
        r = c.cmd("EHLO client.test")
        assert r.code == 250, r
        assert time.time() - t0 >= 0.5     # EHLO waited for the verdict
        c.cmd("QUIT")


def test_negotiation_that_never_answers(env):
    m, fm, sink = env
    fm.script = {"stall_at": "O"}
    t0 = time.time()
    out = session(m.ports[0])
    assert out["mail"].code == 451, out        # tempfail from MAIL on
    assert time.time() - t0 >= 1.5
    assert m.wait_log("option negotiation timed out")


def test_large_body_without_replies(env):
    """A body of many chunks to a milter that answers none of them (the
    queue of commands refilled as the socket takes it), then edits."""
    m, fm, sink = env
    fm.script = {"protocol": 0x80 | 0x80000,
                 "eom": [("h", z("X-Big", "yes")), ("c", b"")]}
    line = b"0123456789" * 7 + b"\r\n"
    big = MSG + line * (3 * 1024 * 1024 // len(line))
    n = len(sink.received())
    assert session(m.ports[0], msg=big)["data"].code == 250
    got = sink.wait_for(n + 1)[n]
    assert got.data.endswith(big[big.index(b"\r\n\r\n") + 4:])
    assert b"\r\nX-Big: yes\r\n" in got.data
    assert len(body(fm.last())) == len(big) - big.index(b"\r\n\r\n") - 4
    chunks = [d for c, d in fm.last() if c == "B"]
    assert max(len(d) for d in chunks) == 65535, len(chunks)


def test_reject_at_data(env):
    m, fm, sink = env
    fm.script = {"replies": {"T": ("y", z("554 5.7.1 no data today"))}}
    with Client(m.ports[0], timeout=10) as c:
        c.greet()
        assert c.cmd("MAIL FROM:<a@example.org>").code == 250
        assert c.cmd("RCPT TO:<b@example.net>").code == 250
        r = c.cmd("DATA")
        assert r.lines == [b"554 5.7.1 no data today"], r
        assert c.cmd("RSET").code == 250
        fm.script = {}
    assert m.wait_log("milter-reject: DATA")


def test_no_helo_no_milter_connection(env):
    m, fm, sink = env
    fm.script = {}
    before = len(fm.all())
    with Client(m.ports[0], timeout=10) as c:
        assert c.reply().code == 220
        assert c.cmd("NOOP").code == 250
        assert c.cmd("QUIT").code == 221
    session(m.ports[0])                     # this one connects
    wait_for(lambda: len(fm.all()) == before + 1, timeout=5,
             what="one milter connection")
    time.sleep(0.2)
    assert len(fm.all()) == before + 1


def test_skip_key(env):
    m, fm, sink = env
    fm.script = {}
    n = len(sink.received())
    assert session(m.ports[4])["data"].code == 250
    sink.wait_for(n + 1)
    cmds = [c for c, _ in fm.last() if c != "D"]
    assert "C" not in cmds and "H" not in cmds and "B" not in cmds, cmds
    assert "M" in cmds and "L" in cmds and "E" in cmds, cmds


def test_protocol_error_and_edits_not_negotiated(env):
    m, fm, sink = env
    fm.script = {"eom": [("Z", b"junk")]}
    assert session(m.ports[0])["data"].code == 451
    assert m.wait_log("protocol error")
    # only SMFIF_ADDHDRS negotiated: the sender change is ignored
    fm.script = {"actions": 0x01, "eom": [("e", z("<evil@example.org>")),
                                          ("h", z("X-Ok", "1")),
                                          ("c", b"")]}
    n = len(sink.received())
    assert session(m.ports[0])["data"].code == 250
    got = sink.wait_for(n + 1)[n]
    assert got.mail_from == "a@example.org"
    assert b"\r\nX-Ok: 1\r\n" in got.data
    assert m.wait_log("not negotiated: ignored")


def test_a_second_milter_sees_the_first_ones_edits(env):
    m, fm, sink = env
    fm2 = m.fm2
    fm.script = {"eom": [("m", u32(1) + z("Subject", "first")),
                         ("h", z("X-One", "1")),
                         ("b", b"body of one\r\n"), ("c", b"")]}
    fm2.script = {"eom": [("m", u32(1) + z("X-One", "2")),
                          ("b", b"body of two\r\n"), ("c", b"")]}
    n = len(sink.received())
    assert session(m.ports[5])["data"].code == 250
    got = sink.wait_for(n + 1)[n]
    seen = headers(fm2.last())
    assert ("Subject", "first") in seen and ("X-One", "1") in seen, seen
    assert ("Subject", "hello") not in seen, seen
    assert body(fm2.last()) == b"body of one\r\n"
    head, _, rest = got.data.partition(b"\r\n\r\n")
    assert rest == b"body of two\r\n"
    assert b"\r\nSubject: first\r\n" in head + b"\r\n"
    assert b"\r\nX-One: 2" in head and b"X-One: 1" not in head, head
