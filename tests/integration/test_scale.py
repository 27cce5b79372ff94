"""Scale-out with a real HAProxy (Debian's) on loopback in front of three
mtad nodes: n1 and n2 get PROXY v2 (send-proxy-v2), n3 PROXY v1
(send-proxy).  Clients bound to 127.0.0.2 and 127.0.0.3 must appear with
those addresses in each node's log and in Received:, and be allowed or
denied relay by them; a node killed with SIGKILL in the middle of 3,000
messages loses none the client saw accepted; route tables of 100,000 keys
are swapped on every node while mail flows, and no lookup sees a half
table."""
import hashlib
import os
import random
import re
import smtplib
import threading
import time

import pytest

from mtadtest import free_port
from mtadtest import HAProxy, kill9_node, make_proxy_node, wait_for

NODES = (("n1", "v2", "send-proxy-v2"), ("n2", "v2", "send-proxy-v2"),
         ("n3", "v1", "send-proxy"))
SERIAL_RE = re.compile(rb"X-Serial: (\d+)")
BY_RE = re.compile(rb"by (n\d) \(mtad\)")


class Cluster:
    def __init__(self, nodes, haproxy):
        self.nodes = nodes
        self.haproxy = haproxy
        self.front = haproxy.front

    def client(self, src, timeout=10):
        s = smtplib.SMTP(timeout=timeout, source_address=(src, 0))
        s.connect("127.0.0.1", self.front)
        return s


@pytest.fixture
def cluster(mtad_factory, sink_factory, workdir):
    sink = sink_factory()
    nodes = []
    for name, v, _ in NODES:
        m = make_proxy_node(mtad_factory, name, v, {
            "relay": {"allow_networks": ["127.0.0.2/32"]},
            "routes": {"default": sink.route},
            "delivery": {"retry": ["1s", "2s"]}})
        nodes.append(m.start())
    front = free_port()
    hp = HAProxy(workdir, front, [(m.cfg["server"]["hostname"], m.proxy_port,
                                   kind) for m, (_, _, kind) in
                                  zip(nodes, NODES)])
    hp.start()
    c = Cluster(nodes, hp)
    c.sink = sink
    # HAProxy's SMTP checks (sent with a PROXY header) reached every node,
    # so round-robin spreads over all three from the first connection
    for m in nodes:
        m.wait_log("PROXY v", timeout=15)
    wait_for(lambda: all(m.log_text().count("PROXY v") >= 2 for m in nodes), timeout=15,
             what="two health checks per node (rise 2)")
    yield c
    hp.stop()


def msg(serial, src):
    return ("From: a@example.org\r\nTo: b@far.example\r\n"
            "Subject: serial %d\r\nX-Serial: %d\r\nX-Src: %s\r\n\r\n"
            "body %d\r\n" % (serial, serial, src, serial)).encode()


def test_client_addresses_through_haproxy(cluster):
    """Six connections from each source address, round-robin over the three
    nodes (two each): relay allowed for 127.0.0.2, denied for 127.0.0.3,
    and each node names the real client in its log and Received:."""
    sink = cluster.sink

    def covered():
        by = {BY_RE.search(mm.data).group(1) for mm in sink.received()}
        logs = [m.log_text() for m in cluster.nodes]
        return by == {b"n1", b"n2", b"n3"} and all(
            re.search(r"RCPT from \[127\.0\.0\.3\]", t) for t in logs)

    # Round-robin spreads six rounds over all three nodes; a node that a
    # health check marked down for a moment only delays that, so go on
    # (bounded) until every node has served both addresses.
    sent = 0
    for i in range(30):
        c = cluster.client("127.0.0.2")
        c.ehlo("two.test")
        c.sendmail("a@example.org", ["b@far.example"], msg(i, "127.0.0.2"))
        c.quit()
        sent += 1
        c = cluster.client("127.0.0.3")
        c.ehlo("three.test")
        c.mail("a@example.org")
        code, text = c.rcpt("b@far.example")
        assert code == 554 and b"Relay access denied" in text, (code, text)
        c.quit()
        if i >= 5:
            sink.wait_for(sent, timeout=30)
            try:
                wait_for(covered, timeout=1, what="both clients on every node")
                break
            except AssertionError:
                continue
    wait_for(covered, timeout=10, what="both clients on every node")
    got = sink.wait_for(sent, timeout=30)
    for mm in got:
        rec = mm.data.split(b"\r\n\r\n")[0]
        assert re.search(rb"Received: from two\.test \(\[127\.0\.0\.2\]\)",
                         rec), rec
    for m in cluster.nodes:
        want = "PROXY v1" if m.cfg["server"]["hostname"] == "n3" else \
            "PROXY v2"
        for pat in (r"connect from \[127\.0\.0\.2\]:\d+",
                    r"reject: RCPT from \[127\.0\.0\.3\]:\d+: 554 5\.7\.1",
                    r"proxy \[127\.0\.0\.1\]:\d+: %s for \[127\.0\.0\.2\]" % want,
                    r"proxy \[127\.0\.0\.1\]:\d+: %s for \[127\.0\.0\.3\]" % want):
            wait_for(lambda: re.search(pat, m.log_text()), timeout=10,
                     what="%s in %s's log" % (pat, m.dir))
        log = m.log_text()
        # 127.0.0.1 (HAProxy, the test's probes) is the client only of
        # sessions that send no mail: health checks and readiness probes
        assert not re.search(r"(RCPT|MAIL) from \[127\.0\.0\.1\]", log)


def stream(cluster, total, nthreads, on_progress=None, src="127.0.0.2",
           rcpt=lambda serial: "b@far.example", per_conn=25, deadline=240):
    """Send serials 0..total-1 over nthreads clients through HAProxy, each
    connection carrying up to per_conn messages.  A message whose 250 was
    not seen is retried on a new connection (at most 50 tries each, all
    within deadline seconds).  Returns (accepted serials, refusals)."""
    accepted, refused, lock = set(), [], threading.Lock()
    todo = list(range(total))
    random.Random(7).shuffle(todo)
    errors = []
    end = time.time() + deadline

    def worker(mine):
        conn, sent_on_conn = None, 0
        for serial in mine:
            for attempt in range(50):
                if time.time() > end:
                    errors.append("deadline at serial %d" % serial)
                    return
                try:
                    if conn is None:
                        conn = cluster.client(src)
                        conn.ehlo("stream.test")
                        sent_on_conn = 0
                    r = conn.sendmail("a@example.org", [rcpt(serial)],
                                      msg(serial, src))
                    assert r == {}
                    with lock:
                        accepted.add(serial)
                        n = len(accepted)
                    sent_on_conn += 1
                    if sent_on_conn >= per_conn:
                        conn.quit()
                        conn = None
                    if on_progress:
                        on_progress(n)
                    break
                except smtplib.SMTPRecipientsRefused as e:
                    with lock:
                        refused.append((serial, e.recipients))
                    break
                except (smtplib.SMTPException, OSError):
                    try:
                        if conn is not None:
                            conn.close()
                    except OSError:
                        pass
                    conn = None
                    time.sleep(0.05 * min(attempt + 1, 10))
            else:
                errors.append("serial %d: 50 tries failed" % serial)
        if conn is not None:
            try:
                conn.quit()
            except (smtplib.SMTPException, OSError):
                pass

    threads = [threading.Thread(target=worker, args=(todo[i::nthreads],))
               for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline + 30)
        assert not t.is_alive(), "client thread stuck"
    assert not errors, errors[:5]
    return accepted, refused


def test_kill9_node_mid_stream_loses_nothing(cluster):
    sink = cluster.sink
    victim = cluster.nodes[1]               # n2
    killed = threading.Event()
    kill_lock = threading.Lock()

    def progress(n):
        if n >= 1000 and not killed.is_set():
            with kill_lock:
                if not killed.is_set():
                    kill9_node(victim)
                    killed.set()

    accepted, refused = stream(cluster, 3000, 6, on_progress=progress)
    assert killed.is_set()
    assert not refused, refused[:5]
    assert accepted == set(range(3000))     # the client retried its failures
    left = victim.queue_ids()
    victim.start()                          # same spool: recovers queue/
    wait_for(lambda: {int(SERIAL_RE.search(m.data).group(1))
                      for m in sink.received()} >= accepted, timeout=120,
                               what="every accepted message delivered")
    wait_for(lambda: victim.queue_ids() == [] and all(
        m.queue_ids() == [] for m in cluster.nodes),
        timeout=60, what="queues empty")
    copies = {}
    for m in sink.received():
        serial = int(SERIAL_RE.search(m.data).group(1))
        copies.setdefault(serial, []).append(
            BY_RE.search(m.data).group(1).decode())
    dups = {s: by for s, by in copies.items() if len(by) > 1}
    # At-least-once: a second copy only for mail the killed node held (in
    # its queue, or committed with the 250 lost, so the client sent again).
    for s, by in dups.items():
        assert "n2" in by, (s, by)
    print("kill -9 n2: %d messages in its queue at restart, %d serials "
          "delivered twice" % (len(left), len(dups)))
    assert "recover:" in victim.log_text()


# --- routes: 100,000 keys swapped on every node under load ---------------

NDOM = 50000                        # two keys per domain: 100,000 keys


def table(sink_route, mixed_marker):
    """Address key u@dN.test -> sink_route for every N, and domain key
    dN.test -> either the same sink (table A) or a reject marker (B).  A
    whole table routes u@dN.test to its sink (address keys win); a lookup
    that sees B's domain key without B's address key is refused with the
    marker, and one that sees neither lands on routes.default."""
    lines = []
    for n in range(NDOM):
        lines.append(b"u@d%05d.test %s\n" % (n, sink_route.encode()))
        lines.append(b"d%05d.test %s\n" % (n, mixed_marker or
                                             sink_route.encode()))
    return lines


def test_route_swap_under_load(cluster, sink_factory, workdir):
    sink_a, sink_b = sink_factory(), sink_factory()
    half = cluster.sink                     # routes.default on every node
    files, hashes = {}, {}
    for name, s, marker in (("a", sink_a, None),
                            ("b", sink_b, b"reject:550 5.7.1 mixed table")):
        lines = table(s.route, marker)
        files[name] = os.path.join(workdir, "routes-%s.txt" % name)
        with open(files[name], "wb") as f:
            f.write(b"".join(lines))
        # export's sorted "KEY ROUTE" lines: LMDB's byte order = Python's
        hashes[name] = "sha256:%s %d routes" % (
            hashlib.sha256(b"".join(sorted(lines))).hexdigest(), len(lines))

    def swap(name):
        for m in cluster.nodes:
            r = m.ctl("route", "import", "--replace", files[name], check=True,
                      timeout=120)
            assert "imported 100000 routes" in r.stdout, r.stdout
        for m in cluster.nodes:
            assert m.ctl("route", "hash", check=True).stdout.strip() == \
                hashes[name]

    swap("a")
    exports = {m.ctl("route", "export", check=True).stdout
               for m in cluster.nodes}
    assert len(exports) == 1                # the same text on every node
    stop = threading.Event()
    result = {}

    def flow():
        rng = random.Random(11)
        batch = 0
        while not stop.is_set() and batch < 200:
            result.setdefault("acc", set())
            base = batch * 200
            acc, ref = stream(
                cluster, 200, 4, deadline=120,
                rcpt=lambda s: "u@d%05d.test" % rng.randrange(NDOM))
            result["acc"] |= {base + s for s in acc}
            result.setdefault("refused", []).extend(ref)
            batch += 1
        result["batches"] = batch

    t = threading.Thread(target=flow)
    t.start()
    try:
        for rnd, name in enumerate(("b", "a", "b", "a")):
            before = len((sink_b if name == "b" else sink_a).received())
            swap(name)
            # mail flowed under the new table before the next swap
            wait_for(lambda: len((sink_b if name == "b" else
                                  sink_a).received()) > before + 20,
                     timeout=60,
                              what="mail routed by table %s (round %d)" % (name, rnd))
    finally:
        stop.set()
        t.join(300)
    assert not t.is_alive()
    assert not result.get("refused"), result["refused"][:5]
    total = len(sink_a.received()) + len(sink_b.received())
    wait_for(lambda: len(sink_a.received()) + len(sink_b.received()) +
             len(half.received()) >= len(result["acc"]), timeout=120,
                      what="flow delivered")
    total = len(sink_a.received()) + len(sink_b.received())
    assert len(half.received()) == 0, [m.rcpt_tos for m in half.received()]
    assert total >= len(result["acc"])
    assert len(sink_a.received()) > 0 and len(sink_b.received()) > 0
    # The detector is live: a key in no table goes to the default's sink.
    c = cluster.client("127.0.0.2")
    c.sendmail("a@example.org", ["u@nokey.test"], msg(999999, "x"))
    c.quit()
    half.wait_for(1, timeout=30)
    print("route swaps: %d messages during 5 imports of 100,000 keys on 3 "
          "nodes; table A %d, table B %d, half 0" % (
              len(result["acc"]), len(sink_a.received()),
              len(sink_b.received())))


def test_drain_one_node_while_mail_flows(cluster):
    """mtactl drain on n3 in the middle of 900 messages: n3 finishes what
    it holds and stops with an empty queue; HAProxy sends the rest to n1
    and n2; every message is delivered."""
    sink = cluster.sink
    n3 = cluster.nodes[2]
    started = threading.Event()
    result = {}

    def drain():
        r = n3.ctl("drain", timeout=120)
        result["rc"], result["out"] = r.returncode, r.stdout + r.stderr

    t = threading.Thread(target=drain)

    def progress(n):
        if n >= 300 and not started.is_set():
            started.set()
            t.start()

    accepted, refused = stream(cluster, 900, 4, on_progress=progress)
    assert started.is_set()
    t.join(130)
    assert not t.is_alive()
    assert result["rc"] == 0, result["out"]
    assert "drained: mtad stopped, queue empty" in result["out"]
    assert n3.proc.wait(30) == 0
    assert not refused and accepted == set(range(900))
    wait_for(lambda: {int(SERIAL_RE.search(m.data).group(1))
                      for m in sink.received()} >= accepted, timeout=60,
                               what="every accepted message delivered")
    assert n3.queue_ids() == []
    by = {BY_RE.search(m.data).group(1) for m in sink.received()}
    assert by == {b"n1", b"n2", b"n3"}
    assert "draining: listeners closed" in n3.log_text()
