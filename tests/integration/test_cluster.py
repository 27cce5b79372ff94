"""One fleet, one set of limits (issue 38): three mtad nodes behind a real
HAProxy share their shaping limits, back-off, bans and AUTH failure counts
through a real redis-server, and send from one egress source (127.0.0.2)
to the provider simulator (shapesim.py), which counts every limit that
source breaks.  The set-up is cluster_fixture.py.

The first tests run the same fleet WITHOUT the cluster: section and show
the simulator catching the fleet at three times the limits: what the
shared tests assert can fail.  Port 25 needs root (own network
namespace)."""
import os
import time

import pytest

from cluster_fixture import (GMAIL, GOOGLE, SOURCE, Cluster, google_site,
                             max_in_window)
from mtadtest import ZONE, wait_for
from shapesim import Provider, Sim

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the simulator on port 25 needs root")

RATE = 120          # deliveries a minute, the site's and the provider's
TRIGGER = ("421 4.7.28 [{src}] Our system has detected an unusual rate "
           "of unsolicited mail originating from your IP address.")
BAN_421 = "421 4.7.0"


@pytest.fixture
def fleet(workdir, dns_servers):
    """fleet(shaping, shared=True, sim={...limits}, over={...}): the
    simulator (gmail) and a started Cluster; both stopped afterwards."""
    made = []

    def make(shaping, shared=True, sim=None, over=None, **kw):
        # MTAD_CLUSTER_OFF=1: the shared tests without the cluster: section,
        # to see each of them fail on its own assertion (not on start-up)
        shared = shared and not os.environ.get("MTAD_CLUSTER_OFF")
        s = Sim([Provider("gmail", GMAIL, port=25, **(sim or {}))]).start()
        made.append(s)
        c = Cluster(workdir, dns_servers.nsd, shaping, shared=shared,
                    over=over, **kw)
        made.append(c)
        c.sim = s
        c.start()
        return c

    yield make
    for x in reversed(made):
        x.stop()


def by_node(recs):
    """{node name: count} from the simulator's records (the EHLO name of
    each node's source is nN.out.test)."""
    out = {}
    for r in recs:
        n = r["ehlo"].split(".")[0]
        out[n] = out.get(n, 0) + 1
    return out


def gmail_rcpt(prefix):
    return lambda i: ["%s%d@%s" % (prefix, i, GOOGLE[i % 2])]


# ---- the fleet without sharing: the limits triple (the tests can fail) ----

def test_without_the_cluster_the_fleet_triples_the_connection_limit(fleet):
    """No cluster: section: every node keeps connections: 2 for itself;
    with slow replies each wants both, so the one source opens more than
    two connections at the provider, which counts the violations."""
    c = fleet(google_site(connections=2), shared=False,
              sim={"max_conns": 2, "data_delay": 0.2})
    c.submit(60, gmail_rcpt("u"))
    wait_for(lambda: c.sim.violations("gmail", kind="conns") >= 3, 30,
             what="the provider refusing connections over 2")
    assert c.sim.source("gmail", SOURCE)["refused"] >= 3


def test_without_the_cluster_the_fleet_triples_the_rate(fleet):
    """No cluster: section: each node sends its 120 a minute, the fleet
    360: the provider's 120 a minute is broken within the first minute."""
    c = fleet(google_site(deliveries_per_minute=RATE), shared=False,
              sim={"per_minute": RATE})
    c.submit(3 * RATE // 2, gmail_rcpt("r"))
    wait_for(lambda: c.sim.violations("gmail", kind="rate") > 0, 60,
             what="the provider's rate limit broken")
    recs = c.sim.records("gmail")
    assert max_in_window([r["time"] for r in recs], 10.0) > 2 * RATE / 6, \
        "the fleet sent at most twice the rate in 10 s"


# ---- shared limits ----

def test_the_fleet_keeps_one_rate_limit(fleet):
    """deliveries_per_minute: 120 on three nodes sharing it, 180 messages
    through HAProxy (60 a node): the provider (120 a minute per source)
    sees no violation, and in 40 s the fleet sends about 40 s of the rate
    (within 15% below, never above, plus the burst of one sync)."""
    c = fleet(google_site(deliveries_per_minute=RATE),
              sim={"per_minute": RATE})
    ids = c.submit(3 * RATE // 2, gmail_rcpt("r"))
    spread = {n.name: len(n.accepted() & set(ids)) for n in c.nodes}
    assert min(spread.values()) >= len(ids) // 6, spread   # round-robin
    first = c.sim.wait_for(1, timeout=20, provider="gmail")[0]["time"]
    span = 40.0
    wait_for(lambda: time.time() > first + span + 1, span + 5,
             what="%.0f s of deliveries" % span)
    recs = c.sim.records("gmail")
    assert c.sim.violations("gmail") == 0, c.sim.events()[:5]
    got = sum(1 for r in recs if r["time"] < first + span)
    allowed = RATE * span / 60
    assert allowed * 0.85 <= got <= allowed + 3, (got, allowed)
    # every 10 s of it within the rate (plus one sync's reservation)
    assert max_in_window([r["time"] for r in recs], 10.0) <= RATE / 6 + 3
    # all three nodes took part
    assert len(by_node(recs)) == 3, by_node(recs)


def test_the_fleet_keeps_one_connection_limit(fleet):
    """connections: 2 on three nodes sharing it, replies slowed: the
    provider (2 connections per source) never sees a third, and the mail
    of all three nodes goes."""
    c = fleet(google_site(connections=2),
              sim={"max_conns": 2, "data_delay": 0.2})
    c.submit(60, gmail_rcpt("u"))
    wait_for(lambda: len(c.sim.records("gmail")) >= 60 or
             c.sim.violations("gmail"), 60, what="60 deliveries")
    st = c.sim.source("gmail", SOURCE)
    assert c.sim.violations("gmail") == 0, (st, c.sim.events()[:5])
    recs = c.sim.records("gmail")
    assert len(recs) == 60, st
    assert st["max_open"] == 2, st
    assert len(by_node(recs)) == 3, by_node(recs)


def test_a_421_seen_by_one_node_slows_the_others(fleet):
    """n1 alone gets gmail's 421 4.7.28: the back-off rule slows the site
    to 25% for 4 s, and n2 and n3, which saw nothing, slow down too
    within a few syncs; what they send meanwhile keeps to the slowed
    rate."""
    rate = 8                            # a second, for the fleet
    c = fleet({"sites": [{"name": "google", "mx": [".google.%s" % ZONE],
                          "deliveries_per_second": rate}],
               "backoff": [{"enhanced": "4.7.28", "action": "slow",
                            "factor": 0.25, "for": "4s", "steps": 1,
                            "step": "1s"}]},
              sim={"replies": [("trigger*", "rcpt", TRIGGER, 0)]})
    n1, n2, n3 = c.nodes
    # every node has sent to the site before (as in a fleet at work)
    for k, n in enumerate(c.nodes):
        c.submit(1, gmail_rcpt("w"), via=n, serial0=100 + k)
    c.sim.wait_for(3, timeout=20, provider="gmail")
    c.submit(1, lambda i: ["trigger@gmail.%s" % ZONE], via=n1)
    n1.wait_log("site google source s0 slowed to 25.0%", timeout=20)
    t_slow = time.time()
    c.sim.set("gmail", replies=[])      # the retry goes through
    for n in (n2, n3):
        p = wait_for(lambda: (lambda p: p if p and p["state"] == "slow"
                              else None)(n.shaping("google")), 3,
                     what="%s slowed by n1's 421" % n.name)
        assert "4.7.28" in (p.get("reply") or ""), p
    assert time.time() - t_slow < 2.0
    t0 = time.time()
    c.submit(20, gmail_rcpt("a"), via=n2)
    c.submit(20, gmail_rcpt("b"), via=n3, serial0=20)
    end = t_slow + 3.5                  # still within the 4 s slow-down
    wait_for(lambda: time.time() > end, 10, what="the slow phase")
    during = [r for r in c.sim.records("gmail")
              if t0 <= r["time"] < end and r["ehlo"][:2] in ("n2", "n3")]
    # a quarter of 8/s for the fleet: 2/s, plus one sync's reservation
    assert len(during) <= 2 * (end - t0) + 3, len(during)
    assert c.sim.violations("gmail") == 0      # a scripted 421 is none
