"""Fail-over and next-hop health, end to end with real mtad processes on
loopback:

1. The fallback relay (delivery.fallback_relay, a route's fallback=): the
   direct hosts dead (a closed port, a listener whose backlog is full so
   the connect times out, a sink that accepts and never greets) -> the
   fallback relay gets the mail in the same attempt; a 4xx from the direct
   host goes there too; a 5xx bounces and the fallback sees nothing.
2. delivery.fallback_after_attempts: 2 -> the first attempt defers, the
   second goes to the fallback.
3. Health (delivery.host_down_for): after the first message waits out a
   mute host's greeting timeout, the next 20 skip it (counted at the mute
   host: no connection; in the log: one "marked down" line, 20 skips), it
   shows in mtactl hosts and /metrics, and it comes back by itself after
   its down time once it answers (one probe connection).
Timeouts are small (delivery.connect_timeout, delivery.timeouts.greeting:
1s); every wait is bounded.
"""
import re
import socket
import subprocess
import time
import urllib.request

from mtadtest import (MTAD, ZONE, closed_port, free_port, make_message,
                      send, wait_for)

TIMEOUTS = {"connect_timeout": "1s", "timeouts": {"greeting": "1s"},
            "retry": ["1s"]}


class FullBacklog:
    """A listener that never accepts, its backlog filled: a new connect
    gets no SYN-ACK and times out (a host that does not answer)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fill = []
        for _ in range(2):          # Linux queues backlog + 1
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self.fill.append(c)
        time.sleep(0.05)            # the handshakes complete in the kernel
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", self.port))
            full = False
        except (socket.timeout, OSError):
            full = True
        finally:
            probe.close()
        assert full, "the backlog did not fill: connects still succeed"

    def close(self):
        for c in self.fill:
            c.close()
        self.sock.close()


def start(mtad_factory, default_route, static=None, **delivery):
    d = dict(TIMEOUTS)
    d.update(delivery)
    cfg = {"routes": {"default": default_route}, "delivery": d}
    if static:
        cfg["routes"]["static"] = static
    return mtad_factory(cfg).start()


def count(text, needle):
    return text.count(needle)


def test_fallback_relay_takes_mail_the_dead_direct_hosts_did_not(
        mtad_factory, sink_factory):
    mute = sink_factory()
    mute.mute = True
    fb = sink_factory(name="fallback.test")
    full = FullBacklog()
    try:
        dead = "smtp:[127.0.0.1]:%d,smtp:[127.0.0.1]:%d,smtp:[127.0.0.1]:%d" % (
            closed_port(), full.port, mute.port)
        m = start(mtad_factory, dead + " fallback=" + fb.route)
        t0 = time.time()
        qid = send(m, "s@example.org", ["a@dead.example"], make_message(1))
        got = fb.wait_for(1, timeout=20)
        took = time.time() - t0
        assert got[0].rcpt_tos == ["a@dead.example"]
        text = m.wait_log("%s: to=<a@dead.example>" % qid)
        line = [ln for ln in text.splitlines()
                if "%s: to=<a@dead.example>" % qid in ln][0]
        assert "relay=127.0.0.1[127.0.0.1]:%d" % fb.port in line, line
        assert "status=sent" in line, line
        assert count(text, "trying the fallback relay") == 1
        # each dead host was tried once, in this one attempt: refused, the
        # connect timeout (1s), the greeting timeout (1s)
        assert mute.connections == 1
        assert "Connection timed out" in text
        assert "status=deferred" not in text
        assert took < 10, took
        assert m.queue_ids() == [] or wait_for(lambda: m.queue_ids() == [],
                                               timeout=10)
    finally:
        full.close()


def test_global_fallback_relay_gets_4xx_but_never_5xx(mtad_factory,
                                                      sink_factory):
    direct = sink_factory(name="direct.test")
    direct.defer = {"soft@x.example"}
    direct.reject = {"hard@x.example"}
    fb = sink_factory(name="fallback.test")
    m = start(mtad_factory, direct.route, fallback_relay=fb.route)
    qid = send(m, "s@example.org", ["soft@x.example", "hard@x.example",
                                    "ok@x.example"], make_message(2))
    got = fb.wait_for(1, timeout=20)
    text = m.wait_log("%s: to=<hard@x.example>" % qid)
    m.wait_log("%s: to=<soft@x.example>" % qid)
    text = m.log_text()
    # the 4xx recipient alone went on to the fallback
    assert [g.rcpt_tos for g in got] == [["soft@x.example"]]
    # (the sender's bounce for hard@ goes the default route too)
    assert [r for g in direct.received() for r in g.rcpt_tos
            if r.endswith("@x.example")] == ["ok@x.example"]
    hard = [ln for ln in text.splitlines()
            if "%s: to=<hard@x.example>" % qid in ln]
    assert len(hard) == 1 and "status=bounced" in hard[0], hard
    soft = [ln for ln in text.splitlines()
            if "%s: to=<soft@x.example>" % qid in ln]
    assert len(soft) == 1 and "status=sent" in soft[0], soft
    assert "relay=127.0.0.1[127.0.0.1]:%d" % fb.port in soft[0], soft
    time.sleep(0.3)                 # a stray second delivery would show
    assert len(fb.received()) == 1


def test_route_fallback_none_and_5xx_only_bounces(mtad_factory,
                                                  sink_factory):
    direct = sink_factory(name="direct.test")
    direct.reject = {"hard@y.example"}
    fb = sink_factory(name="fallback.test")
    m = start(mtad_factory, direct.route, fallback_relay=fb.route,
              static={"none.example": "smtp:[127.0.0.1]:%d fallback=none" %
                      closed_port()})
    q1 = send(m, "s@example.org", ["hard@y.example"], make_message(3))
    q2 = send(m, "s@example.org", ["x@none.example"], make_message(4))
    text = m.wait_log("%s: to=<hard@y.example>" % q1)
    text = m.wait_log("%s: to=<x@none.example>" % q2)
    assert "status=bounced" in [ln for ln in text.splitlines()
                                if q1 + ": to=" in ln][0]
    assert "status=deferred" in [ln for ln in text.splitlines()
                                 if q2 + ": to=" in ln][0]
    assert "trying the fallback relay" not in text
    time.sleep(0.3)
    assert fb.received() == []


def test_fallback_after_attempts_defers_the_first_attempt(mtad_factory,
                                                          sink_factory):
    fb = sink_factory(name="fallback.test")
    dead = "smtp:[127.0.0.1]:%d" % closed_port()
    m = start(mtad_factory, dead, fallback_relay=fb.route,
              fallback_after_attempts=2)
    qid = send(m, "s@example.org", ["a@late.example"], make_message(5))
    text = m.wait_log("status=deferred")
    assert fb.received() == []
    assert "trying the fallback relay" not in text
    got = fb.wait_for(1, timeout=15)
    assert got[0].rcpt_tos == ["a@late.example"]
    text = m.wait_log("status=sent")
    lines = [ln for ln in text.splitlines()
             if "%s: to=<a@late.example>" % qid in ln]
    assert len(lines) == 2, lines
    assert "status=deferred" in lines[0] and "status=sent" in lines[1]
    assert "relay=127.0.0.1[127.0.0.1]:%d" % fb.port in lines[1]
    assert count(text, "trying the fallback relay") == 1


def test_bad_fallback_is_refused_with_its_position(mtad_factory):
    """mtad -t names file:line:col for a bad delivery.fallback_relay and
    for a bad route option; the good forms pass."""
    m = mtad_factory({"delivery": {"fallback_relay": "mx",
                                   "host_down_for": "0"},
                      "routes": {"static": {
                          "a.example": "smtp:[10.0.0.1] fallback=smtp:x:0",
                          "b.example": "mx colour=blue"}}})
    t = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=60)
    assert t.returncode != 0, t
    err = t.stderr
    assert re.search(r"relay\.yaml:\d+:\d+: delivery\.fallback_relay: bad "
                     r"fallback relay 'mx': fallback relay: expected "
                     r"'smtp:\[HOST\]:PORT,\.\.\.', got 'mx'", err), err
    assert re.search(r"relay\.yaml:\d+:\d+: .*a\.example.*bad port '0'",
                     err), err
    assert re.search(r"relay\.yaml:\d+:\d+: .*b\.example.*unknown route "
                     r"option 'colour'", err), err
    good = mtad_factory({"delivery": {
        "fallback_relay": "smtp:[127.0.0.1]:2525, smtp:relay.example",
        "fallback_after_attempts": 3, "host_down_for": "0",
        "host_down_max": "10m"},
        "routes": {"static": {"c.example": "mx fallback=none"}}},
        subdir="good")
    t = subprocess.run([MTAD, "-t", "-c", good.cfg_path], capture_output=True,
                       text=True, timeout=60)
    assert t.returncode == 0, t.stderr


def test_mx_routes_fall_back_too_but_not_for_nxdomain(mtad_factory,
                                                     sink_factory,
                                                     dns_servers):
    """An mx route whose MX host does not answer, and one whose lookup
    fails (SERVFAIL: the destination cannot be found) go to the fallback
    relay; a domain that does not exist bounces (5.1.2), no fallback."""
    fb = sink_factory(name="fallback.test")
    home = sink_factory(name="home.test")
    for servers, rcpt in ((dns_servers.nsd, "x@one.%s" % ZONE),
                          (dns_servers.servfail, "y@multi.%s" % ZONE)):
        m = mtad_factory({"routes": {"default": "mx",
                                     "static": {"home.test": home.route}},
                          "dns": {"servers": [servers], "timeout": "1s",
                                  "attempts": 1},
                          "delivery": dict(TIMEOUTS,
                                           fallback_relay=fb.route)},
                         subdir=rcpt[0])
        m.start()
        n = len(fb.received())
        qid = send(m, "a@home.test", [rcpt], make_message(30))
        got = fb.wait_for(n + 1, timeout=20)
        assert got[-1].rcpt_tos == [rcpt]
        text = m.wait_log("%s: to=<%s>" % (qid, rcpt))
        assert "deferred by mx:%s" % rcpt.split("@")[1] in text, text
        line = [ln for ln in text.splitlines()
                if "%s: to=<%s>" % (qid, rcpt) in ln][0]
        assert "relay=127.0.0.1[127.0.0.1]:%d" % fb.port in line, line
        assert "status=sent" in line, line
        m.stop()
    m = mtad_factory({"routes": {"default": "mx",
                                 "static": {"home.test": home.route}},
                      "dns": {"servers": [dns_servers.nsd], "timeout": "1s",
                              "attempts": 1},
                      "delivery": dict(TIMEOUTS, fallback_relay=fb.route)},
                     subdir="nx")
    m.start()
    n = len(fb.received())
    qid = send(m, "a@home.test", ["z@nonexistent.%s" % ZONE],
               make_message(31))
    text = m.wait_log("%s: to=<z@nonexistent.%s>" % (qid, ZONE))
    assert "status=bounced" in text and "5.1.2" in text, text
    assert "trying the fallback relay" not in text
    home.wait_for(1, timeout=20)    # the DSN
    assert len(fb.received()) == n


def test_a_hop_that_answers_4xx_is_not_marked_down(mtad_factory,
                                                   sink_factory):
    """A 421 greeting is an answer: the next host gets the mail, the hop
    is not marked down (health is about hops that do not answer)."""
    busy = sink_factory(name="busy.test")
    busy.greeting = "421 4.7.0 busy.test too busy"
    live = sink_factory(name="live.test")
    m = start(mtad_factory, "%s,%s" % (busy.route, live.route),
              host_down_for="30s")
    qids = [send(m, "s@example.org", ["b%d@busy.example" % i],
                 make_message(40 + i)) for i in range(3)]
    live.wait_for(3, timeout=15)
    for i, q in enumerate(qids):        # their workers' lines are written
        m.wait_log("%s: to=<b%d@busy.example>" % (q, i))
    assert busy.connections >= 1
    assert "marked down" not in m.log_text()
    assert hosts(m) == []


def hosts(m):
    r = m.ctl("hosts", check=True)
    return [ln for ln in r.stdout.splitlines() if ln.strip()]


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=10) as r:
        text = r.read().decode()
    mm = re.search(r"^%s (\d+)$" % name, text, re.M)
    assert mm, "%s not in /metrics" % name
    return int(mm.group(1))


def test_health_skips_a_dead_hop_node_wide_and_it_comes_back(
        mtad_factory, sink_factory):
    mute = sink_factory(name="flaky.test")
    mute.mute = True
    live = sink_factory(name="live.test")
    live.close_after_data = True    # every message connects: no reuse
    mport = free_port()
    route = "smtp:[127.0.0.1]:%d,smtp:[127.0.0.1]:%d" % (mute.port, live.port)
    cfg = {"routes": {"default": route},
           "delivery": dict(TIMEOUTS, host_down_for="6s",
                            host_down_max="60s"),
           "metrics": {"listen": "127.0.0.1:%d" % mport}}
    m = mtad_factory(cfg).start()
    # 1: the first message waits out the greeting timeout, then goes on
    t0 = time.time()
    send(m, "s@example.org", ["first@h.example"], make_message(10))
    live.wait_for(1, timeout=15)
    first = time.time() - t0
    assert mute.connections == 1
    text = m.wait_log("marked down for 6s")
    assert first >= 0.9, first
    down = hosts(m)
    assert len(down) == 1, down
    assert down[0].startswith("127.0.0.1:%d state=down " % mute.port), down
    assert "failures=1" in down[0] and "timed out" in down[0], down
    assert metric(mport, "mtad_next_hop_down") == 1
    # 2: the next 20, over two sessions (so both workers may take them),
    # skip it: no connection reaches it, far below 20 x the timeout
    t1 = time.time()
    for k in range(2):
        s = m.smtp()
        for i in range(10):
            send(m, "s@example.org", ["n%d@h.example" % (10 * k + i)],
                 make_message(100 + 10 * k + i), conn=s)
        s.quit()
    live.wait_for(21, timeout=15)
    skipped = time.time() - t1
    assert mute.connections == 1, mute.connections
    def skip_lines():
        return [ln for ln in m.log_text().splitlines()
                if "is marked down (" in ln and "trying the next host" in ln]

    # the log process writes the workers' batches a little later
    wait_for(lambda: len(skip_lines()) >= 20, timeout=10,
             what="20 skip lines in the log")
    skips = skip_lines()
    assert len(skips) == 20, skips
    assert count(m.log_text(), "marked down for") == 1
    # the reason names what the hop did
    assert all("timed out while receiving the initial server greeting" in ln
               for ln in skips), skips[0]
    assert skipped < 20 * 1.0 / 2, skipped
    print("health: first message %.2fs (the greeting timeout), the next "
          "20 %.2fs" % (first, skipped))
    # 3: it answers again; after its down time one probe brings it back
    mute.mute = False
    wait_for(lambda: any("state=probe-due" in ln for ln in hosts(m)),
             timeout=10, what="the down time to end")
    send(m, "s@example.org", ["back@h.example"], make_message(200))
    got = mute.wait_for(1, timeout=10)
    assert got[0].rcpt_tos == ["back@h.example"]
    assert mute.connections == 2
    m.wait_log("is up again")
    assert hosts(m) == []
    assert metric(mport, "mtad_next_hop_down") == 0
    assert len(live.received()) == 21
