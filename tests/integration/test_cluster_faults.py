"""One fleet, one set of limits, its second half (the first and the set-up:
test_cluster.py, cluster_fixture.py): bans, AUTH failures and queue
quotas shared across the three nodes, Redis killed mid-run, a killed
node's connection leases, mtactl cluster status, and the configs of
docs/SCALING.md.  A file of its own so the two halves run side by side
in the test shards."""
import os
import time

import pytest

import test_cluster
from cluster_fixture import SOURCE
from mtadtest import Client, wait_for
from test_cluster import BAN_421, RATE, by_node, gmail_rcpt, google_site

fleet = test_cluster.fleet      # the same fixture: three nodes, Redis, HAProxy

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the simulator on port 25 needs root")


def make_errors(node, ip, n):
    """n 5xx replies on one session with node: a refused RCPT (relay
    denied: ip is not in allow_networks), then bad commands."""
    with node.client(ip) as cl:
        cl.greet()
        assert cl.cmd("MAIL FROM:<a@example.org>").code == 250
        assert cl.cmd("RCPT TO:<x@elsewhere.test>").code == 554
        for _ in range(n - 1):
            assert cl.cmd("BOGUS").code == 500
        cl.cmd("QUIT")


def test_a_client_banned_on_one_node_is_refused_by_the_others(fleet):
    """limits.ban (3 errors): 127.0.0.5 makes them on n1; n2 and n3
    refuse it at connect within a few syncs, and so does the fleet
    through HAProxy; other addresses are served."""
    c = fleet(google_site(), over={"limits": {
        "ban": {"errors": 3, "window": "1m", "duration": "1h"},
        "max_connections_per_ip": 200}})
    n1, n2, n3 = c.nodes
    for n in (n2, n3):
        assert n.first_line("127.0.0.5").startswith("220")
    make_errors(n1, "127.0.0.5", 3)
    n1.wait_log("ban: [127.0.0.5] banned for 3600s after 3 errors")
    t = time.time()
    for n in (n2, n3):
        wait_for(lambda: n.first_line("127.0.0.5").startswith(BAN_421), 3,
                 what="%s refusing 127.0.0.5" % n.name)
    took = time.time() - t
    for _ in range(6):                  # round-robin: two on each node
        with Client(25, source="127.0.0.5", host="127.0.0.100") as cl:
            line = cl._line().decode()
            assert line.startswith(BAN_421), line
    for n in c.nodes:
        assert n.first_line("127.0.0.6").startswith("220")
    print("ban on the other nodes after %.2f s" % took)


def test_auth_failures_add_up_across_nodes(fleet, workdir):
    """auth.max_failures 4: two wrong passwords on n1, one on n2, one on
    n3 (no node reaches 4 by itself): the fleet's count is 4, so the
    right password from that address is answered 421 on every node;
    from another address it works."""
    from test_auth_scale import plain, yescrypt
    pw = os.path.join(workdir, "passwd")
    with open(pw, "w") as f:
        f.write("alice:%s\n" % yescrypt("s3cret pass", cost=5))
    os.chmod(pw, 0o600)
    c = fleet(google_site(), over={
        "auth": {"password_file": pw, "allow_plaintext_loopback": True,
                 "failure_delay": "0s", "max_failures": 4},
        "limits": {"max_connections_per_ip": 200}})
    n1, n2, n3 = c.nodes
    ip = "127.0.0.6"

    def auth(node, password, src=ip):
        with node.client(src, timeout=30) as cl:
            cl.greet()
            return cl.cmd(plain("alice", password)).code

    for node, k in ((n1, 2), (n2, 1), (n3, 1)):
        for _ in range(k):
            assert auth(node, "wrong") == 535, node.name
    # polls with the right password: counted and given back, so a poll
    # adds no failure of its own
    for node in (n2, n3, n1):
        wait_for(lambda: auth(node, "s3cret pass") == 421, 5,
                 what="%s refusing AUTH from %s" % (node.name, ip))
    for node in c.nodes:
        assert auth(node, "s3cret pass", src="127.0.0.7") == 235


def test_queue_quotas_add_up_across_nodes(fleet):
    """quotas.recipient_domain.messages 6, example.org's next hop down:
    two messages queued on each node (none over 6 by itself); after a few
    syncs a seventh is refused with 452 4.3.1 on n1 and on n2.  One probe
    each: a probe taken would count."""
    import json
    from mtadtest import closed_port
    c = fleet(google_site(), over={
        "quotas": {"recipient_domain": {"messages": 6}},
        "routes": {"static": {"example.org": "smtp:[127.0.0.1]:%d" %
                              closed_port()}}})

    def round_trips(node):
        r = node.ctl("cluster", "status", "--json")
        return (json.loads(r.stdout).get("redis", {}).get("round_trips", 0)
                if r.returncode == 0 else 0)

    for k, node in enumerate(c.nodes):
        c.submit(2, lambda i: ["q%d.%d@example.org" % (k, i)], via=node)
    # five syncs of every node after the last message (at most 5 s: the
    # probe below is the assertion, also when the nodes do not sync)
    start = [round_trips(node) for node in c.nodes]
    deadline = time.time() + 5
    while time.time() < deadline and any(
            round_trips(node) < r0 + 5 for node, r0 in zip(c.nodes, start)):
        time.sleep(0.05)
    for node in c.nodes[:2]:
        with node.client() as cl:
            cl.greet()
            assert cl.cmd("MAIL FROM:<s@home.test>").code == 250
            r = cl.cmd("RCPT TO:<probe@example.org>")
            assert r.code == 452 and b"4.3.1 Quota exceeded" in r.text, \
                (node.name, r)


def serials(recs):
    return {int(r["x"]["X-Serial"]) for r in recs if "X-Serial" in r["x"]}


def test_redis_killed_mid_run_and_restarted(fleet):
    """180 messages at a shared 120 a minute; Redis is killed with
    SIGKILL after 20 deliveries and started again (empty) 8 s later:
    each node falls back to a third of the limit (one log line and one
    episode counted per node), rejoins by itself, every accepted message
    is delivered and the provider sees no more violations than the
    episode's documented margin."""
    c = fleet(google_site(deliveries_per_minute=RATE),
              sim={"per_minute": RATE})
    n = 3 * RATE // 2
    c.submit(n, gmail_rcpt("k"))
    c.sim.wait_for(20, timeout=30, provider="gmail")
    c.redis.kill()
    for node in c.nodes:
        wait_for(lambda: node.scrape().get("mtad_cluster_fallback") == 1, 10,
                 what="%s in fallback" % node.name)
    before = len(c.sim.records("gmail"))
    t = time.time()
    wait_for(lambda: time.time() > t + 8, 10, what="8 s of fallback")
    during = len(c.sim.records("gmail")) - before
    c.redis.start()
    for node in c.nodes:
        wait_for(lambda: node.scrape().get("mtad_cluster_fallback") == 0, 15,
                 what="%s back on Redis" % node.name)
    recs = c.sim.wait_for(n, timeout=120, provider="gmail")
    assert serials(recs) == set(range(n)), sorted(set(range(n)) -
                                                  serials(recs))[:10]
    # the documented margin of a fallback episode (docs/SCALING.md,
    # "Fallback"): at the limit, each node's schedule restarts without the
    # others' last slots when it leaves Redis, and the fleet's (an empty
    # Redis) when it comes back: at most one message per node, plus one
    assert c.sim.violations("gmail") <= len(c.nodes) + 1, \
        c.sim.events()[:5]
    # in fallback the fleet kept to 3 x (limit / 3): 16 in 8 s, no more
    assert during <= RATE * 8 / 60 + 3, during
    for node in c.nodes:
        m = node.scrape()
        assert m.get("mtad_cluster_fallback_episodes_total") == 1, \
            (node.name, {k: v for k, v in m.items() if "cluster" in k})
        log = node.log_text()
        assert log.count("cluster: redis unreachable") == 1, log[-2000:]
        assert "answers again after" in log, log[-2000:]


def test_a_killed_nodes_connection_leases_expire(fleet):
    """connections: 2 shared; n1 holds both (the provider stalls its
    RCPTs) while n2 and n3 wait with mail of their own; n1 is killed
    with SIGKILL (every process): its leases expire within a few syncs
    and n2 and n3 deliver, never over 2 connections; n1 restarted
    delivers its two messages too."""
    c = fleet(google_site(connections=2),
              sim={"max_conns": 2,
                   "replies": [("hold*", "rcpt", None, 60)]})
    n1, n2, n3 = c.nodes
    c.submit(2, gmail_rcpt("hold"), via=n1)
    wait_for(lambda: c.sim.source("gmail", SOURCE).get("open") == 2, 15,
             what="n1 holding two connections")
    c.submit(3, gmail_rcpt("a"), via=n2, serial0=10)
    c.submit(3, gmail_rcpt("b"), via=n3, serial0=20)
    for n in (n2, n3):
        wait_for(lambda: (n.shaping("google") or {}).get("held", 0) >= 1,
                 10, what="%s waiting for a connection" % n.name)
    assert c.sim.records("gmail") == []
    assert c.sim.violations("gmail") == 0, c.sim.events()[:5]
    t_kill = time.time()
    c.kill9(n1)
    recs = c.sim.wait_for(6, timeout=15, provider="gmail")
    took = min(r["time"] for r in recs) - t_kill
    assert by_node(recs) == {"n2": 3, "n3": 3}, by_node(recs)
    assert c.sim.violations("gmail") == 0, c.sim.events()[:5]
    print("a dead node's leases gone after %.2f s" % took)
    c.sim.set("gmail", replies=[])
    n1.start()
    recs = c.sim.wait_for(8, timeout=30, provider="gmail")
    assert by_node(recs).get("n1") == 2, by_node(recs)
    assert c.sim.violations("gmail") == 0, c.sim.events()[:5]


def test_mtactl_cluster_status_names_the_nodes_and_redis(fleet):
    """mtactl cluster status on any node: the three nodes live, Redis
    connected as the primary, the site's pair with the fleet's
    connections within the limit; the nodes' keys are all under the
    prefix."""
    import json
    c = fleet(google_site(connections=2))
    c.submit(3, gmail_rcpt("s"))
    c.sim.wait_for(3, timeout=20, provider="gmail")

    def status(node):
        r = node.ctl("cluster", "status", "--json")
        return json.loads(r.stdout) if r.returncode == 0 else {}

    for node in c.nodes:
        s = wait_for(lambda: (lambda s: s if s.get("nodes_live") == 3
                              else None)(status(node)), 5,
                     what="%s: three live nodes" % node.name)
        assert s["node"] == node.name, s
        assert sorted(n["id"] for n in s["nodes"]) == ["n1", "n2", "n3"], s
        assert s["redis"]["connected"] and s["redis"]["role"] == "master", s
        assert s["fallback"] == {"active": False, "episodes": 0}, s
        text = node.ctl("cluster", "status", check=True).stdout
        assert "node: %s" % node.name in text and "connected" in text, text
    keys = c.redis.keys("*")
    assert keys and all(k.startswith("mtad:") for k in keys), keys[:10]


def test_scaling_doc_shows_the_configs_the_tests_run():
    """docs/SCALING.md carries this fixture's HAProxy and Redis
    configurations as they are run (Redis with the doc's values), and
    packaging/cluster/ the same with production addresses."""
    import cluster_fixture as cf
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

    def text(*p):
        with open(os.path.join(top, *p)) as f:
            return f.read()
    doc = text("docs", "SCALING.md")
    redis = cf.REDIS_CONF.format(**cf.REDIS_DOC)
    assert cf.haproxy_config() in doc
    assert redis in doc
    assert text("packaging", "cluster", "redis-mtad.conf.example").endswith(
        "\n" + redis)
    assert text("packaging", "cluster", "haproxy.cfg.example").endswith(
        "\n" + cf.haproxy_config(**cf.HAPROXY_DOC))
