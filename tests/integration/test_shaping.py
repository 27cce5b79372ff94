"""Traffic shaping against real mtad processes and the provider simulator
(shapesim.py) behind the test zone's MX records (nsd): per-site limits that
hold for the node with 2 workers (the simulator counts every violation per
source IP), back-off on the first 421 and a stepwise ramp after it, no
head-of-line blocking while a site is suspended (mtactl suspend/resume),
held mail not counted as a retry, a bad rules file refused with its
position by mtad -t and kept on reload, and a reload that applies new rules
to mail already waiting.  Port 25 needs root (own network namespace)."""
import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

from mtadtest import MTAD, ZONE, free_port, make_message, send, wait_for
from shapesim import Provider, Sim

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the simulator on port 25 needs root")

GOOGLE = ["gmail.%s" % ZONE, "googlemail.%s" % ZONE]


@pytest.fixture
def sim_factory():
    made = []

    def make(*providers):
        s = Sim(list(providers)).start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


def gmail(**kw):
    return Provider("gmail", ["127.0.1.1", "127.0.1.2"], port=25, **kw)


def open_site():
    return Provider("open", ["127.0.4.1"], port=25)


def start(mtad_factory, dns, shaping, workers=2, rules=None, **over):
    cfg = {"routes": {"default": "mx"},
           "server": {"workers": workers},
           "dns": {"servers": [dns], "timeout": "1s", "attempts": 1},
           "delivery": {"retry": ["30s"], "connect_timeout": "2s",
                        "connections_per_destination": 20},
           "shaping": shaping}
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    m = mtad_factory(cfg)
    if rules is not None:
        with open(os.path.join(m.dir, "shaping.yaml"), "w") as f:
            f.write(rules)
    return m.start()


def inject(m, rcpts_of, n):
    """n messages over one session; rcpts_of(i) gives each one's list."""
    ids = []
    c = m.smtp(timeout=20)
    try:
        for i in range(n):
            ids.append(send(m, "s@home.test", rcpts_of(i),
                            make_message(i), conn=c))
    finally:
        c.quit()
    return ids


def shaping_json(m):
    r = m.ctl("shaping", "--json", check=True)
    return json.loads(r.stdout)["pairs"]


def pair(m, site):
    for p in shaping_json(m):
        if p["site"] == site:
            return p
    return None


def queue_json(m):
    """mtactl queue --json: its messages (one object per line, or a list)."""
    r = m.ctl("queue", "--json", check=True)
    out = []
    for line in r.stdout.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            v = json.loads(line)
            out.extend(v.get("messages", [v]) if "id" not in v else [v])
    if not out and r.stdout.strip().startswith("["):
        out = json.loads(r.stdout)
    return out


def max_in_window(times, width):
    """The most events in any window of width seconds."""
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - width:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_limits_hold_for_the_node_with_two_workers(mtad_factory, sim_factory,
                                                   dns_servers):
    """gmail takes 2 connections, 5 messages per connection and 2
    recipients per message from a source; mtad's 2 workers (20 connections
    per destination each) keep to the site's rule together, at 40/s: no
    violation, each limit reached."""
    sim = sim_factory(gmail(max_conns=2, max_msgs=5, max_rcpts=2))
    mport = free_port()
    m = start(mtad_factory, dns_servers.nsd, {
        "sites": [{"name": "google", "mx": [".google.%s" % ZONE],
                   "connections": 2, "messages_per_connection": 5,
                   "recipients_per_message": 2,
                   "deliveries_per_second": 40, "burst": 4}]},
        metrics={"listen": "127.0.0.1:%d" % mport})
    n = 120
    # every tenth message has three recipients: two transactions
    inject(m, lambda i: ["u%d.%d@%s" % (i, k, GOOGLE[i % 2])
                         for k in range(3 if i % 10 == 0 else 1)], n)
    recs = sim.wait_for(n + n // 10, timeout=30, provider="gmail")
    assert max(len(r["rcpts"]) for r in recs) == 2
    assert sim.violations("gmail") == 0, sim.stats()
    st = sim.stats()["providers"]["gmail"]["sources"]["127.0.0.1"]
    assert st["max_open"] == 2, st
    per_conn = {}
    for r in recs:
        per_conn[r["conn"]] = per_conn.get(r["conn"], 0) + 1
    assert max(per_conn.values()) == 5
    # 40/s with a burst of 4: at most 85 transactions start in 2 s (the
    # records are the 250s after the data: a few ms of jitter allowed)
    assert max_in_window([r["time"] for r in recs], 2.0) <= 88
    p = pair(m, "google")
    assert p["max_connections"] == 2 and p["sent"] >= n // 2, p
    # the rate observed over the last minute, as the master samples it
    wait_for(lambda: pair(m, "google")["observed_per_minute"] > 0, 5,
             what="an observed rate")
    wait_for(lambda: pair(m, "google")["connections"] == 0, 10,
             what="connections given back")
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport,
                                  timeout=10).read().decode()
    sent = re.search(r'^mtad_shaping_sent_total\{site="google",'
                     r'source="default"\} (\d+)$', body, re.M)
    assert sent and int(sent.group(1)) >= p["sent"], body[-1500:]
    assert re.search(r'^mtad_shaping_connections\{site="google",'
                     r'source="default"\} 0$', body, re.M), body[-1500:]
    wait_for(lambda: m.queue_ids() == [], 10, what="an empty queue")


def test_backoff_on_the_first_421_then_a_stepwise_ramp(mtad_factory,
                                                       sim_factory,
                                                       dns_servers):
    """google may take 4/s; gmail allows 2 a second per source at first and
    answers the next with 421 4.7.28.  The first 421 slows the site to a
    quarter for 2 s, then three 1 s steps back to 4/s (gmail now takes 5/s):
    one log line per change, one violation for the episode, and the
    refused messages wait (held: no retry counted, no deferral logged)."""
    sim = sim_factory(gmail(per_second=2))
    m = start(mtad_factory, dns_servers.nsd, {
        "sites": [{"name": "google", "mx": [".google.%s" % ZONE],
                   "deliveries_per_second": 4}],
        "backoff": [{"enhanced": "4.7.28", "action": "slow",
                     "factor": 0.25, "for": "2s", "steps": 3, "step": "1s"}]})
    n = 24
    ids = inject(m, lambda i: ["u%d@gmail.%s" % (i, ZONE)], n)
    m.wait_log("shaping: site google source default slowed to 25.0%",
               timeout=20)
    sim.set("gmail", per_second=5)
    t_slow = time.time()
    p = pair(m, "google")
    assert p["state"] == "slow" and "4.7.28" in p["reply"], p
    for k in (1, 2, 3):
        m.wait_log("site google source default ramp step %d of 3" % k,
                   timeout=10)
    m.wait_log("site google source default back to normal", timeout=10)
    recs = sim.wait_for(n, timeout=40, provider="gmail")
    log = m.log_text()
    assert log.count("source default slowed") == 1, log[-3000:]
    steps = re.findall(r"site google source default ramp step (\d) of 3", log)
    assert steps == ["1", "2", "3"], steps
    assert log.count("site google source default back to normal") == 1
    assert sim.violations("gmail", kind="rate") == 1, sim.events()[:5]
    # the slow phase: a quarter of 4/s, then faster step by step
    during = [r["time"] for r in recs if t_slow <= r["time"] < t_slow + 1.9]
    assert len(during) <= 3, during
    for i in ids:
        assert not re.search(i + r".*status=deferred", log), i
    wait_for(lambda: m.queue_ids() == [], 10, what="an empty queue")


def test_a_suspended_site_holds_no_other_mail(mtad_factory, sim_factory,
                                              dns_servers):
    """mtactl suspend google: its mail waits (held: no attempt counted,
    nothing logged per message), mail to an unlimited site flows at once;
    mtactl resume lets it go."""
    sim = sim_factory(gmail(), open_site())
    m = start(mtad_factory, dns_servers.nsd, {
        "sites": [{"name": "google", "mx": [".google.%s" % ZONE],
                   "connections": 2}]}, workers=1)
    r = m.ctl("suspend", "google", "--for", "10m", check=True)
    assert "google: suspended for 600s" in r.stdout
    held = inject(m, lambda i: ["h%d@gmail.%s" % (i, ZONE)], 300)
    t0 = time.time()
    inject(m, lambda i: ["o%d@open.%s" % (i, ZONE)], 20)
    recs = sim.wait_for(20, timeout=20, provider="open")
    lat = sorted(r["time"] - t0 for r in recs)
    assert lat[int(len(lat) * 0.95) - 1] < 3.0, lat
    assert sim.records("gmail") == []
    p = wait_for(lambda: (lambda p: p if p and p["held"] >= 300 else None)(
        pair(m, "google")), 20, what="300 held")
    assert p["state"] == "suspended" and p["manual"], p
    # waiting mail holds no attempt: no queue file open for it
    w = [c for c in m.children()
         if "worker" in open("/proc/%d/cmdline" % c).read()]
    assert len(w) == 1
    fds = [os.readlink("/proc/%d/fd/%s" % (w[0], f))
           for f in os.listdir("/proc/%d/fd" % w[0])]
    assert sum(1 for f in fds if "/queue/" in f) < 20, fds
    q = {e["id"]: e for e in queue_json(m)}
    assert all(q[i]["attempts"] == 0 for i in held[:50]), \
        [q[i] for i in held[:3]]
    # and nothing logged per message: no line names a held id
    log = m.log_text()
    named = [l for l in log.splitlines() if any(i in l for i in held)]
    assert all("status=sent" not in l and "deferred" not in l
               for l in named), named[:5]
    assert "google" in m.ctl("shaping", check=True).stdout
    r = m.ctl("resume", "google", check=True)
    assert "google: resumed" in r.stdout
    recs = sim.wait_for(300, timeout=40, provider="gmail")
    assert sim.violations("gmail") == 0
    # the oldest waiting mail goes first
    first = [int(r["x"].get("X-Serial", -1)) for r in recs[:30]]
    assert min(first) >= 0 and max(first) < 90, first
    m.wait_log("shaping: site google source * resumed with mtactl")
    # a domain a worker saw there names its site
    r = m.ctl("suspend", "gmail.%s" % ZONE, "--for", "1m", check=True)
    assert "google: suspended for 60s" in r.stdout, r.stdout
    assert pair(m, "google")["state"] == "suspended"
    assert m.ctl("resume", "google").returncode == 0
    assert m.ctl("resume", "google").returncode == 1   # none left


BAD = "sites:\n  - name: google\n    mx: [.google.mtad.test]\n" \
      "    connections: many\n"


def test_bad_rules_file_refused_with_its_position_and_kept(mtad_factory,
                                                           dns_servers):
    """mtad -t names shaping.yaml:4:18; a reload to it is refused and the
    running rules stay."""
    good = "sites:\n  - name: google\n    mx: [.google.mtad.test]\n" \
           "    connections: 3\n"
    m = start(mtad_factory, dns_servers.nsd, {"rules_file": "shaping.yaml"},
              rules=good)
    path = os.path.join(m.dir, "shaping.yaml")
    with open(path, "w") as f:
        f.write(BAD)
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode != 0
    assert "shaping.yaml:4:18: connections: expected a number" in r.stderr, \
        r.stderr
    r = m.ctl("reload")
    assert r.returncode == 1
    assert "shaping.yaml:4:18" in r.stdout + r.stderr, r.stdout + r.stderr
    r = m.ctl("check")
    assert "shaping.yaml:4:18" in r.stdout + r.stderr
    # the running generation kept the good rules
    inject(m, lambda i: ["k@gmail.%s" % ZONE], 1)
    p = wait_for(lambda: pair(m, "google"), 15, what="the site google")
    assert p["max_connections"] == 3, p
    # the shipped starting points load
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "packaging",
                           "shaping.yaml.example")) as f:
        example = f.read()
    with open(path, "w") as f:
        f.write(example)
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    # and the running generation kept its rules through the refused reload
    assert m.ctl("reload").returncode == 0


def test_reload_applies_new_rules_to_waiting_mail(mtad_factory, sim_factory,
                                                  dns_servers):
    """google at 1 message a minute: one goes, the rest wait; a reload that
    lifts the rate sends the waiting ones at once."""
    sim = sim_factory(gmail())
    slow = "sites:\n  - name: google\n    mx: [.google.mtad.test]\n" \
           "    deliveries_per_minute: 1\n"
    m = start(mtad_factory, dns_servers.nsd, {"rules_file": "shaping.yaml"},
              rules=slow)
    ids = inject(m, lambda i: ["w%d@gmail.%s" % (i, ZONE)], 10)
    sim.wait_for(1, timeout=15, provider="gmail")
    wait_for(lambda: (pair(m, "google") or {}).get("held", 0) >= 9, 15,
             what="nine held")
    time.sleep(0.5)
    assert len(sim.records("gmail")) == 1
    q = {e["id"]: e for e in queue_json(m)}
    assert sum(1 for i in ids if i in q) == 9
    assert all(q[i]["attempts"] == 0 for i in ids if i in q)
    with open(os.path.join(m.dir, "shaping.yaml"), "w") as f:
        f.write("sites:\n  - name: google\n    mx: [.google.mtad.test]\n"
                "    connections: 2\n")
    m.ctl("reload", check=True)
    sim.wait_for(10, timeout=20, provider="gmail")
    p = pair(m, "google")
    assert p["max_connections"] == 2 and p["per_minute"] is None, p


def test_backoff_on_connect_failures_and_bounce_rules(mtad_factory,
                                                      sim_factory,
                                                      dns_servers):
    """kind: connect suspends the site when its hosts refuse connections
    (the mail waits, then goes once they listen again); a bounce rule
    makes a matching temporary reply final."""
    sim = sim_factory(gmail(mode="refuse"))
    m = start(mtad_factory, dns_servers.nsd, {
        "sites": [{"name": "google", "mx": [".google.%s" % ZONE]}],
        "backoff": [{"kind": "connect", "action": "suspend", "for": "2s"},
                    {"code": "451", "text": "temporary local problem",
                     "action": "bounce"}]})
    ids = inject(m, lambda i: ["c%d@gmail.%s" % (i, ZONE)], 3)
    # the trigger is the refused connect, or (when next-hop health marked
    # the hops down first) the skip that carries it
    m.wait_log("shaping: site google source default suspended for 2s "
               "(rule 0, connect): ", timeout=15)
    sim.set_mode("gmail", "normal")
    sim.wait_for(3, timeout=20, provider="gmail")
    log = m.log_text()
    for i in ids:
        assert not re.search(i + r".*status=deferred", log), i
    m.wait_log("site google source default back to normal", timeout=10)
    # DEFAULT_REPLIES: defer* gets "451 4.3.0 Temporary local problem"
    qid = inject(m, lambda i: ["defer1@gmail.%s" % ZONE], 1)[0]
    m.wait_log("%s: to=<defer1@gmail.%s>" % (qid, ZONE), timeout=15)
    assert re.search(qid + r": to=<defer1@gmail\.[^>]*>.*status=bounced "
                     r"\(451 4\.3\.0", m.log_text()), m.log_text()[-2000:]


def test_limits_hold_per_source_of_a_pool(mtad_factory, sim_factory,
                                          dns_servers):
    """A pool of three egress sources (127.0.0.2-4): the site's limits hold
    per (site x source), not per site: each source keeps to 2 connections
    and its rate (the simulator counts violations per source IP), all three
    carry the site's mail at once, so the site gets three times one
    source's share.  (Rate-bound, each source sends what its rate allows:
    the weights split what the limits leave free, test_egress.py.)"""
    sim = sim_factory(gmail(max_conns=2, per_second=30))
    srcs = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    m = start(mtad_factory, dns_servers.nsd, {
        "sites": [{"name": "google", "mx": [".google.%s" % ZONE],
                   "connections": 2, "deliveries_per_second": 25,
                   "burst": 2}]},
        egress={"sources": [{"name": "s%d" % i, "address": a,
                             "ehlo": "out%d.test" % i}
                            for i, a in enumerate(srcs)],
                "pools": [{"name": "default",
                           "sources": {"s0": 1, "s1": 1, "s2": 2}}]})
    n = 240
    inject(m, lambda i: ["u%d@%s" % (i, GOOGLE[i % 2])], n)
    recs = sim.wait_for(n, timeout=60, provider="gmail")
    assert sim.violations("gmail") == 0, sim.stats()
    st = sim.stats()["providers"]["gmail"]["sources"]
    assert set(st) == set(srcs), st
    for a in srcs:
        assert st[a]["max_open"] <= 2, st
    # the sources overlapped: more than one source's 2 connections at once
    assert sum(st[a]["max_open"] for a in srcs) > 2, st
    share = {a: sum(1 for r in recs if r["src"] == a) for a in srcs}
    assert min(share.values()) >= n * 0.2, share
    # no source ever went past its own 25/s (+ burst) in any second
    for a in srcs:
        times = [r["time"] for r in recs if r["src"] == a]
        assert max_in_window(times, 1.0) <= 25 + 2 + 1, (a, share)
    pairs = {(p["site"], p["source"]) for p in shaping_json(m)}
    assert {("google", "s0"), ("google", "s1"), ("google", "s2")} <= pairs, \
        pairs


def test_episodes_are_events(mtad_factory, sim_factory, dns_servers,
                             workdir):
    """Shaping episodes reach the delivery events: a suspension a worker
    began on refused connects (site, source, mode, its end) and its
    resumption at the master's tick; mtactl suspend and resume, one
    event each."""
    from test_events import Receiver, events_cfg
    receiver = Receiver()
    try:
        sim = sim_factory(gmail(mode="refuse"))
        t0 = int(time.time() * 1000)
        m = start(mtad_factory, dns_servers.nsd, {
            "sites": [{"name": "google", "mx": [".google.%s" % ZONE]}],
            "backoff": [{"kind": "connect", "action": "suspend",
                         "for": "2s"}]},
            events=events_cfg(workdir, receiver.url))
        inject(m, lambda i: ["c%d@gmail.%s" % (i, ZONE)], 1)
        assert wait_for(lambda: receiver.of("suspension"), 20)
        sim.set_mode("gmail", "normal")
        assert wait_for(lambda: receiver.of("resumption"), 30), \
            receiver.events
        s = receiver.of("suspension")[0]
        assert (s["site"], s["source"], s["mode"]) == (
            "google", "default", "suspend"), s
        assert t0 + 2000 <= s["until_ms"] <= s["unix_ms"] + 2000, s
        assert "refused" in s["reply"]["text"], s
        r = receiver.of("resumption")[0]
        assert (r["site"], r["source"]) == ("google", "default"), r
        assert r["unix_ms"] >= receiver.of("suspension")[-1]["until_ms"], r
        assert "mode" not in r and "until_ms" not in r, r
        n = len(receiver.of("suspension"))

        m.ctl("suspend", "google", "--for", "10m", check=True)
        assert wait_for(lambda: len(receiver.of("suspension")) == n + 1,
                        10), receiver.events
        s2 = receiver.of("suspension")[n]
        assert s2["site"] == "google" and s2["reply"]["text"] == \
            "suspended with mtactl", s2
        assert s2["until_ms"] - s2["unix_ms"] in range(599000, 600001), s2
        m.ctl("resume", "google", check=True)
        assert wait_for(lambda: len(receiver.of("resumption")) == 2, 10), \
            receiver.events
        assert receiver.of("resumption")[-1]["reply"]["text"] == \
            "resumed with mtactl"
    finally:
        receiver.stop()
