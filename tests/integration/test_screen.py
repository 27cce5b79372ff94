"""The screen before the greeting: a listener's pregreet pause (a client
that talks before its 220 is refused with 554 5.5.1, as postscreen's
greet test), the multi-line greeting, and screen.dnsbl scoring against
DNS lists served by Debian's nsd (a listed client refused with 554 5.7.1
naming the list, an unlisted one greeted, an allowlist that cancels, a
return-code filter that does not match, a list that never answers).

The clients are 127.0.0.x: relay.allow_networks (not screened) is set to
another network.  Pauses are short (300 ms) so that the suite stays quick; every wait is
bounded by the client's socket timeout.
"""
import re
import shutil
import socket
import tempfile
import time

import pytest

from mtadtest import Client, Nsd, SilentServer, free_port, wait_for
from test_ops import json_lines, scrape

PAUSE = 0.3
RELAY = {"allow_networks": ["127.0.0.1/32"]}   # wait_ready's client only

# The lists: <reversed client>.<list>.screen.test.  Client 127.0.0.2 is
# on black (127.0.0.2), white (127.0.0.5) and other (127.0.0.20, outside
# 127.0.0.[2..11]); 127.0.0.3 is on none.
ZONE_TEXT = """$ORIGIN screen.test.
$TTL 300
@                 IN SOA ns.screen.test. hostmaster.screen.test. 1 3600 600 86400 60
@                 IN NS  ns
ns                IN A   127.0.0.1
2.0.0.127.black   IN A   127.0.0.2
2.0.0.127.black   IN TXT "listed: see https://black.example/"
2.0.0.127.white   IN A   127.0.0.5
2.0.0.127.other   IN A   127.0.0.20
"""


@pytest.fixture(scope="module")
def lists():
    d = tempfile.mkdtemp(prefix="mtad-screen-", dir="/dev/shm")
    nsd = Nsd(d, zone_text=ZONE_TEXT, zone="screen.test").start()
    try:
        yield nsd
    finally:
        nsd.stop()
        shutil.rmtree(d, ignore_errors=True)


def listen(port, **kw):
    entry = {"address": "127.0.0.1:%d" % port}
    entry.update(kw)
    return entry


def connect(m, source, port=None):
    return Client(port or m.port, source=source, timeout=5.0)


def session_of(log, client):
    """The session id of the last connect from client (an IP)."""
    found = re.findall(r"connect from \[%s\]:\d+ session=([0-9a-f]{12})"
                       % re.escape(client), log)
    assert found, log[-3000:]
    return found[-1]


# ---- the pregreet pause -------------------------------------------------

@pytest.fixture
def greeters(mtad_factory):
    """Listeners: m.port plain, pause on p_pause, multi-line on p_multi."""
    p_pause, p_multi, mport = free_port(), free_port(), free_port()
    m = mtad_factory()
    m.cfg["server"]["listen"] = [
        "127.0.0.1:%d" % m.port,
        listen(p_pause, pregreet="300ms"),
        listen(p_multi, pregreet="300ms", pregreet_multiline=True),
    ]
    m.cfg["metrics"] = {"listen": "127.0.0.1:%d" % mport}
    m.cfg["relay"] = RELAY
    m.write_config()
    m.start()
    return m, p_pause, p_multi, mport


def test_a_client_that_talks_first_is_refused(greeters):
    m, p_pause, _, mport = greeters
    with connect(m, "127.0.0.4", p_pause) as c:
        c.send("EHLO bot.test\r\n")
        r = c.reply()
        assert r.code == 554 and r.lines == [b"554 5.5.1 Protocol error"], r
        assert c.closed()
    sid = session_of(m.wait_log("pregreet: [127.0.0.4]:"), "127.0.0.4")
    line = [x for x in m.log_text().splitlines()
            if "pregreet: [127.0.0.4]" in x][0]
    assert "session=%s" % sid in line and "before its turn" in line, line
    wait_for(lambda: scrape(mport)[1].get(
        "mtad_rejections_total{reason=pregreet}") == 1,
        timeout=5, what="the pregreet rejection in /metrics")


def test_a_patient_client_is_greeted_after_the_pause(greeters):
    m, p_pause, _, mport = greeters
    t0 = time.monotonic()
    with connect(m, "127.0.0.4", p_pause) as c:
        r = c.reply()
        waited = time.monotonic() - t0
        assert r.code == 220 and r.lines == [b"220 mx.test.example ESMTP mtad"]
        assert waited >= PAUSE - 0.02, waited
        assert c.cmd("EHLO ok.test").code == 250
        assert c.cmd("QUIT").code == 221
    # the plain listener is not screened: no pause
    t0 = time.monotonic()
    with connect(m, "127.0.0.4") as c:
        assert c.reply().code == 220
        assert time.monotonic() - t0 < PAUSE / 2
    assert scrape(mport)[1]["mtad_rejections_total{reason=pregreet}"] == 0


def test_multiline_greeting_refuses_a_client_after_its_first_line(greeters):
    m, _, p_multi, _ = greeters
    t0 = time.monotonic()
    with connect(m, "127.0.0.4", p_multi) as c:
        first = c._line()
        assert first == b"220-mx.test.example ESMTP mtad", first
        assert time.monotonic() - t0 < PAUSE / 2
        c.send("EHLO early.test\r\n")      # the 220 is not finished
        assert c.reply().lines == [b"554 5.5.1 Protocol error"]
        assert c.closed()
    with connect(m, "127.0.0.4", p_multi) as c:
        r = c.reply()
        assert r.lines == [b"220-mx.test.example ESMTP mtad",
                           b"220 mx.test.example ESMTP mtad"], r
        assert time.monotonic() - t0 >= PAUSE - 0.02
        assert c.cmd("EHLO ok.test").code == 250


def test_relay_networks_are_not_screened(greeters):
    m, p_pause, _, _ = greeters
    t0 = time.monotonic()
    with connect(m, "127.0.0.1", p_pause) as c:   # in relay.allow_networks
        assert c.reply().code == 220
        assert time.monotonic() - t0 < PAUSE / 2


def test_a_client_that_leaves_during_the_pause_is_logged_once(greeters):
    m, p_pause, _, _ = greeters
    c = connect(m, "127.0.0.6", p_pause)
    c.close()
    m.wait_log("disconnect from [127.0.0.6]")
    text = m.log_text()
    assert "hangup before the greeting" in text
    assert "pregreet: [127.0.0.6]" not in text


# ---- DNS lists ----------------------------------------------------------

def with_lists(mtad_factory, servers, dnsbl, subdir=None, workers=2,
               **screen):
    m = mtad_factory(subdir=subdir)
    m.cfg["server"]["workers"] = workers
    m.cfg["dns"] = {"servers": servers, "timeout": "2s", "attempts": 1}
    screen["dnsbl"] = dnsbl
    m.cfg["screen"] = screen
    m.cfg["relay"] = RELAY
    m.write_config()
    return m.start()


def test_listed_client_refused_unlisted_greeted(mtad_factory, lists):
    m = with_lists(mtad_factory, [lists.addr],
                   [{"zone": "black.screen.test",
                     "match": "127.0.0.[2..11]"}])
    with connect(m, "127.0.0.2") as c:
        r = c.reply()
        assert r.lines == [b"554 5.7.1 Service unavailable; client "
                           b"[127.0.0.2] blocked using black.screen.test"], r
        assert c.closed()
    text = m.wait_log("dnsbl: [127.0.0.2]")
    sid = session_of(text, "127.0.0.2")
    line = [x for x in text.splitlines() if "dnsbl: [127.0.0.2]" in x][0]
    assert "session=%s" % sid in line and "zones=black.screen.test" in line
    with connect(m, "127.0.0.3") as c:
        assert c.reply().code == 220
        assert c.cmd("EHLO clean.test").code == 250


def test_json_records_of_both_refusals(mtad_factory, lists):
    """One reject record each, with the session id of the connect."""
    m = mtad_factory()
    p = free_port()
    m.cfg["server"]["listen"] = ["127.0.0.1:%d" % m.port,
                                 listen(p, pregreet="300ms")]
    m.cfg["dns"] = {"servers": [lists.addr]}
    m.cfg["screen"] = {"dnsbl": [{"zone": "black.screen.test"},
                                 {"zone": "white.screen.test"}]}
    m.cfg["relay"] = RELAY
    m.cfg["log"]["format"] = "json"
    m.write_config()
    m.start()
    with connect(m, "127.0.0.3", p) as c:
        c.send("EHLO early\r\n")
        assert c.reply().code == 554
    with connect(m, "127.0.0.2") as c:
        assert c.reply().code == 554
    m.wait_log('"reason":"dnsbl"')
    recs = json_lines(m)
    conn = {r["client"]: r["session"] for r in recs
            if r["event"] == "connect"}
    rej = [r for r in recs if r["event"] == "reject"]
    assert len(rej) == 2, rej
    pre = [r for r in rej if r["reason"] == "pregreet"][0]
    assert pre["dsn"] == "5.5.1" and pre["session"] == conn["127.0.0.3"]
    bl = [r for r in rej if r["reason"] == "dnsbl"][0]
    assert bl["dsn"] == "5.7.1" and bl["session"] == conn["127.0.0.2"]
    assert bl["zones"] == "black.screen.test, white.screen.test"
    assert bl["score"] == 2


def test_allowlist_cancels_the_listing(mtad_factory, lists):
    m = with_lists(mtad_factory, [lists.addr],
                   [{"zone": "black.screen.test", "weight": 2},
                    {"zone": "white.screen.test", "weight": -3}],
                   threshold=2)
    with connect(m, "127.0.0.2") as c:
        assert c.reply().code == 220
        assert c.cmd("EHLO listed-but-allowed.test").code == 250
    text = m.wait_log("dnsbl: [127.0.0.2]")
    assert "score -1" in text and "passed" in text, text[-2000:]


def test_return_code_filter_that_does_not_match(mtad_factory, lists):
    m = with_lists(mtad_factory, [lists.addr],
                   [{"zone": "other.screen.test",
                     "match": "127.0.0.[2..11]"}])
    with connect(m, "127.0.0.2") as c:        # answered 127.0.0.20
        assert c.reply().code == 220
    m2 = with_lists(mtad_factory, [lists.addr],
                    [{"zone": "other.screen.test",
                      "match": "127.0.0.[2..11;20]"}], subdir="m2")
    with connect(m2, "127.0.0.2") as c:
        assert c.reply().code == 554


def test_answers_are_cached_for_their_ttl(mtad_factory, workdir):
    """The second client from a listed address is refused from the
    worker's cache: the list's server is gone by then."""
    nsd = Nsd(workdir, zone_text=ZONE_TEXT, zone="screen.test").start()
    try:
        m = with_lists(mtad_factory, [nsd.addr],
                       [{"zone": "black.screen.test"}], subdir="m",
                       workers=1)      # one cache
        with connect(m, "127.0.0.2") as c:
            assert c.reply().code == 554
    finally:
        nsd.stop()
    with connect(m, "127.0.0.2") as c:
        assert c.reply().lines[0].startswith(b"554 5.7.1 Service")


def test_a_list_that_never_answers_scores_zero(mtad_factory):
    silent = SilentServer()
    try:
        m = with_lists(mtad_factory, [silent.addr],
                       [{"zone": "black.screen.test"}], timeout="400ms")
        t0 = time.monotonic()
        with connect(m, "127.0.0.2") as c:
            assert c.reply().code == 220
            waited = time.monotonic() - t0
            assert 0.38 <= waited < 1.9, waited     # screen.timeout, not
            assert c.cmd("EHLO x.test").code == 250  # dns.timeout
    finally:
        silent.stop()


def test_pregreet_and_lists_together(mtad_factory, lists):
    """A listed client that also talks first is refused for talking (the
    lookup is cancelled); one that waits is refused by the list after
    the pause."""
    m = mtad_factory()
    p = free_port()
    m.cfg["server"]["listen"] = ["127.0.0.1:%d" % m.port,
                                 listen(p, pregreet="300ms"),
                                 listen(free_port(), dnsbl=False)]
    m.cfg["dns"] = {"servers": [lists.addr]}
    m.cfg["screen"] = {"dnsbl": [{"zone": "black.screen.test"}]}
    m.cfg["relay"] = RELAY
    m.write_config()
    m.start()
    with connect(m, "127.0.0.2", p) as c:
        c.send("HELO x\r\n")
        assert c.reply().lines == [b"554 5.5.1 Protocol error"]
    t0 = time.monotonic()
    with connect(m, "127.0.0.2", p) as c:
        assert c.reply().code == 554
        assert time.monotonic() - t0 >= PAUSE - 0.02
    off = m.cfg["server"]["listen"][2]["address"].rsplit(":", 1)[1]
    with connect(m, "127.0.0.2", int(off)) as c:
        assert c.reply().code == 220        # dnsbl: false on this one


def test_t_refuses_pregreet_on_submission_and_implicit_tls(mtad_factory):
    from test_check import run
    m = mtad_factory()
    m.cfg["server"]["listen"] = [
        "127.0.0.1:%d" % m.port,
        {"address": "127.0.0.1:%d" % free_port(), "role": "submission",
         "pregreet": "1s"}]
    m.write_config()
    r = run("-t", "-c", m.cfg_path)
    assert r.returncode != 0
    assert re.search(r"relay\.yaml:\d+:\d+: server\.listen\[1\]\.pregreet: "
                     r"only on a listener with role mx in clear text "
                     r"\(not role: submission\)", r.stderr), r.stderr


def test_n_shows_the_screen_keys_and_reads_them_back(mtad_factory, workdir):
    import os
    from test_check import parse, show, unflatten
    m = mtad_factory({
        "server": {"listen": [
            "127.0.0.1:2525",
            {"address": "127.0.0.1:2526", "pregreet": "1500ms",
             "pregreet_multiline": True, "dnsbl": False}]},
        "screen": {"dnsbl": [
            {"zone": "bl.example.org", "weight": 2,
             "match": "127.0.0.[2..11]"},
            {"zone": "wl.example.org", "weight": -5}],
            "threshold": 2, "timeout": "750ms"}})
    rows = parse(show(m.cfg_path))
    got = {k: v for k, v, _ in rows}
    assert got["server.listen"] == (
        '["127.0.0.1:2525", {address: "127.0.0.1:2526", pregreet: 1500ms, '
        'pregreet_multiline: true, dnsbl: false}]'), got["server.listen"]
    assert got["screen.dnsbl"] == (
        '[{zone: bl.example.org, weight: 2, match: "127.0.0.[2..11]"}, '
        '{zone: wl.example.org, weight: -5}]'), got["screen.dnsbl"]
    assert got["screen.threshold"] == "2"
    assert got["screen.timeout"] == "750ms"
    again = os.path.join(workdir, "again.yaml")
    with open(again, "w") as f:
        f.write(unflatten([r for r in rows
                           if r[1] not in ("~", "[]", "{}")]))
    rows2 = parse(show(again))
    assert [(k, v) for k, v, _ in rows2] == [(k, v) for k, v, _ in rows]
    assert not [k for k, _, d in rows2 if d and (
        k.startswith("screen.") or k == "server.listen")]
