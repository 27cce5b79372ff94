"""Egress sources and pools: where mail leaves from (relay.yaml egress:).

A real mtad delivers to the receiver simulator (shapesim.py, run as its
own process so that it and the test's senders do not share one Python
interpreter), which records the source IP and the EHLO name of every
delivery.  Sources are 127.0.0.2-127.0.0.5 on this namespace's loopback;
one more, "gone", is an address that is not on any interface (10.77.0.1),
until the test adds it.  Shown: the pool's weights hold within a few
percent over 10,000 messages, each source says its own EHLO name; a
route naming a pool; the per-sender-domain table edited live with
mtactl; a source whose address is gone is taken out with one log line
(per worker) and mail goes through the others, and it comes back by
itself once its address is there again; a pool with no usable source
defers with a clear reason.

Run it in its own network namespace (tests/run-integration.sh in
`unshare -n`): the addresses are the namespace's own, and adding
10.77.0.1 needs root there.
"""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from mtadtest import IS_ROOT, MTAD, free_port, wait_for

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shapesim import ctl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SIM_ADDR = "127.0.4.1"
SOURCES = [("a", "127.0.0.2", 1), ("b", "127.0.0.3", 2),
           ("c", "127.0.0.4", 3), ("d", "127.0.0.5", 4)]
GONE = "10.77.0.1"
N = 10000


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


def in_own_netns():
    """True when this namespace is not the host's (no other interface
    than lo): the test changes its loopback addresses."""
    return [n for _, n in socket.if_nameindex()] == ["lo"]


@pytest.fixture
def sim(workdir):
    """The simulator as its own process: one provider "open" (no
    limits) on SIM_ADDR; returns (port, control socket)."""
    port = free_port(SIM_ADDR)
    conf = os.path.join(workdir, "sim.json")
    sock = os.path.join(workdir, "sim.sock")
    with open(conf, "w") as f:
        json.dump({"port": port, "providers": [
            {"name": "open", "addrs": [SIM_ADDR], "port": port},
            {"name": "six", "addrs": ["::1"], "port": port}]}, f)
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "shapesim.py"),
                          "serve", "--config", conf, "--control", sock,
                          "--quiet"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        line = p.stdout.readline()
        assert "shapesim: ready" in line, line + (p.stdout.read() or "")
        yield port, sock
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def sources_stats(sock, provider="open"):
    st = ctl(sock, {"cmd": "stats"})
    return st["providers"][provider]["sources"]


def messages_from(sock, provider="open"):
    return {src: s["messages"]
            for src, s in sources_stats(sock, provider).items()}


def blast(port, n, sender, rcpt, threads=4, timeout=60.0):
    """n messages to mtad over `threads` pipelined sessions (MAIL, RCPT,
    DATA in one write, then the body); every reply must be positive."""
    errors = []
    deadline = time.time() + timeout
    body = (b"From: s@example.org\r\nSubject: egress\r\n\r\nhello\r\n.\r\n")

    def one(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            f = s.makefile("rb")

            def reply():
                while True:
                    line = f.readline()
                    if not line:
                        raise AssertionError("mtad closed the session")
                    if line[3:4] != b"-":
                        return line
            assert reply().startswith(b"220")
            s.sendall(b"EHLO client.test\r\n")
            assert reply().startswith(b"250")
            for _ in range(count):
                assert time.time() < deadline, "sending took too long"
                s.sendall(b"MAIL FROM:<%s>\r\nRCPT TO:<%s>\r\nDATA\r\n" %
                          (sender.encode(), rcpt.encode()))
                r = (reply(), reply(), reply())
                assert r[0][:1] == b"2" and r[1][:1] == b"2" and \
                    r[2].startswith(b"354"), r
                s.sendall(body)
                r = reply()
                assert r.startswith(b"250"), r
            s.sendall(b"QUIT\r\n")
            s.close()
        except Exception as e:      # noqa: BLE001 (reported below)
            errors.append(repr(e))

    per = [n // threads + (1 if i < n % threads else 0)
           for i in range(threads)]
    ts = [threading.Thread(target=one, args=(k,)) for k in per]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout + 5)
    assert not errors, errors[:3]


def config(sim_port, extra_sources=(), pools=None, default_pool="bulk",
           workers=2):
    srcs = [{"name": n, "address": a, "ehlo": "%s.egress.test" % n}
            for n, a, _ in SOURCES]
    srcs += [{"name": n, "address": a, "ehlo": "%s.egress.test" % n}
             for n, a in extra_sources]
    if pools is None:
        pools = [{"name": "bulk",
                  "sources": {n: w for n, _, w in SOURCES}}]
    return {
        "server": {"workers": workers},
        "routes": {"default": "smtp:[%s]:%d" % (SIM_ADDR, sim_port)},
        "delivery": {"connections_per_destination": 8},
        "egress": {"sources": srcs, "pools": pools,
                   "default_pool": default_pool,
                   "recheck_interval": "1s"},
    }


def wait_delivered(sock, total, timeout=60.0):
    wait_for(lambda: sum(messages_from(sock).values()) >= total,
             timeout=timeout, what="%d deliveries" % total)
    return messages_from(sock)


def test_pool_weights_and_each_sources_ehlo(mtad_factory, sim):
    port, sock = sim
    m = mtad_factory(config(port)).start()
    t0 = time.time()
    try:
        blast(m.port, N, "s@example.org", "r@dest.test")
    except AssertionError:
        print(m.log_text()[-3000:], m.stderr_text())
        raise
    got = wait_delivered(sock, N, timeout=60)
    took = time.time() - t0
    wait_for(lambda: not m.queue_ids(), timeout=20, what="an empty queue")
    total = sum(got.values())
    assert total == N, got
    wsum = sum(w for _, _, w in SOURCES)
    for name, addr, w in SOURCES:
        share = got.get(addr, 0) / total
        want = w / wsum
        # within 2 percentage points of the weight's share (a few %)
        assert abs(share - want) < 0.02, (name, share, want, got)
    # nothing left from any other address
    assert set(got) <= {a for _, a, _ in SOURCES}, got
    st = sources_stats(sock)
    for name, addr, _ in SOURCES:
        assert set(st[addr]["ehlo"]) == {"%s.egress.test" % name}, st[addr]
    # the delivery log names the source
    text = m.log_text()
    assert ", source=a, " in text and ", source=d, " in text
    print("egress: %d messages in %.1fs, split %s" % (N, took, got))


def test_route_pool_and_the_sender_table_live(mtad_factory, sim):
    port, sock = sim
    pools = [{"name": "bulk", "sources": {n: w for n, _, w in SOURCES}},
             {"name": "solo", "sources": ["b"]},
             {"name": "other", "sources": {"c": 1, "d": 1}},
             {"name": "v6only", "sources": ["six"]},
             {"name": "mixed", "sources": {"six": 5, "a": 1}}]
    m = mtad_factory(config(port, pools=pools,
                            extra_sources=[("six", "::1")])).start()
    # idle connections from every source of bulk to the same host ...
    blast(m.port, 40, "s@example.org", "r@dest.test", threads=4)
    assert len(wait_delivered(sock, 40)) == 4
    ctl(sock, {"cmd": "reset"})
    # ... and a route naming a pool: only its source carries its mail
    m.ctl("route", "add", "special.test",
          "smtp:[%s]:%d pool=solo" % (SIM_ADDR, port), check=True)
    blast(m.port, 40, "s@example.org", "x@special.test", threads=2)
    got = wait_delivered(sock, 40)
    assert got == {"127.0.0.3": 40}, got
    ctl(sock, {"cmd": "reset"})
    # a route naming a pool that does not exist: deferred, clearly
    m.ctl("route", "add", "nopool.test",
          "smtp:[%s]:%d pool=missing" % (SIM_ADDR, port), check=True)
    blast(m.port, 1, "s@example.org", "x@nopool.test", threads=1)
    m.wait_log("4.3.5 egress pool missing is not configured")
    # an IPv6 source cannot reach an IPv4 host: in a mixed pool the IPv4
    # source takes it, alone it defers and says why
    m.ctl("route", "add", "six.test",
          "smtp:[%s]:%d pool=v6only" % (SIM_ADDR, port), check=True)
    m.ctl("route", "add", "mixed.test",
          "smtp:[%s]:%d pool=mixed" % (SIM_ADDR, port), check=True)
    blast(m.port, 1, "s@example.org", "x@six.test", threads=1)
    m.wait_log("4.4.0 egress source six is IPv6, host 127.0.4.1 is not")
    # to an IPv6 host it goes, from its address and with its name
    m.ctl("route", "add", "v6.test", "smtp:[::1]:%d pool=v6only" % port,
          check=True)
    blast(m.port, 3, "s@example.org", "x@v6.test", threads=1)
    wait_for(lambda: messages_from(sock, "six").get("::1", 0) == 3,
             timeout=20, what="3 deliveries over IPv6")
    assert set(sources_stats(sock, "six")["::1"]["ehlo"]) == {
        "six.egress.test"}
    ctl(sock, {"cmd": "reset"})
    blast(m.port, 12, "s@example.org", "x@mixed.test", threads=2)
    assert wait_delivered(sock, 12) == {"127.0.0.2": 12}
    # mtactl show names the source of a recipient's last attempt
    blast(m.port, 1, "s@example.org", "defer1@special.test", threads=1)
    text = m.wait_log("to=<defer1@special.test>, relay=")
    qid = re.search(r"([0-9A-F]{16}): to=<defer1@special.test>, relay=",
                    text).group(1)
    shown = m.ctl("show", qid, check=True).stdout
    assert re.search(r"<defer1@special.test> pending .* relay=\S+ "
                     r"tls=none source=b( class=\w+)?\n", shown), shown
    js = json.loads(m.ctl("show", qid, "--json", check=True).stdout)
    rc = js["recipients"][0]
    assert rc["source"] == "b" and rc["tls"] == "none", rc
    m.ctl("delete", qid, check=True)
    ctl(sock, {"cmd": "reset"})
    # the sender-domain table, edited live
    r = m.ctl("pool", "set", "sender.test", "nope")
    assert r.returncode == 1 and "no pool nope" in r.stderr, r
    m.ctl("pool", "set", "sender.test", "other", check=True)
    r = m.ctl("pool", "list", check=True)
    assert r.stdout == "sender.test\tother\n", r.stdout
    blast(m.port, 60, "x@sender.test", "r@dest.test", threads=2)
    got = wait_delivered(sock, 60)
    assert set(got) == {"127.0.0.4", "127.0.0.5"}, got
    # each of the 2 workers splits its own messages, a source at most
    # MTA_EGRESS_SLACK (8) over its share before its connection yields:
    # 60 messages may land 22/38 at worst, never worse (the weights
    # themselves are measured over 10,000 in test_pool_weights_and_each_sources_ehlo)
    assert abs(got["127.0.0.4"] - got["127.0.0.5"]) <= 2 * 8 + 2, got
    # a subdomain's key (".sender.test") and the route's pool winning
    m.ctl("pool", "set", ".sender.test", "solo", check=True)
    ctl(sock, {"cmd": "reset"})
    blast(m.port, 10, "x@mail.sender.test", "r@dest.test", threads=1)
    blast(m.port, 10, "x@sender.test", "x@special.test", threads=1)
    got = wait_delivered(sock, 20)
    assert got == {"127.0.0.3": 20}, got
    m.ctl("pool", "del", "sender.test", check=True)
    m.ctl("pool", "del", ".sender.test", check=True)
    assert m.ctl("pool", "list", check=True).stdout == ""
    m.wait_log("via=mtactl: pool_set sender.test other")


@pytest.mark.skipif(not IS_ROOT or not in_own_netns(),
                    reason="adds an address to this namespace's loopback")
def test_gone_source_taken_out_and_back(mtad_factory, sim):
    port, sock = sim
    pools = [{"name": "bulk", "sources": {"a": 1, "b": 1, "gone": 1}},
             {"name": "dead", "sources": ["gone"]}]
    m = mtad_factory(config(port, extra_sources=[("gone", GONE)],
                            pools=pools))
    # mtad -t warns (and passes): the address may come later
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert ("egress.sources gone: %s ehlo gone.egress.test: warning: "
            "address not on this host" % GONE) in r.stdout, r.stdout
    assert ("egress.sources a: 127.0.0.2 ehlo a.egress.test: address on "
            "this host") in r.stdout, r.stdout
    m.start()
    m.ctl("route", "add", "dead.test",
          "smtp:[%s]:%d pool=dead" % (SIM_ADDR, port), check=True)
    try:
        blast(m.port, 300, "s@example.org", "r@dest.test", threads=3)
        got = wait_delivered(sock, 300)
        assert set(got) == {"127.0.0.2", "127.0.0.3"}, got
        text = m.log_text()
        lines = [ln for ln in text.splitlines()
                 if "egress source gone (%s) cannot bind" % GONE in ln]
        # one line per worker that tried it, not one per message
        assert 1 <= len(lines) <= 2, lines
        # a pool with no usable source: deferred with the reason
        blast(m.port, 1, "s@example.org", "x@dead.test", threads=1)
        m.wait_log("451 4.4.0 no usable egress source in pool dead")
        # the address comes (back): the recheck puts the source back
        ip("addr", "add", GONE + "/32", "dev", "lo")
        m.wait_log("egress source gone (%s) binds again" % GONE,
                   timeout=10)
        ctl(sock, {"cmd": "reset"})
        blast(m.port, 300, "s@example.org", "r@dest.test", threads=3)
        got = wait_delivered(sock, 300)
        assert got.get(GONE, 0) > 0, got
        # and the deferred message to the dead pool goes at its retry
        wait_for(lambda: not m.queue_ids(), timeout=20,
                 what="an empty queue")
        st = sources_stats(sock)
        assert set(st[GONE]["ehlo"]) == {"gone.egress.test"}, st[GONE]
    finally:
        subprocess.run(["ip", "addr", "del", GONE + "/32", "dev", "lo"],
                       capture_output=True)


def test_no_egress_section_is_todays_behaviour(mtad_factory, sim):
    port, sock = sim
    m = mtad_factory({"routes": {"default": "smtp:[%s]:%d" % (SIM_ADDR,
                                                             port)}}).start()
    blast(m.port, 20, "s@example.org", "r@dest.test", threads=1)
    got = wait_delivered(sock, 20)
    assert got == {"127.0.0.1": 20}, got
    st = sources_stats(sock)
    assert set(st["127.0.0.1"]["ehlo"]) == {"mx.test.example"}
    assert "source=" not in m.log_text()


def test_json_log_names_the_source(mtad_factory, sim):
    port, sock = sim
    cfg = config(port)
    cfg["log"] = {"format": "json"}
    m = mtad_factory(cfg).start()
    blast(m.port, 20, "s@example.org", "r@dest.test", threads=2)
    wait_delivered(sock, 20)

    def records():
        out = []
        for line in m.log_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "delivery":
                out.append(rec)
        return out
    wait_for(lambda: len(records()) >= 20, timeout=10,
             what="20 delivery records")
    assert {r["source"] for r in records()} <= {"a", "b", "c", "d"}
    assert all(r["status"] == "sent" for r in records())
