"""mtactl's queue commands against a running mtad with a known queue
(KnownQueue, below: deferred, held and active messages): queue and its
filters, --by-domain and --json; show; delete, hold, release, flush,
bounce; exit codes and bad ids; the race of a change with a delivery in
progress; and the spool read and changed while mtad is stopped.
Loopback only; every wait is bounded.

Helpers used only by this file come first.
"""
import asyncio
import json
import os
import pwd
import pytest
import re
import subprocess
import threading
import time


from mtadtest import (IS_ROOT, MTACTL, USER, Sink, closed_port, make_message,
                      send, strip_received, wait_for)


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
    """The messages' state files (and leftovers of their writes); not the
    queue index a worker saves at a clean stop (state/index-NN)."""
    d = os.path.join(m.spool, "state")
    try:
        return sorted(n for n in os.listdir(d) if not n.startswith("index-"))
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
        """Send, then wait until the first attempt deferred it and the log
        process has written the arrival and each deferral (workers hand
        records over in batches: the spool can be ahead of the log, and
        `mtactl show` reads its history from the log)."""
        qid = self.send(sender, rcpts, serial, extra)
        self.wait_deferred(qid)
        self.m.wait_log("%s: from=<%s>" % (qid, sender))
        for r in rcpts:
            wait_for(lambda: re.search(r"%s: to=<%s>.*status=deferred" % (
                qid, re.escape(r)), self.m.log_text()),
                what="the deferral of %s in the log" % r)
        return qid

    def wait_deferred(self, qid, attempts=1):
        def done():
            j = queue_json(self.m)
            for e in j["messages"]:
                if e["id"] == qid:
                    return e["attempts"] >= attempts and \
                        e["state"] != "active"
            return False
        assert wait_for(done, 20), "%s never deferred:\n%s" % (
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
        assert wait_for(lambda: len([e for e in self.slow.events
                                       if e[0] == "data_started"]) > n, 20)
        return qid


__all__ = ["gated_sink_factory"]        # fixtures used by name below

KICK_RE = re.compile(r": kick: \d+ queued messages of shard \d+ scheduled, "
                     r"(\d+) on hold")


@pytest.fixture
def kq(mtad_factory, gated_sink_factory):
    q = KnownQueue(mtad_factory, gated_sink_factory).build()
    yield q
    q.slow.gate.set()           # let an active message finish before stop


def no_trace(m, qid):
    """Nothing left of qid in queue/ or state/."""
    return qid not in m.queue_ids() and qid not in state_files(m) and \
        ".%s.tmp" % qid not in state_files(m)


def assert_log_clean(m):
    text = m.log_text()
    for bad in ("exited with status 1", "killed by signal", "panic",
                "cannot open for delivery", "saving the delivery state"):
        assert bad not in text, "%r in log:\n%s" % (bad, text[-4000:])


# ---- queue ----------------------------------------------------------------

def test_queue_lists_every_message_with_state_and_summary(kq):
    m = kq.m
    active = kq.make_active()
    r = m.ctl("queue")
    assert r.returncode == 0, r.stderr
    msgs, summary = parse_queue(r.stdout)
    assert set(msgs) == {kq.d1, kq.d2, kq.h, active}, r.stdout
    sizes = {q: len(raw_message(m, q)) for q in msgs}
    for qid, e in msgs.items():
        sender, rcpts, _ = kq.sent[qid]
        assert e["sender"] == sender
        assert e["size"] == sizes[qid]
        assert e["arrived"].endswith("Z") and e["arrived"][:4].isdigit()
        assert e["age"][-1] in "smhd"
    assert msgs[kq.d1]["state"] == "deferred"
    assert msgs[kq.d2]["state"] == "deferred"
    assert msgs[kq.h]["state"] == "held"
    assert msgs[active]["state"] == "active"
    assert msgs[kq.d1]["rcpts"] == ["x@far.test", "y@far.test"]
    # four recipients: three shown, the count of the rest
    assert msgs[kq.h]["rcpts"] == ["w@other.test", "v@far.test",
                                   "u@third.test"]
    assert "(+1 more)" in msgs[kq.h]["rest"]
    # the history line: next retry (retry is 1h), attempts, last error
    d = msgs[kq.d1]["detail"]
    assert d.startswith("next retry in 59m") or d.startswith(
        "next retry in 1h"), d
    assert ", 1 attempt;" in d
    assert "last error: connect to 127.0.0.1" in d
    assert "Connection refused" in d
    assert msgs[kq.h]["detail"].startswith("on hold, 1 attempt; last error:")
    assert msgs[active]["detail"] is None       # no history yet
    assert summary == (4, sum(sizes.values()), 0, 1, 2, 1), r.stdout
    assert r.stdout.splitlines()[-1].startswith("-- 4 messages, ")


def test_queue_of_an_empty_spool(mtad):
    r = mtad.ctl("queue")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "-- 0 messages, 0 bytes: 0 queued, 0 active, " \
        "0 deferred, 0 held\n"
    j = queue_json(mtad)
    assert j["messages"] == []
    assert j["summary"] == {"messages": 0, "bytes": 0, "queued": 0,
                            "active": 0, "deferred": 0, "held": 0}


def test_queue_filters(kq):
    m = kq.m
    active = kq.make_active()

    def ids(*args):
        r = m.ctl("queue", *args)
        assert r.returncode == 0, r.stderr
        msgs, summary = parse_queue(r.stdout)
        assert summary[0] == len(msgs), r.stdout
        return set(msgs)

    assert ids("--from", "alice@") == {kq.d1}
    assert ids("--from", "HOME.TEST") == {kq.d1, kq.d2, kq.h, active}
    assert ids("--from", "nobody") == set()
    assert ids("--to", "z@other.test") == {kq.d2}
    assert ids("--to", "other.test") == {kq.d2, kq.h}
    assert ids("--to", "t@third") == {kq.h}     # the 4th, not shown, counts
    assert ids("--state", "deferred") == {kq.d1, kq.d2}
    assert ids("--state", "held") == {kq.h}
    assert ids("--state", "active") == {active}
    assert ids("--state", "queued") == set()
    assert ids("--from", "bob", "--to", "far.test") == set()
    assert ids("--from", "carol", "--to", "far.test") == {kq.h}
    assert ids("--older-than", "1h") == set()
    # every message is older than a millisecond... but no older than 1h
    assert ids("--older-than", "1ms") == {kq.d1, kq.d2, kq.h, active}


def test_queue_older_than_splits_by_age(mtad_factory, gated_sink_factory):
    kq = KnownQueue(mtad_factory, gated_sink_factory)
    old = kq.send_deferred("old@home.test", ["a@far.test"], 1)
    time.sleep(3.5)
    new = kq.send("new@home.test", ["b@far.test"], 2)
    r = kq.m.ctl("queue", "--older-than", "3s")
    j = queue_json(kq.m, "--older-than", "3s")
    done = int(time.time() * 1000)
    msgs, summary = parse_queue(r.stdout)
    assert old in msgs, r.stdout
    assert [e["id"] for e in j["messages"]][:1] == [old]
    assert new in kq.m.queue_ids()
    # the new one is younger than 3s unless this machine stalled for 3s
    if done - kq.times[new][0] < 3000:
        assert set(msgs) == {old}, r.stdout
        assert summary[0] == 1
        assert [e["id"] for e in j["messages"]] == [old]


def test_queue_bad_filters_are_usage_errors(kq):
    for args in (["--state", "sleeping"], ["--older-than", "soon"],
                 ["--older-than", "0"], ["--colour"], ["--from"],
                 ["someid"], ["--body"], ["--all"]):
        r = kq.m.ctl("queue", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("mtactl: queue: "), (args, r.stderr)
        assert r.stdout == ""


def test_queue_by_domain(kq):
    m = kq.m
    kq.make_active()
    r = m.ctl("queue", "--by-domain")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = lines.index([l for l in lines if l.startswith("DOMAIN ")][0])
    table = {}
    for l in lines[at + 1:]:
        dom, msgs, rcpts = l.split()
        table[dom] = (int(msgs), int(rcpts))
    # pending recipients: d1 x,y@far; d2 z@other; h w@other v@far u,t@third;
    # active s@slow
    assert table == {"far.test": (2, 3), "other.test": (2, 2),
                     "third.test": (1, 2), "slow.test": (1, 1)}, r.stdout
    # most recipients first
    assert list(table)[0] == "far.test"
    j = queue_json(m, "--by-domain")
    assert {d["domain"]: (d["messages"], d["recipients"])
            for d in j["by_domain"]} == table
    # filters apply to the tally too
    j = queue_json(m, "--by-domain", "--state", "held")
    assert {d["domain"]: (d["messages"], d["recipients"])
            for d in j["by_domain"]} == {"other.test": (1, 1),
                                         "far.test": (1, 1),
                                         "third.test": (1, 2)}


AGE_COLUMNS = ["5", "10", "20", "40", "80", "160", "320", "640", "1280",
               "1280+"]


def parse_shape(text):
    """mtactl queue --summary -> (totals line, {row: (T, [ages])}, rows in
    order, the lines after the table)."""
    lines = text.splitlines()
    assert lines[1].split() == ["DOMAIN", "T"] + AGE_COLUMNS, text
    table, order, rest = {}, [], []
    for l in lines[2:]:
        if l.startswith("("):
            rest.append(l)
            continue
        dom, total, *ages = l.split()
        table[dom] = (int(total), [int(x) for x in ages])
        order.append(dom)
    return lines[0], table, order, rest


def test_queue_summary_by_state_and_domain(kq):
    m = kq.m
    active = kq.make_active()
    r = m.ctl("queue", "--summary")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # no line per message: the totals, then the domain table
    assert not any(l.startswith((kq.d1, kq.d2, kq.h, active)) for l in lines), r.stdout
    first, table, order, rest = parse_shape(r.stdout)
    assert first.startswith("-- 4 messages, ")
    assert first.endswith(": 0 queued, 1 active, 2 deferred, 1 held"), first
    # messages per domain, all younger than 5 minutes; TOTAL is the sum
    # of the rows (h goes to three domains); by T, then recipients
    new = lambda n: (n, [n] + [0] * 9)       # noqa: E731
    assert table == {"TOTAL": new(6), "far.test": new(2),
                     "other.test": new(2), "third.test": new(1),
                     "slow.test": new(1)}, r.stdout
    assert order == ["TOTAL", "far.test", "other.test", "third.test",
                     "slow.test"], r.stdout
    assert rest == []
    j = queue_json(m, "--summary")
    assert "messages" not in j or not isinstance(j["messages"], list)
    assert j["summary"] == {"messages": 4, "bytes": j["summary"]["bytes"],
                            "queued": 0, "active": 1, "deferred": 2, "held": 1}
    assert j["age_buckets_minutes"] == [5, 10, 20, 40, 80, 160, 320, 640, 1280]
    assert j["domains"] == 4
    # (messages, rcpts, queued, active, deferred, held) per domain: far has
    # d1 (deferred, 2 rcpts) and h (held); other d2 (deferred) and h;
    # third h (2 rcpts); slow the active one
    assert {d["domain"]: (d["messages"], d["recipients"], d["queued"], d["active"],
                          d["deferred"], d["held"]) for d in j["by_domain"]} == {
        "far.test": (2, 3, 0, 0, 1, 1), "other.test": (2, 2, 0, 0, 1, 1),
        "third.test": (1, 2, 0, 0, 0, 1), "slow.test": (1, 1, 0, 1, 0, 0)}
    assert all(d["ages"] == [d["messages"]] + [0] * 9 for d in j["by_domain"])
    # filters apply
    j = queue_json(m, "--summary", "--state", "deferred")
    assert j["summary"]["messages"] == 2
    assert {d["domain"] for d in j["by_domain"]} == {"far.test", "other.test"}


def set_arrival(m, qid, ms):
    """Rewrite the arrival time in qid's queue file (mtad stopped), in
    place: the same number of digits, so nothing moves."""
    path = os.path.join(m.spool, "queue", qid)
    with open(path, "r+b") as f:
        head = f.read(4096)
        mo = re.search(rb"\narrival (\d+)\n", head)
        assert mo, head[:300]
        new = str(ms).encode()
        assert len(new) == len(mo.group(1))
        f.seek(mo.start(1))
        f.write(new)


def test_queue_summary_buckets_messages_by_age_like_qshape(kq):
    """Ages put each message in one column: under 5, 10, 20 ... 1280
    minutes, or 1280+; --top keeps the first domains; the workers' listing
    and the files agree."""
    m = kq.m
    m.stop()
    now = int(time.time() * 1000)
    set_arrival(m, kq.d1, now - 30 * 60000)          # far: 20..40 min
    set_arrival(m, kq.d2, now - 2000 * 60000)        # other: 1280+
    set_arrival(m, kq.h, now - 7 * 60000)            # far, other, third: 5..10
    r = m.ctl("queue", "--summary", "--files")
    assert r.returncode == 0, r.stderr
    _, table, order, rest = parse_shape(r.stdout)
    col = {c: i for i, c in enumerate(AGE_COLUMNS)}

    def row(*cols):
        ages = [0] * 10
        for c in cols:
            ages[col[c]] += 1
        return (len(cols), ages)
    assert table == {"TOTAL": row("40", "1280+", "10", "10", "10"),
                     "far.test": row("40", "10"),
                     "other.test": row("1280+", "10"),
                     "third.test": row("10")}, r.stdout
    assert order == ["TOTAL", "far.test", "other.test", "third.test"]
    assert rest == []
    r = m.ctl("queue", "--summary", "--top", "1", "--files")
    _, table, order, rest = parse_shape(r.stdout)
    assert order == ["TOTAL", "far.test"] and rest == ["(2 more domains)"]
    assert table["TOTAL"] == row("40", "1280+", "10", "10", "10")
    j = json.loads(m.ctl("queue", "--summary", "--json", "--top", "2",
                         "--files", check=True).stdout)
    assert j["domains"] == 3
    assert [(d["domain"], d["ages"]) for d in j["by_domain"]] == [
        ("far.test", row("40", "10")[1]), ("other.test", row("1280+", "10")[1])]
    for bad in ("0", "x", "-1", ""):
        r = m.ctl("queue", "--summary", "--top", bad)
        assert r.returncode == 2 and "--top" in r.stderr, (bad, r.stderr)
    # the running workers read the arrival from the files at start: the
    # listener answers before the workers report ready, and each worker's
    # index is complete only once it logged its "queue index" line
    before = len(m.log_text())
    m.start()
    wait_for(lambda: m.ctl("queue", "--daemon").returncode == 0,
             what="the workers answering")
    wait_for(lambda: len(re.findall(r"queue index: \d+ messages",
                                    m.log_text()[before:])) >= 2,
             what="both workers' queue index lines")
    assert_sources_agree(m, [("--summary",), ("--summary", "--json"),
                             ("--summary", "--top", "2")])


def test_queue_listing_of_an_empty_queue_and_json_shape(mtad):
    m = mtad
    r = m.ctl("queue")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "-- 0 messages, 0 bytes: 0 queued, 0 active, 0 deferred, 0 held\n"
    j = queue_json(m)
    assert j["messages"] == [] and j["summary"]["messages"] == 0
    j = queue_json(m, "--summary")
    assert j == {"summary": {"messages": 0, "bytes": 0, "queued": 0, "active": 0,
                             "deferred": 0, "held": 0}, "by_domain": [],
                 "age_buckets_minutes": [5, 10, 20, 40, 80, 160, 320, 640, 1280],
                 "domains": 0}


def test_queue_json_matches_what_was_sent(kq):
    m = kq.m
    active = kq.make_active()
    before = int(time.time() * 1000)
    r = m.ctl("queue", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    byid = {e["id"]: e for e in j["messages"]}
    assert list(byid) == sorted(byid), "not in arrival (id) order"
    assert set(byid) == {kq.d1, kq.d2, kq.h, active}
    total = 0
    for qid, e in byid.items():
        sender, rcpts, msg = kq.sent[qid]
        lo, hi = kq.times[qid]
        raw = raw_message(m, qid)
        total += len(raw)
        assert e["sender"] == sender
        assert [x["address"] for x in e["recipients"]] == rcpts
        assert all(x["status"] == "pending" for x in e["recipients"])
        assert e["size"] == len(raw) and raw.endswith(msg)
        assert lo - 1000 <= e["arrival_ms"] <= hi + 1000, (e, lo, hi)
        assert e["arrival"].endswith("Z")
        assert isinstance(e["age_s"], int) and e["age_s"] >= 0
        assert e["held"] == (qid == kq.h)
    for qid in (kq.d1, kq.d2, kq.h):
        e = byid[qid]
        assert e["attempts"] == 1
        # retry is 1h: the next attempt is most of an hour away
        assert e["next_retry_ms"] > before + 50 * 60 * 1000, e
        for x in e["recipients"]:
            assert x["relay"] is not None
            assert "Connection refused" in x["last_reply"], x
        assert "Connection refused" in e["last_error"]
    assert byid[kq.d1]["state"] == "deferred"
    assert byid[kq.d2]["state"] == "deferred"
    assert byid[kq.h]["state"] == "held"
    a = byid[active]
    assert a["state"] == "active" and a["attempts"] == 0
    assert a["last_error"] is None
    assert a["recipients"] == [{"address": "s@slow.test",
                                "status": "pending", "relay": None,
                                "tls": None, "last_reply": None,
                                "class": None}]
    assert j["summary"] == {"messages": 4, "bytes": total, "queued": 0,
                            "active": 1, "deferred": 2, "held": 1}
    # filters in JSON too
    j2 = queue_json(m, "--state", "deferred", "--from", "bob")
    assert [e["id"] for e in j2["messages"]] == [kq.d2]
    assert j2["summary"]["messages"] == 1


def test_queue_json_escapes_quotes_and_keeps_utf8(mtad_factory,
                                                  gated_sink_factory):
    kq = KnownQueue(mtad_factory, gated_sink_factory)
    quoted = '"we\\"ird\\\\x"@home.test'       # "we\"ird\\x"@home.test
    utf = "j\u00fcrgen@home.test"
    rcpt = "r\u00e9sum\u00e9@far.test"
    s = kq.m.smtp()
    s.command_encoding = "utf-8"
    s.ehlo("client.test")
    code, resp = s.docmd("MAIL", "FROM:<%s>" % quoted)
    assert code == 250, resp
    code, resp = s.docmd("RCPT", "TO:<a@far.test>")
    assert code == 250, resp
    code, resp = s.data(make_message(1))
    assert code == 250, resp
    code, resp = s.docmd("MAIL", "FROM:<%s> SMTPUTF8" % utf)
    assert code == 250, resp
    code, resp = s.docmd("RCPT", "TO:<%s>" % rcpt)
    assert code == 250, resp
    code, resp = s.data(make_message(2))
    assert code == 250, resp
    s.quit()
    assert wait_for(lambda: len(kq.m.queue_ids()) == 2, 10)
    j = queue_json(kq.m)
    senders = {e["sender"]: e for e in j["messages"]}
    assert set(senders) == {quoted, utf}, senders
    assert senders[utf]["recipients"][0]["address"] == rcpt
    r = kq.m.ctl("queue", "--from", "\u00fcrgen")
    assert parse_queue(r.stdout)[1][0] == 1


# ---- show -----------------------------------------------------------------

def test_show_envelope_recipients_and_headers(kq):
    m = kq.m
    r = m.ctl("show", kq.d1)
    assert r.returncode == 0, r.stderr
    fields, rcpts, rest = parse_show(r.stdout)
    assert fields["id"] == kq.d1
    assert fields["state"] == "deferred"
    assert fields["sender"] == "<alice@home.test>"
    assert fields["client"].startswith("[127.0.0.1]:")
    assert fields["client"].endswith("helo=client.test")
    assert fields["attempts"] == "1"
    assert fields["held"] == "no"
    assert fields["next retry"].startswith("in ")
    assert fields["size"] == "%d bytes" % len(raw_message(m, kq.d1))
    assert [(a, s) for a, s, _, _ in rcpts] == [("x@far.test", "pending"),
                                                ("y@far.test", "pending")]
    for _, _, extra, reply in rcpts:
        assert "relay=" in extra
        assert "Connection refused" in reply
    # the history from the log: arrival and the deferral of each recipient
    assert fields["history"] == "(%s)" % m.log
    hist = fields["history_lines"]
    assert any("%s: from=<alice@home.test>" % kq.d1 in l for l in hist), hist
    for rc in ("x@far.test", "y@far.test"):
        assert any("%s: to=<%s>" % (kq.d1, rc) in l and
                   "status=deferred" in l for l in hist), hist
    assert all(kq.d1 + ":" in l for l in hist)
    # the headers, and nothing of the body
    assert rest.startswith("Received: from client.test")
    assert "Subject: message 1\n" in rest.replace("\r\n", "\n")
    assert "X-Serial: 1" in rest
    assert "serial 1" not in rest

    r = m.ctl("show", kq.h)
    fields, rcpts, _ = parse_show(r.stdout)
    assert fields["state"] == "held" and fields["held"] == "yes"
    assert len(rcpts) == 4


def test_show_json_has_the_envelope_history_and_headers(kq):
    m = kq.m
    r = m.ctl("show", kq.d1, "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    # the keys of queue --json, with the same values
    listed = {e["id"]: e for e in queue_json(m)["messages"]}[kq.d1]
    same = [k for k in listed if k not in ("age_s", "recipients")]
    assert {k: j[k] for k in same} == {k: listed[k] for k in same}
    assert [{k: v for k, v in x.items() if k in listed["recipients"][0]}
            for x in j["recipients"]] == listed["recipients"]
    # and what show prints besides
    assert j["client"]["ip"] == "127.0.0.1" and j["client"]["helo"] == "client.test"
    assert isinstance(j["client"]["port"], int)
    assert j["body"] in ("7BIT", "8BITMIME") and j["smtputf8"] is False
    assert j["ret"] is None and j["envid"] is None
    assert j["requiretls"] is False and j["tls_optional"] is False
    assert [(x["address"], x["notify"], x["orcpt"]) for x in j["recipients"]] == \
        [("x@far.test", [], None), ("y@far.test", [], None)]
    assert j["history_file"] == m.log
    assert any("%s: from=<alice@home.test>" % kq.d1 in l for l in j["history"])
    assert all(kq.d1 + ":" in l for l in j["history"])
    assert j["headers"].startswith("Received: from client.test")
    assert "Subject: message 1\r\n" in j["headers"]
    assert "serial 1" not in j["headers"] and j["headers_cut"] is False
    # one output form at a time
    r = m.ctl("show", kq.d1, "--json", "--body")
    assert r.returncode == 2 and "usage: mtactl show ID" in r.stderr


def test_show_body_and_raw_are_byte_exact(kq):
    m = kq.m
    _, _, msg = kq.sent[kq.d2]
    r = ctl_bytes(m, "show", kq.d2, "--raw")
    assert r.returncode == 0, r.stderr
    received, rest = strip_received(r.stdout)
    assert rest == msg
    assert b"id " + kq.d2.encode() in received
    raw = r.stdout
    r = ctl_bytes(m, "show", "--body", kq.d2)     # option before the id
    assert r.returncode == 0, r.stderr
    head, sep, body = r.stdout.partition(b"\n\n")
    assert sep and head.startswith(b"id:")
    assert body == raw
    # headers only: up to the empty line, exactly
    r = ctl_bytes(m, "show", kq.d2)
    _, _, hdrs = r.stdout.partition(b"\n\n")
    assert hdrs.endswith(b"X-Serial: 2\r\n")
    assert raw.startswith(hdrs) and raw[len(hdrs):].startswith(
        b"\r\nserial 2\r\n")


def test_show_of_an_active_message_and_lower_case_id(kq):
    active = kq.make_active()
    r = kq.m.ctl("show", active.lower())
    assert r.returncode == 0, r.stderr
    fields, rcpts, _ = parse_show(r.stdout)
    assert fields["id"] == active and fields["state"] == "active"
    assert rcpts[0][:2] == ("s@slow.test", "pending")


def test_flush_of_an_active_message_leaves_it_to_its_attempt(kq):
    m = kq.m
    active = kq.make_active()
    r = m.ctl("flush", active)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%s: being delivered right now\n" % active
    assert r.stderr == ""
    # it did not wait for the attempt: the sink still sits on its reply
    st = {e["id"]: e["state"] for e in queue_json(m)["messages"]}
    assert st[active] == "active"
    assert kq.slow.received() == []
    kq.slow.gate.set()
    kq.slow.wait_for(1, 20)
    assert wait_for(lambda: no_trace(m, active), 10)


def test_show_errors(kq):
    m = kq.m
    r = m.ctl("show", "0123456789ABCDEF")
    assert r.returncode == 1
    assert r.stderr == "mtactl: show: 0123456789ABCDEF: no such message " \
        "in the queue\n"
    for bad in ("../etc", "../../etc/passwd", kq.d1 + "0", kq.d1[:-1],
                "012345678/ABCDEF", "G123456789ABCDEF"):
        r = m.ctl("show", bad)
        assert r.returncode == 1, bad
        assert "is not a queue id" in r.stderr, r.stderr
        assert r.stdout == ""
    for args in ([], [kq.d1, kq.d2], [kq.d1, "--body", "--raw"],
                 [kq.d1, "--summary"], [kq.d1, "--json", "--raw"]):
        r = m.ctl("show", *args)
        assert r.returncode == 2, (args, r.stderr)


# ---- delete ---------------------------------------------------------------

def test_delete_one_and_unknown(kq):
    m = kq.m
    r = m.ctl("delete", kq.d1)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%s: deleted\n" % kq.d1
    assert no_trace(m, kq.d1)
    assert set(m.queue_ids()) == {kq.d2, kq.h}
    r = m.ctl("delete", kq.d1)
    assert r.returncode == 1
    assert "no such message" in r.stderr
    # several ids, one unknown: the others are done, the exit says failed
    r = m.ctl("delete", kq.d2, "FFFFFFFFFFFFFFFF", kq.h.lower())
    assert r.returncode == 1
    assert "FFFFFFFFFFFFFFFF: no such message in the queue" in r.stderr
    assert "%s: deleted" % kq.d2 in r.stdout
    assert "%s: deleted" % kq.h in r.stdout
    assert m.queue_ids() == [] and state_files(m) == []
    # deleted means no delivery and no DSN
    time.sleep(0.5)
    assert kq.home.received() == []
    assert_log_clean(m)


def test_delete_all_with_filters(kq):
    m = kq.m
    e = kq.send_deferred("erin@home.test", ["q@far.test"], 5)
    r = m.ctl("delete", "--from", "alice")
    assert r.returncode == 2        # a filter alone is no bulk change
    r = m.ctl("delete")
    assert r.returncode == 2
    r = m.ctl("delete", kq.d2, "--all")
    assert r.returncode == 2
    r = m.ctl("delete", kq.d2, "--from", "bob")
    assert r.returncode == 2
    assert set(m.queue_ids()) == {kq.d1, kq.d2, kq.h, e}

    r = m.ctl("delete", "--all", "--from", "alice@home.test")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["%s: deleted" % kq.d1,
                                     "-- delete: 1 message"]
    assert set(m.queue_ids()) == {kq.d2, kq.h, e}
    r = m.ctl("delete", "--all", "--to", "far.test", "--state", "deferred")
    assert r.returncode == 0, r.stderr
    assert set(m.queue_ids()) == {kq.d2, kq.h}
    r = m.ctl("delete", "--all", "--from", "nobody")
    assert r.returncode == 0
    assert r.stdout == "-- delete: 0 messages\n"
    r = m.ctl("delete", "--all")
    assert r.returncode == 0, r.stderr
    assert m.queue_ids() == [] and state_files(m) == []
    assert_log_clean(m)


# ---- hold, release, flush -------------------------------------------------

def test_hold_is_not_delivered_even_after_flush_then_release_delivers(kq):
    m = kq.m
    # a message to later.test defers (default route: closed port) ...
    qid = kq.send_deferred("frank@home.test", ["p@later.test"], 6)
    r = m.ctl("hold", qid)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%s: on hold\n" % qid
    r = m.ctl("hold", qid)
    assert r.stdout == "%s: already on hold\n" % qid
    # ... its route is fixed, but it is held: flush must not deliver it
    r = m.ctl("route", "add", "later.test", kq.good.route)
    assert r.returncode == 0, r.stderr
    r = m.ctl("flush", qid)
    assert r.returncode == 0, r.stderr
    assert "not delivered until released" in r.stdout
    r = m.ctl("flush")
    assert r.returncode == 0, r.stderr
    # with mtad running, flushing everything is one "kick *" (no state
    # rewritten): each worker's rebuild leaves the held ones out
    assert r.stdout.startswith("-- flush: "), r.stdout
    assert "mtad delivers every one now, but for those on hold" in r.stdout
    # every worker rebuilt its schedule for the flush and left out the two
    # held messages (this one and kq.h)
    assert wait_for(lambda: len(KICK_RE.findall(m.log_text())) >=
                      m.cfg["server"]["workers"], 10), m.log_text()[-3000:]
    assert sum(int(n) for n in KICK_RE.findall(m.log_text())) == 2
    time.sleep(1.0)
    assert kq.good.received() == []
    j = queue_json(m)
    assert {e["id"]: e["state"] for e in j["messages"]}[qid] == "held"
    # the state file stays the workers' (mtactl ran as root)
    st = os.stat(os.path.join(m.spool, "state", qid))
    assert st.st_uid == os.stat(os.path.join(m.spool, "queue")).st_uid
    # release: delivered at once, to the fixed route
    r = m.ctl("release", qid)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%s: released; delivery now\n" % qid
    got = kq.good.wait_for(1, 20)
    assert got[0].rcpt_tos == ["p@later.test"]
    _, rest = strip_received(got[0].data)
    assert rest == kq.sent[qid][2]
    assert wait_for(lambda: no_trace(m, qid), 10)
    # the other held message is still held and nothing else moved
    assert kq.h in m.queue_ids()
    assert len(kq.good.received()) == 1
    assert_log_clean(m)


def test_hold_all_and_release_all_with_filter(kq):
    m = kq.m
    r = m.ctl("hold", "--all", "--to", "far.test")
    assert r.returncode == 0, r.stderr
    assert "%s: on hold" % kq.d1 in r.stdout
    assert "%s: already on hold" % kq.h in r.stdout
    j = queue_json(m)
    st = {e["id"]: e["state"] for e in j["messages"]}
    assert st == {kq.d1: "held", kq.d2: "deferred", kq.h: "held"}
    r = m.ctl("release", "--all", "--state", "held", "--from", "alice")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "%s: released; delivery now" % kq.d1
    # released: tried again at once (and deferred again: route still dead)
    kq.wait_deferred(kq.d1, attempts=2)
    st = {e["id"]: e["state"] for e in queue_json(m)["messages"]}
    assert st == {kq.d1: "deferred", kq.d2: "deferred", kq.h: "held"}


def test_flush_delivers_a_fixed_route_at_once(kq):
    m = kq.m
    a = kq.send_deferred("gina@home.test", ["o@fixed.test"], 7)
    b = kq.send_deferred("hank@home.test", ["n@fixed2.test"], 8)
    for key in ("fixed.test", "fixed2.test"):
        r = m.ctl("route", "add", key, kq.good.route)
        assert r.returncode == 0, r.stderr
    # retry is 1h: only the flush can make these go now
    r = m.ctl("flush", a)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%s: delivery now\n" % a
    got = kq.good.wait_for(1, 20)
    assert got[0].rcpt_tos == ["o@fixed.test"]
    assert wait_for(lambda: no_trace(m, a), 10)
    assert b in m.queue_ids()
    # flush with no ids: everything (the held one stays)
    r = m.ctl("flush")
    assert r.returncode == 0, r.stderr
    assert "-- flush: 4 messages" in r.stdout
    got = kq.good.wait_for(2, 20)
    assert got[1].rcpt_tos == ["n@fixed2.test"]
    assert wait_for(lambda: no_trace(m, b), 10)
    assert len(kq.good.received()) == 2
    kq.wait_deferred(kq.d1, attempts=2)
    assert kq.h in m.queue_ids()
    assert_log_clean(m)


# ---- bounce ---------------------------------------------------------------

def test_bounce_sends_a_dsn_to_the_sender_and_removes(kq):
    m = kq.m
    r = m.ctl("bounce", kq.d1)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%s: returned to sender (DSN sent, then removed)\n" % \
        kq.d1
    dsn = kq.home.wait_for(1, 20)[0]
    assert dsn.mail_from == ""
    assert dsn.rcpt_tos == ["alice@home.test"]
    body = dsn.data.decode("utf-8", "replace")
    assert "report-type=delivery-status" in body
    assert "X-Mtad-Queue-ID: %s\r\n" % kq.d1 in body
    for rc in ("x@far.test", "y@far.test"):
        assert "Final-Recipient: rfc822; %s\r\n" % rc in body
    assert body.count("Action: failed\r\n") == 2
    assert "returned to sender by the administrator" in body
    assert "Connection refused" in body          # the last error is kept
    assert "Subject: message 1" in body          # the original headers
    assert wait_for(lambda: no_trace(m, kq.d1), 10)
    # a held message can be bounced too
    r = m.ctl("bounce", kq.h)
    assert r.returncode == 0, r.stderr
    dsn = kq.home.wait_for(2, 20)[1]
    assert dsn.rcpt_tos == ["carol@home.test"]
    assert dsn.data.count(b"Final-Recipient:") == 4
    assert wait_for(lambda: no_trace(m, kq.h), 10)
    # the DSNs themselves leave once the home sink took them
    assert wait_for(lambda: m.queue_ids() == [kq.d2], 10), m.queue_ids()
    assert len(kq.home.received()) == 2
    assert_log_clean(m)


def test_bounce_of_a_null_sender_message_sends_nothing(kq):
    m = kq.m
    qid = kq.send_deferred("", ["m@far.test"], 9)
    r = m.ctl("bounce", qid)
    assert r.returncode == 0, r.stderr
    assert "null sender" in r.stdout
    m.wait_log("%s: bounce for null sender dropped" % qid)
    assert wait_for(lambda: no_trace(m, qid), 10)
    assert kq.home.received() == []


# ---- exit codes and bad ids -----------------------------------------------

def test_exit_codes_and_bad_ids_for_every_change(kq):
    m = kq.m
    before = set(m.queue_ids())
    for cmd in ("delete", "hold", "release", "flush", "bounce"):
        for bad in ("../etc", "../../../etc/passwd", "/etc/passwd",
                    "ABC", kq.d1 + "/x", ".."):
            r = m.ctl(cmd, bad)
            assert r.returncode == 1, (cmd, bad, r.stderr)
            assert r.stderr == "mtactl: %s: '%s' is not a queue id (16 hex " \
                "digits)\n" % (cmd, bad), r.stderr
        r = m.ctl(cmd, "0000000000000000")
        assert r.returncode == 1
        assert r.stderr == "mtactl: %s: 0000000000000000: no such message " \
            "in the queue\n" % cmd
        r = m.ctl(cmd, "--bogus", kq.d1)
        assert r.returncode == 2, (cmd, r.stderr)
        r = m.ctl(cmd, "--from")
        assert r.returncode == 2, (cmd, r.stderr)
        if cmd != "flush":
            r = m.ctl(cmd)
            assert r.returncode == 2, (cmd, r.stderr)
            assert r.stderr.startswith("usage: mtactl %s ID..." % cmd)
    assert set(m.queue_ids()) == before
    assert os.path.exists("/etc/passwd")
    # nothing stray was written next to the spool
    assert sorted(os.listdir(m.spool)) == ["events", "queue", "state", "tmp"]
    r = m.ctl("nosuchcommand")
    assert r.returncode == 2
    r = m.ctl("help", "queue")
    assert r.returncode == 0 and "bounce ID" in r.stdout
    assert r.stdout.startswith("usage: mtactl queue [filters] ")
    for cmd in ("show", "delete", "hold", "release", "flush", "bounce"):
        h = m.ctl("help", cmd).stdout
        # its own usage line, then the queue commands' help
        assert h.startswith("usage: mtactl %s " % cmd), h
        assert h.split("\n", 1)[1] == r.stdout.split("\n", 1)[1]


# ---- the race -------------------------------------------------------------

@pytest.mark.parametrize("outcome", ["sent", "deferred"])
@pytest.mark.parametrize("cmd", ["delete", "hold", "bounce"])
def test_change_during_delivery_waits_and_leaves_a_consistent_state(
        mtad_factory, gated_sink_factory, cmd, outcome):
    """The sink sits on its reply to the data while mtactl changes the
    message: mtactl must wait for the attempt.  When the attempt delivers
    ("sent"), the message is gone and the change finds no such message;
    when it defers (451), the change applies to the deferred message.
    Retries are 300ms apart, so a change that did not stick would show."""
    kq = KnownQueue(mtad_factory, gated_sink_factory,
                    overrides={"delivery": {"retry": ["300ms"]}})
    m = kq.m
    if outcome == "deferred":
        kq.slow.fail_first = 1
    workers = sorted(m.children())
    qid = kq.make_active()
    p = subprocess.Popen([MTACTL, "-c", m.cfg_path, cmd, qid],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        first = []
        t = threading.Thread(target=lambda: first.append(
            p.stderr.readline()))
        t.start()
        t.join(30)
        assert first == ["mtactl: %s: %s: being delivered; waiting for the "
                         "attempt to end\n" % (cmd, qid)], first
        time.sleep(0.5)
        assert p.poll() is None, "mtactl did not wait for the attempt"
        assert kq.slow.received() == []
        kq.slow.gate.set()      # the sink answers: the attempt ends
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if outcome == "sent":
        assert p.returncode == 1, (out, err)
        assert err == "mtactl: %s: %s: no such message in the queue\n" % (
            cmd, qid), err
        got = kq.slow.wait_for(1, 20)
        _, rest = strip_received(got[0].data)
        assert rest == kq.sent[qid][2]
        m.wait_log("%s: removed" % qid)
    else:
        assert p.returncode == 0, err
        assert out.startswith("%s: " % qid)
        m.wait_log("%s: to=<s@slow.test>" % qid)
        if cmd == "bounce":
            dsn = kq.home.wait_for(1, 20)[0]
            assert dsn.rcpt_tos == ["dave@home.test"]
            assert b"Final-Recipient: rfc822; s@slow.test" in dsn.data
            m.wait_log("%s: removed" % qid)
    time.sleep(1.0)                 # three retry periods
    if cmd == "hold" and outcome == "deferred":
        e = queue_json(m)["messages"]
        assert [(x["id"], x["state"], x["attempts"]) for x in e] == \
            [(qid, "held", 1)]
        assert kq.slow.received() == []
    else:
        assert no_trace(m, qid), (m.queue_ids(), state_files(m))
        # removed by the worker, except what mtactl deleted itself
        assert m.log_text().count("%s: removed" % qid) == (
            0 if (cmd, outcome) == ("delete", "deferred") else 1)
        assert len(kq.slow.received()) == (1 if outcome == "sent" else 0)
    if not (cmd == "bounce" and outcome == "deferred"):
        assert kq.home.received() == []
    # one attempt only: nothing was tried again behind the change
    assert m.log_text().count("%s: to=<s@slow.test>" % qid) == 1
    assert sorted(m.children()) == workers          # no worker died
    assert_log_clean(m)


def test_many_deletes_racing_many_deliveries(mtad_factory,
                                            gated_sink_factory):
    """Messages stream to a slightly slow sink while `delete --all` runs
    again and again: each message ends delivered once or deleted, never
    both, and nothing is left behind."""
    kq = KnownQueue(mtad_factory, gated_sink_factory, gated=False,
                    overrides={"delivery": {"retry": ["20ms"]}})
    kq.slow.data_delay = 0.05
    m = kq.m
    n = 40
    # the first n replies to the data are 451: those messages wait
    # deferred for a retry 20ms later, where the deletes can catch them or
    # race the retry
    kq.slow.fail_first = n
    sent = {}
    stop = threading.Event()
    deleted, errors = set(), []

    def deleter():
        for _ in range(200):
            if stop.is_set():
                break
            r = m.ctl("delete", "--all", timeout=120)
            for line in r.stdout.splitlines():
                if line.endswith(": deleted"):
                    deleted.add(line.split(":")[0])
            if r.returncode not in (0, 1):
                errors.append(r)
            # rc 1: a message finished between listing and locking
            for line in r.stderr.splitlines():
                if "being delivered" in line:
                    continue
                if not line.endswith("no such message in the queue"):
                    errors.append(line)
            time.sleep(0.01)

    t = threading.Thread(target=deleter)
    t.start()
    try:
        conn = m.smtp()
        conn.ehlo("client.test")
        for i in range(n):
            qid = send(m, "race@home.test", ["r%d@slow.test" % i],
                       make_message(100 + i), conn=conn)
            sent[qid] = i
        conn.quit()
        assert wait_for(lambda: m.queue_ids() == [], 60), m.queue_ids()
    finally:
        stop.set()
        t.join(180)
    assert not errors, errors
    time.sleep(0.5)
    delivered = {}
    for msg in kq.slow.received():
        i = int(msg.rcpt_tos[0][1:].split("@")[0])
        delivered[i] = delivered.get(i, 0) + 1
    assert all(v == 1 for v in delivered.values()), delivered
    del_serials = {sent[q] for q in deleted}
    assert not (set(delivered) & del_serials), \
        "deleted and delivered: %s" % (set(delivered) & del_serials)
    assert set(delivered) | del_serials == set(range(n))
    assert state_files(m) == []
    assert_log_clean(m)


# ---- mtad stopped ---------------------------------------------------------

def test_commands_work_on_the_spool_while_mtad_is_stopped(kq):
    m = kq.m
    running = queue_json(m)
    m.stop()
    assert not os.path.exists(m.sock)
    r = m.ctl("queue")
    assert r.returncode == 0, r.stderr
    msgs, summary = parse_queue(r.stdout)
    assert {q: e["state"] for q, e in msgs.items()} == {
        kq.d1: "deferred", kq.d2: "deferred", kq.h: "held"}
    assert summary[0] == 3
    stopped = queue_json(m)
    assert stopped["messages"] == [dict(e, age_s=s["age_s"]) for e, s in
                                   zip(running["messages"],
                                       stopped["messages"])]
    r = m.ctl("show", kq.d2)
    assert r.returncode == 0 and parse_show(r.stdout)[0]["id"] == kq.d2
    # changes stand and are acted on when mtad starts again
    r = m.ctl("route", "add", "far.test", kq.good.route)
    assert r.returncode == 0, r.stderr
    r = m.ctl("flush", kq.d1)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%s: delivery now\n-- mtad is not running: the " \
        "change takes effect when it starts\n" % kq.d1
    r = m.ctl("flush")
    assert r.returncode == 0, r.stderr
    r = m.ctl("bounce", kq.d2)
    assert r.returncode == 0, r.stderr
    r = m.ctl("hold", kq.d1)
    assert r.returncode == 0
    r = m.ctl("release", kq.d1)
    assert r.returncode == 0
    assert state_files(m) == sorted([kq.d1, kq.d2, kq.h])
    assert kq.good.received() == [] and kq.home.received() == []
    m.start()
    got = kq.good.wait_for(1, 20)
    assert got[0].rcpt_tos == ["x@far.test", "y@far.test"]
    dsn = kq.home.wait_for(1, 20)[0]
    assert dsn.rcpt_tos == ["bob@home.test"]
    assert wait_for(lambda: m.queue_ids() == [kq.h], 20), m.queue_ids()
    # the held one stayed held through the restart
    time.sleep(0.5)
    assert len(kq.good.received()) == 1
    assert queue_json(m)["messages"][0]["state"] == "held"
    assert_log_clean(m)


def test_spool_that_was_never_made_is_a_clear_error(mtad_factory):
    m = mtad_factory()                  # configured, never started
    r = m.ctl("queue")
    assert r.returncode == 1
    assert r.stderr.startswith("mtactl: queue: spool %s: " % m.spool)
    assert "No such file or directory" in r.stderr
    r = m.ctl("flush")
    assert r.returncode == 1 and "spool" in r.stderr


@pytest.mark.skipif(not IS_ROOT, reason="needs root to switch users")
def test_other_users_get_a_clear_error_and_mtads_user_may_steer(kq):
    m = kq.m

    def as_user(name, *args):
        pw = pwd.getpwnam(name)

        def drop():
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
        return subprocess.run([MTACTL, "-c", m.cfg_path, *args],
                              capture_output=True, text=True, timeout=60,
                              preexec_fn=drop)

    r = as_user("nobody", "queue")
    assert r.returncode == 1
    assert "Permission denied" in r.stderr
    assert "(run as root or as the user mtad runs as)" in r.stderr
    r = as_user("nobody", "delete", kq.d1)
    assert r.returncode == 1 and "Permission denied" in r.stderr
    assert kq.d1 in m.queue_ids()
    # the user mtad runs as owns the spool: it may look and change the
    # files, but not use the control socket (issue 10, finding 5: that is
    # the workers' user); root tells mtad
    r = as_user(USER, "queue")
    assert r.returncode == 0, r.stderr
    assert parse_queue(r.stdout)[1][0] == 3
    r = as_user(USER, "release", kq.h)
    assert r.returncode == 1
    assert "could not tell mtad" in r.stderr, r.stderr
    assert "(run as root or as a member of server.admin_group)" in r.stderr
    assert m.ctl("kick", kq.h).returncode == 0
    kq.wait_deferred(kq.h, attempts=2)


# ---- a queue written straight into the spool (issue 16) --------------------

FILL = os.path.join(os.path.dirname(MTACTL), "bench", "bigqueue_fill")


@pytest.mark.skipif(not os.access(FILL, os.X_OK), reason="bench/bigqueue_fill not built")
def test_deferred_queue_recovers_from_the_inode_and_flush_delivers_it(mtad_factory, sink):
    """bench/bigqueue.py's queue, small: 40 deferred messages (next try in
    an hour) written by the spool API.  The summary counts them by state
    and domain; the workers schedule all of them at start (from the queue
    files' inodes) without trying any; one `mtactl flush` (a kick while
    mtad runs) then delivers every one."""
    m = mtad_factory({"routes": {"default": sink.route}})
    m.start()                           # makes the spool, owned by the workers
    m.stop()
    st = os.stat(os.path.join(m.spool, "queue"))

    def as_owner():
        os.setgid(st.st_gid)
        os.setuid(st.st_uid)
    subprocess.run([FILL, m.spool, "40", "2", "4"], check=True, timeout=60,
                   preexec_fn=as_owner if IS_ROOT else None,
                   stdout=subprocess.DEVNULL)
    r = m.ctl("queue", "--summary", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["summary"]["messages"] == 40 and j["summary"]["deferred"] == 40
    assert {d["domain"]: (d["messages"], d["deferred"]) for d in j["by_domain"]} == \
        {"d%d.bigqueue.test" % k: (10, 10) for k in range(4)}
    # the schedule is in each queue file's inode: mtime = next retry
    ids = m.queue_ids()
    for qid in ids:
        s = os.stat(os.path.join(m.spool, "queue", qid))
        assert s.st_mode & 0o070 == 0o010, oct(s.st_mode)   # valid, not held
        assert s.st_mtime > time.time() + 3000
    before = len(m.log_text())          # the first start's lines (0 each)
    m.start()

    def recovered():
        found = re.findall(r"recover: (\d+) queued messages of shard \d+ "
                           r"scheduled, (\d+) on hold", m.log_text()[before:])
        return found if len(found) >= 2 else None
    rec = wait_for(recovered, 20, what="both workers' recover lines")
    assert sorted(rec) == [("20", "0"), ("20", "0")], rec
    time.sleep(1.0)
    assert sink.received() == [], "a message due in an hour was tried"
    r = m.ctl("flush")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("-- flush: 40 messages: mtad delivers every one now"), r.stdout
    got = sink.wait_for(40, timeout=60)
    assert sorted(g.rcpt_tos[0] for g in got) == \
        sorted("user%d@d%d.bigqueue.test" % (i, i % 4) for i in range(40))
    assert wait_for(lambda: m.queue_ids() == [], 20, what="empty queue")


# ---- the listing through the workers' index (issue 16) -------------------
#
# While mtad runs, `mtactl queue` gets its records from the workers
# (delivery/qindex.c, streamed over sockets the master hands out); when it
# does not, mtactl reads the files.  --daemon insists on the first (it
# fails rather than read the files), --files on the second: the two must
# print the same, for every option.

LISTING_VARIANTS = [
    (), ("--by-domain",), ("--summary",), ("--from", "alice"),
    ("--to", "other.test"), ("--state", "held"), ("--state", "active"),
    ("--state", "deferred"), ("--older-than", "1h"), ("--json",),
    ("--summary", "--json"), ("--json", "--by-domain"),
    ("--from", "CAROL", "--to", "third"),
]

AGE_RE = re.compile(r"^([0-9A-F]{16} +\d+ \S+) +\S+ ", re.M)
NEXT_RE = re.compile(r"next retry in \S+,")


def comparable(args, text):
    """The listing without what moves with the clock between two runs
    (ages, the time to the next retry)."""
    if "--json" in args:
        j = json.loads(text)
        for e in j.get("messages", []):
            e.pop("age_s")
        return j
    return NEXT_RE.sub("next retry in _,", AGE_RE.sub(r"\1 _ ", text))


def assert_sources_agree(m, variants=LISTING_VARIANTS):
    for args in variants:
        d = m.ctl("queue", "--daemon", *args)
        assert d.returncode == 0, (args, d.stderr)
        f = m.ctl("queue", "--files", *args)
        assert f.returncode == 0, (args, f.stderr)
        assert d.stderr == "" and f.stderr == "", (args, d.stderr, f.stderr)
        assert comparable(args, d.stdout) == comparable(args, f.stdout), \
            "mtactl queue %s:\n-- workers:\n%s\n-- files:\n%s" % (
                " ".join(args), d.stdout, f.stdout)


def test_listing_through_workers_matches_files(kq):
    m = kq.m
    active = kq.make_active()
    msgs, summary = parse_queue(m.ctl("queue", "--daemon", check=True).stdout)
    assert msgs[active]["state"] == "active"
    assert msgs[kq.h]["state"] == "held"
    assert msgs[kq.d1]["state"] == "deferred"
    assert summary[0] == 4, summary
    assert_sources_agree(m)


def test_listing_through_workers_follows_changes_at_once(kq):
    """hold, release and delete tell the workers (a kick) before mtactl
    returns: the next listing shows the change, no wait (the worker
    reads the kicked message's file again)."""
    m = kq.m
    m.ctl("hold", kq.d1, check=True)
    msgs, _ = parse_queue(m.ctl("queue", "--daemon", check=True).stdout)
    assert msgs[kq.d1]["state"] == "held"
    m.ctl("delete", kq.d2, check=True)
    msgs, _ = parse_queue(m.ctl("queue", "--daemon", check=True).stdout)
    assert kq.d2 not in msgs and set(msgs) == {kq.d1, kq.h}
    assert_sources_agree(m, [(), ("--json",), ("--summary",)])


def test_listing_through_workers_after_restart(kq):
    """After a restart the index is rebuilt from the spool: right after
    the start and after the background read.  A clean stop saved each
    worker's records (state/index-NN): the start takes them from there,
    each checked against its queue file's inode, and reads no file."""
    m = kq.m
    m.stop()
    saved = [f for f in os.listdir(os.path.join(m.spool, "state"))
             if f.startswith("index-")]
    assert saved, os.listdir(os.path.join(m.spool, "state"))
    r = m.ctl("queue", "--daemon")
    assert r.returncode == 1 and "--daemon: mtad did not answer" in r.stderr
    stopped = m.ctl("queue", check=True).stdout     # the files
    before = len(m.log_text())
    m.start()
    # the listener answers first; the workers report ready a little later
    wait_for(lambda: m.ctl("queue", "--daemon").returncode == 0,
             what="the workers answering")
    assert_sources_agree(m)
    assert comparable((), m.ctl("queue", "--daemon", check=True).stdout) == \
        comparable((), stopped)
    wait_for(lambda: len(re.findall(r"queue index: \d+ messages",
                                    m.log_text()[before:])) >= 2,
             what="both workers' queue index lines")
    assert_sources_agree(m)
    log = m.log_text()[before:]
    used = re.findall(r"recover: (\d+) of (\d+) records from the queue "
                      r"index the last stop saved", log)
    assert sum(int(u) for u, _ in used) == 3 and \
        sum(int(n) for _, n in used) == 3, used
    assert re.findall(r"queue index: \d+ messages, (\d+) records read",
                      log) == ["0", "0"], log
    assert not [f for f in os.listdir(os.path.join(m.spool, "state"))
                if "index" in f], "the saved index is used once"


def test_listing_through_workers_after_worker_crash(kq):
    """kill -9 of a worker: its replacement recovers its shard, index
    included; meanwhile `mtactl queue` reads the files."""
    import signal
    from mtadtest import workers
    m = kq.m
    old = sorted(workers(m.pid))
    assert len(old) == 2, old
    os.kill(old[0], signal.SIGKILL)
    r = m.ctl("queue")                  # whichever source answers
    assert r.returncode == 0, r.stderr
    assert set(parse_queue(r.stdout)[0]) == {kq.d1, kq.d2, kq.h}
    wait_for(lambda: len(set(workers(m.pid)) - set(old)) == 1 and
             m.ctl("queue", "--daemon").returncode == 0,
             what="the replacement worker answering")
    assert_sources_agree(m)


def test_workers_clean_states_at_recovery(kq):
    """The master's start no longer passes over state/ (a second per
    200,000 deferred messages before any worker runs): each worker removes
    its shard's orphan state files and marks states saved before queue
    files carried the mark, while it recovers."""
    m = kq.m
    m.stop()
    orphan = os.path.join(m.spool, "state", "0000000000000001")
    with open(orphan, "w") as f:
        f.write("attempts 1\n")
    qf = os.path.join(m.spool, "queue", kq.d1)
    os.chmod(qf, 0o600)                 # unmarked: as an old mtad left it
    assert m.ctl("queue", "--files", check=True).stdout.count(
        "%s " % kq.d1) == 1
    m.start()
    wait_for(lambda: m.ctl("queue", "--daemon").returncode == 0,
             what="the workers answering")
    assert not os.path.exists(orphan)
    assert os.stat(qf).st_mode & 0o100, oct(os.stat(qf).st_mode)
    msgs, _ = parse_queue(m.ctl("queue", "--daemon", check=True).stdout)
    assert msgs[kq.d1]["state"] == "deferred", msgs[kq.d1]
    assert "1 attempt" in msgs[kq.d1]["detail"], msgs[kq.d1]
    assert_sources_agree(m, [(), ("--json",)])


@pytest.mark.skipif(not os.access(FILL, os.X_OK), reason="bench/bigqueue_fill not built")
def test_listing_through_workers_of_a_bigger_queue_at_start(mtad_factory, sink):
    """5,000 deferred messages written by the spool API, mtad started and
    asked at once (each record read by the background pass or, when the
    listing comes first, by the listing): in id order across both
    workers, the same output as the files, and again once the background
    read is done."""
    m = mtad_factory({"routes": {"default": sink.route}})
    m.start()
    m.stop()
    st = os.stat(os.path.join(m.spool, "queue"))

    def as_owner():
        os.setgid(st.st_gid)
        os.setuid(st.st_uid)
    subprocess.run([FILL, m.spool, "5000", "2", "50"], check=True, timeout=120,
                   preexec_fn=as_owner if IS_ROOT else None,
                   stdout=subprocess.DEVNULL)
    before = len(m.log_text())
    m.start()
    wait_for(lambda: m.ctl("queue", "--daemon", "--summary").returncode == 0,
             what="the workers answering")
    assert_sources_agree(m, [(), ("--summary",), ("--to", "d7.bigqueue"),
                             ("--json",)])
    wait_for(lambda: len(re.findall(r"queue index: \d+ messages",
                                    m.log_text()[before:])) >= 2, 60,
             what="both workers' queue index lines")
    msgs, summary = parse_queue(m.ctl("queue", "--daemon", check=True).stdout)
    assert len(msgs) == 5000 and summary[0] == 5000, summary
    assert list(msgs) == sorted(msgs)
    assert_sources_agree(m, [(), ("--summary", "--json")])


def test_indexes_of_shards_gone_are_removed(mtad_factory):
    """state/index-NN of a shard the worker count no longer has (saved
    when there were more workers) is removed at the start and after a
    reload's old workers are gone (they save theirs on the way out), so a
    later growth of the count never takes an old one."""
    import pwd
    from mtadtest import IS_ROOT, USER
    m = mtad_factory({"server": {"workers": 2}})
    state = os.path.join(m.spool, "state")

    def plant(*shards):
        os.makedirs(state, exist_ok=True)
        for s in shards:
            p = os.path.join(state, "index-%02x" % s)
            with open(p, "w") as f:
                f.write("mtad-qindex 1\n")
            if IS_ROOT:
                pw = pwd.getpwnam(USER)
                os.chown(p, pw.pw_uid, pw.pw_gid)

    def indexes():
        return sorted(f for f in os.listdir(state) if f.startswith("index-"))

    m.start()
    m.stop()
    plant(2, 3, 0x1f)
    before = len(m.log_text())
    m.start()
    wait_for(lambda: "queued messages of shard 0 scheduled" in
             m.log_text()[before:], what="shard 0's recovery")
    assert indexes() == []
    assert "recover: 3 queue index files of shards 2 and up removed" in \
        m.log_text()[before:]
    plant(3)
    assert m.ctl("reload").returncode == 0
    # by the new workers' start, or the kick when the old ones are gone
    m.wait_log(": 1 queue index files of shards 2 and up removed",
               timeout=30)
    assert indexes() == []


@pytest.mark.skipif(not IS_ROOT, reason="mtactl drops to the spool's owner only as root")
def test_root_mtactl_never_writes_through_a_link_the_workers_user_planted(
        mtad_factory, workdir):
    """The workers' user owns state/: a link it puts where mtactl (root,
    acting with that user's ids) writes a message's new state must not
    lead root's write elsewhere, not even to a file writable by group
    root (mtactl drops root's supplementary groups too)."""
    m = mtad_factory({"routes": {"default": "smtp:[127.0.0.1]:%d" %
                                 closed_port()},
                      "delivery": {"retry": ["1h"], "connect_timeout": "2s"}})
    m.start()
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    m.wait_log(qid + ": to=<b@example.net>")
    victim = os.path.join(workdir, "victim")
    with open(victim, "w") as f:
        f.write("root's own\n")
    os.chmod(victim, 0o664)                     # root:root, group-writable
    pw = pwd.getpwnam(USER)
    link = os.path.join(m.spool, "state", ".%s.tmp" % qid)
    pid = os.fork()
    if pid == 0:                                # as the workers' user
        try:
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.symlink(victim, link)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.path.islink(link)
    r = subprocess.run([MTACTL, "-c", m.cfg_path, "hold", qid],
                       capture_output=True, text=True, timeout=30,
                       preexec_fn=lambda: os.setgroups([0]))
    assert r.returncode == 0, r.stderr
    with open(victim) as f:
        assert f.read() == "root's own\n"
    st = os.lstat(os.path.join(m.spool, "state", qid))
    assert not os.path.islink(os.path.join(m.spool, "state", qid))
    assert st.st_uid == pw.pw_uid
    with open(os.path.join(m.spool, "state", qid)) as f:
        assert "held 1" in f.read()


def test_show_escapes_the_client_address_the_spool_holds(kq):
    """The queue file is the workers' user's to write: an address field
    with escape sequences in it (xtext in the file) reaches root's
    terminal escaped, like every other field."""
    m = kq.m
    path = os.path.join(m.spool, "queue", kq.d1)
    with open(path, "rb") as f:
        data = f.read()
    head, sep, rest = data.partition(b"\nend\n")
    lines = head.split(b"\n")
    i = next(k for k, l in enumerate(lines) if l.startswith(b"client "))
    port = lines[i].split(b" ")[-1]
    lines[i] = b"client +1B]2;OWNED+07+1B[2J " + port
    st = os.stat(path)
    with open(path, "r+b") as f:                # same inode, same length
        new = b"\n".join(lines) + sep + rest
        f.write(new)
        f.truncate(len(new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = m.ctl("show", kq.d1)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("client:"))
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout, repr(line)
    assert "\\x1b]2;OWNED\\x07\\x1b[2J" in line, repr(line)


@pytest.mark.parametrize("running", [True, False])
def test_queue_dir_replaced_by_a_link_is_an_error_naming_it(mtad_factory,
                                                            running):
    """The workers' user owns the spool and may swap queue/ for a link;
    the listing must say so, not print an empty queue."""
    m = mtad_factory().start()
    q = os.path.join(m.spool, "queue")
    os.rename(q, q + ".real")
    os.symlink(q + ".real", q)
    if not running:
        m.stop()
    r = m.ctl("queue")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "0 messages" not in r.stdout
    assert "%s: is a symbolic link" % q in r.stderr, r.stderr
