"""Delivery events (events/events.h, docs/EVENTS.md): one JSON record per
reception, delivery, deferral, bounce, DSN; posted in batches to an HTTP
endpoint with an HMAC-SHA256 signature, or added to a Redis stream; kept
on the spool until the target acknowledged them, so a target that is down
and a kill -9 of any process lose none.  Loopback only; every wait is
bounded."""
import hashlib
import hmac
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from mtadtest import (MTAD, children_by_comm, closed_port, free_port,
                      make_message, wait_for, workers)

ID_MARK = b"queued as "
SECRET = b"s3cret-key"


class Receiver:
    """An HTTP endpoint that records the events POSTed to it.

    status: the answer (200; 500 makes mtad retry); up(False) closes the
    listening socket (connections refused) and up(True) opens it again on
    the same port."""

    def __init__(self, secret=SECRET):
        self.secret = secret
        self.status = 200
        self.events = []
        self.posts = 0
        self.bad_sigs = 0
        self.lock = threading.Lock()
        self.port = free_port()
        self.srv = None
        self.up(True)

    def up(self, on):
        if not on:
            if self.srv is not None:
                self.srv.shutdown()
                self.srv.server_close()
                self.srv = None
            return
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                sig = self.headers.get("X-Mtad-Signature", "")
                want = "sha256=" + hmac.new(rec.secret, body,
                                            hashlib.sha256).hexdigest()
                with rec.lock:
                    rec.posts += 1
                    ok = rec.status == 200
                    if sig != want:
                        rec.bad_sigs += 1
                    elif ok:
                        for line in body.splitlines():
                            rec.events.append(json.loads(line))
                self.send_response(rec.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", self.port),
                                                   H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d/events" % self.port

    def of(self, typ, qid=None):
        with self.lock:
            return [e for e in self.events if e["type"] == typ and
                    (qid is None or e.get("queue_id") == qid)]

    def stop(self):
        self.up(False)


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


def events_cfg(workdir, url, **extra):
    sf = os.path.join(workdir, "events.secret")
    with open(sf, "wb") as f:
        f.write(SECRET + b"\n")
    os.chmod(sf, 0o600)
    cfg = {"http": {"url": url, "secret_file": sf, "timeout": "2s"}}
    cfg.update(extra)
    return cfg


def start(mtad_factory, events, route, workers_n=1, extra=None):
    cfg = {"events": events, "routes": {"default": route},
           "server": {"workers": workers_n}}
    if extra:
        cfg.update(extra)
    return mtad_factory(cfg).start()


def submit(m, sender, rcpts, msg):
    s = m.smtp()
    try:
        s.ehlo("client.test")
        code, _ = s.mail(sender)
        assert code == 250, code
        for r in rcpts:
            code, resp = s.rcpt(r)
            assert code == 250, (code, resp)
        code, resp = s.data(msg)
        assert code == 250, (code, resp)
        i = resp.index(ID_MARK) + len(ID_MARK)
        return resp[i:i + 16].decode()
    finally:
        s.quit()


def test_reception_and_delivery_signed_with_correlation_header(
        mtad_factory, sink, receiver, workdir):
    m = start(mtad_factory, events_cfg(workdir, receiver.url,
                                       headers="X-Msg-Ref, X-Absent"),
              sink.route)
    msg = (b"From: a@x.test\r\nX-Msg-Ref: order-42\r\n\t(folded \"q\")\r\n"
           b"Subject: hi\r\n\r\nbody\r\n")
    qid = submit(m, "alice@x.test", ["bob@y.test", "carol@y.test"], msg)
    assert wait_for(lambda: len(receiver.of("delivery", qid)) == 2, 20), \
        receiver.events
    assert wait_for(lambda: receiver.of("reception", qid), 10)
    rec = receiver.of("reception", qid)[0]
    assert rec["v"] == 1 and rec["sender"] == "alice@x.test"
    assert rec["recipients"] == ["bob@y.test", "carol@y.test"]
    assert rec["client_address"] == "127.0.0.1" and rec["size"] > 0
    assert rec["helo"] == "client.test"
    assert rec["headers"] == {"X-Msg-Ref": 'order-42 (folded "q")'}
    for d in receiver.of("delivery", qid):
        assert d["reply"]["code"] == 250
        assert d["next_hop"]["address"] == "127.0.0.1"
        assert d["next_hop"]["port"] == sink.port
        assert d["attempt"] == 1
        assert d.get("headers", {}).get("X-Msg-Ref", "").startswith("order-42"), d
        assert isinstance(d["unix_ms"], int) and d["time"].endswith("Z")
    assert receiver.bad_sigs == 0


def test_deferral_bounce_and_dsn_events(mtad_factory, sink, receiver,
                                        workdir):
    sink.reject = {"nobody@y.test"}
    m = start(mtad_factory, events_cfg(workdir, receiver.url), sink.route,
              extra={"routes": {"default": sink.route, "static": {
                  "dead.test": "smtp:[127.0.0.1]:%d" % closed_port()}},
                  "delivery": {"retry": ["30s"]}})
    qb = submit(m, "alice@x.test", ["nobody@y.test"], make_message(1))
    qd = submit(m, "alice@x.test", ["bob@dead.test"], make_message(2))
    assert wait_for(lambda: receiver.of("bounce", qb), 20), receiver.events
    b = receiver.of("bounce", qb)[0]
    assert b["reply"]["code"] == 550 and b["reply"]["enhanced"] == "5.1.1"
    assert b["class"] == "invalid_recipient", b
    assert wait_for(lambda: receiver.of("dsn", qb), 20)
    assert receiver.of("dsn", qb)[0]["dsn_kind"] == "failure"
    assert wait_for(lambda: receiver.of("deferral", qd), 20)
    d = receiver.of("deferral", qd)[0]
    # mtad's own reason: no SMTP code, the text says what happened
    assert "code" not in d["reply"], d["reply"]
    assert "Connection refused" in d["reply"]["text"] and d["attempt"] == 1
    assert d["class"] == "no_answer", d


def test_types_filter(mtad_factory, sink, receiver, workdir):
    m = start(mtad_factory, events_cfg(workdir, receiver.url,
                                       types=["delivery"]), sink.route)
    qid = submit(m, "alice@x.test", ["bob@y.test"], make_message(3))
    assert wait_for(lambda: receiver.of("delivery", qid), 20)
    time.sleep(0.5)                 # a reception would have come with it
    assert receiver.of("reception") == []


def count_ids(receiver, typ):
    with receiver.lock:
        return {e["queue_id"] for e in receiver.events if e["type"] == typ}


def test_target_down_then_back_and_kill_9_lose_nothing(mtad_factory, sink,
                                                       receiver, workdir):
    receiver.up(False)
    m = start(mtad_factory, events_cfg(workdir, receiver.url), sink.route,
              workers_n=2)
    ids = [submit(m, "alice@x.test", ["bob@y.test"], make_message(i))
           for i in range(20)]
    assert wait_for(lambda: len(sink.messages) == 20, 30)
    # every event waits on the spool; kill -9 every worker meanwhile
    ev_dir = os.path.join(m.spool, "events")
    assert wait_for(lambda: any(n.endswith(".ev")
                                for n in os.listdir(ev_dir)), 10)
    for pid in workers(m.pid):
        os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: len(workers(m.pid)) == 2, 20)
    more = [submit(m, "alice@x.test", ["bob@y.test"], make_message(100 + i))
            for i in range(5)]
    receiver.up(True)
    want = set(ids + more)
    assert wait_for(lambda: count_ids(receiver, "reception") >= want, 90), \
        want - count_ids(receiver, "reception")
    assert wait_for(lambda: count_ids(receiver, "delivery") >= want, 30)
    # sent segments are removed once their writers are gone
    m.stop()
    left = [n for n in os.listdir(ev_dir) if n.endswith(".ev")]
    assert all(os.path.getsize(os.path.join(ev_dir, n)) == 0 or
               n in open(os.path.join(ev_dir, "cursor")).read()
               for n in left), left


def test_backpressure_452_at_data_until_drained(mtad_factory, sink, receiver,
                                                workdir):
    receiver.up(False)
    m = start(mtad_factory, events_cfg(workdir, receiver.url,
                                       max_backlog="2K",
                                       when_full="backpressure"),
              sink.route)
    refused = None
    for i in range(40):
        s = m.smtp()
        s.ehlo("client.test")
        s.mail("alice@x.test")
        s.rcpt("bob@y.test")
        s.putcmd("data")
        code, resp = s.getreply()
        if code == 452:
            refused = resp
            s.quit()
            break
        assert code == 354, (code, resp)
        s.send(make_message(i) + b".\r\n")
        code, resp = s.getreply()
        assert code == 250, (code, resp)
        s.quit()
        time.sleep(0.25)            # the reader publishes the backlog
    assert refused is not None and b"events backlog" in refused, refused
    m.wait_log("new mail gets 452 at DATA")
    receiver.up(True)
    m.wait_log("taking mail again", timeout=30)
    submit(m, "alice@x.test", ["bob@y.test"], make_message(99))


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError("no metric " + name)


def test_drop_oldest_counts_and_logs(mtad_factory, sink, receiver, workdir):
    receiver.up(False)
    mport = free_port()
    m = start(mtad_factory, events_cfg(workdir, receiver.url,
                                       max_backlog="1K"),
              sink.route, extra={"metrics": {"listen": "127.0.0.1:%d" %
                                             mport}})
    for i in range(10):
        submit(m, "alice@x.test", ["bob@y.test"], make_message(i))
    m.wait_log("dropping the oldest records", timeout=20)
    assert wait_for(lambda: metric(mport, "mtad_events_dropped_total") > 0,
                    10)
    assert wait_for(lambda: metric(mport, "mtad_events_failed_total") > 0,
                    10)
    dropped = metric(mport, "mtad_events_dropped_total")
    assert dropped < 20             # the newest records stay
    assert metric(mport, "mtad_events_backlog_bytes") <= 1024
    assert metric(mport, "mtad_events_queued_total") >= 20
    # what is left is sent once the target is back; the backlog empties
    receiver.up(True)
    assert wait_for(lambda: metric(mport, "mtad_events_backlog_bytes") == 0,
                    40)
    assert metric(mport, "mtad_events_oldest_unsent_age_seconds") == 0
    assert metric(mport, "mtad_events_sent_total") == len(receiver.events)
    assert len(receiver.events) + dropped >= 20


def test_bad_events_config_names_its_place(mtad_factory, workdir):
    m = mtad_factory({"events": {"when_full": "sometimes",
                                 "types": ["reception", "weather"],
                                 "http": {"url": "ftp://x"}}})
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    for key in ("events.when_full", "events.types[1]", "events.http.url"):
        line = [ln for ln in r.stderr.splitlines() if key in ln]
        assert line, r.stderr
        assert line[0].split(":")[1].isdigit(), line


REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


@pytest.fixture
def redis(workdir):
    port = free_port()
    d = os.path.join(workdir, "redis")
    os.makedirs(d)
    p = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir", d,
                          "--requirepass", "redispw"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    try:
        assert wait_for(lambda: "PONG" in redis_cmd(port, "PING"), 10), \
            "redis-server did not start"
        yield port
    finally:
        p.terminate()               # also when it never answered
        p.wait(10)


def redis_cmd(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), "-a", "redispw",
                          "--no-auth-warning"] + list(args),
                         capture_output=True, text=True, timeout=10)
    return out.stdout


def test_redis_stream_target(mtad_factory, sink, redis, workdir):
    pw = os.path.join(workdir, "redis.pw")
    with open(pw, "w") as f:
        f.write("redispw\n")
    os.chmod(pw, 0o600)
    m = start(mtad_factory, {"redis": {"address": "127.0.0.1:%d" % redis,
                                       "stream": "mail:ev", "maxlen": 1000,
                                       "password_file": pw}}, sink.route)
    ids = [submit(m, "alice@x.test", ["bob@y.test"], make_message(i))
           for i in range(3)]
    assert wait_for(lambda: redis_cmd(redis, "XLEN", "mail:ev").strip()
                    == "6", 20), redis_cmd(redis, "XLEN", "mail:ev")
    dump = redis_cmd(redis, "XRANGE", "mail:ev", "-", "+")
    for q in ids:
        assert q in dump
    ev = [json.loads(line) for line in dump.splitlines()
          if line.startswith("{")]
    assert {e["type"] for e in ev} == {"reception", "delivery"}


def test_kill_9_master_then_restart_loses_nothing(mtad_factory, sink,
                                                  receiver, workdir):
    receiver.up(False)
    m = start(mtad_factory, events_cfg(workdir, receiver.url), sink.route,
              workers_n=2)
    ids = [submit(m, "alice@x.test", ["bob@y.test"], make_message(i))
           for i in range(10)]
    assert wait_for(lambda: len(sink.messages) == 10, 30)
    olds = workers(m.pid)
    m.proc.send_signal(signal.SIGKILL)
    m.proc.wait(10)
    # its workers follow it (they are told by the kernel); the spool stays
    assert wait_for(lambda: not any(os.path.exists("/proc/%d" % p)
                                    for p in olds), 20)
    receiver.up(True)
    m.start()
    assert wait_for(lambda: count_ids(receiver, "reception") >= set(ids),
                    30), set(ids) - count_ids(receiver, "reception")
    assert wait_for(lambda: count_ids(receiver, "delivery") >= set(ids), 30)


def test_results_name_their_source_and_class(mtad_factory, sink, receiver,
                                             workdir):
    """With an egress source, a result's event names it; a failure's its
    bounce class."""
    sink.defer = {"later@y.test"}
    m = start(mtad_factory, events_cfg(workdir, receiver.url), sink.route,
              extra={"egress": {"sources": [{"name": "s2",
                                             "address": "127.0.0.2",
                                             "ehlo": "out2.test"}]},
                     "delivery": {"retry": ["30s"]}})
    qid = submit(m, "alice@x.test", ["bob@y.test", "later@y.test"],
                 make_message(7))
    assert wait_for(lambda: receiver.of("delivery", qid) and
                    receiver.of("deferral", qid), 20), receiver.events
    d = receiver.of("delivery", qid)[0]
    assert d["source"] == "s2" and "class" not in d, d
    f = receiver.of("deferral", qid)[0]
    assert f["source"] == "s2" and f["class"], f


def test_complete_segment_with_a_cut_last_record_is_sent_and_removed(
        mtad_factory, sink, receiver, workdir):
    """A segment whose writer died mid-record (no writer holds it): its
    whole records are sent, the cut one is skipped and logged, the file is
    removed; the same with whole segments before it (the reader asks each
    complete segment for a newline every tick: it must find the first one,
    not count them all)."""
    receiver.up(False)
    m = start(mtad_factory, events_cfg(workdir, receiver.url), sink.route)
    ev_dir = os.path.join(m.spool, "events")
    assert wait_for(lambda: os.path.isdir(ev_dir), 10)
    m.stop()
    st = os.stat(ev_dir)

    def rec(i):
        return json.dumps({"v": 1, "type": "reception", "time": "x",
                           "unix_ms": 1000 + i, "node": "n",
                           "queue_id": "CUT%013d" % i}).encode() + b"\n"
    names = []
    for k in range(3):
        name = "0000000000001-1-%d.ev" % k
        body = b"".join(rec(10 * k + i) for i in range(2))
        if k == 2:
            body += rec(99)[:20]               # the writer died here
        with open(os.path.join(ev_dir, name), "wb") as f:
            f.write(body)
        os.chown(os.path.join(ev_dir, name), st.st_uid, st.st_gid)
        names.append(name)
    receiver.up(True)
    m.start()
    want = {"CUT%013d" % (10 * k + i) for k in range(3) for i in range(2)}
    assert wait_for(lambda: count_ids(receiver, "reception") >= want, 30), \
        want - count_ids(receiver, "reception")
    m.wait_log("a last record without its end (20 bytes", timeout=10)
    assert "CUT%013d" % 99 not in count_ids(receiver, "reception")
    assert wait_for(lambda: not any(os.path.exists(os.path.join(ev_dir, n))
                                    for n in names), 10), os.listdir(ev_dir)


def test_kill_9_of_the_log_process_loses_no_event(mtad_factory, sink,
                                                  receiver, workdir):
    """The events do not pass through the log process: kill -9 of it while
    mail flows and the target is down loses none of them."""
    receiver.up(False)
    m = start(mtad_factory, events_cfg(workdir, receiver.url), sink.route)
    logd = wait_for(lambda: children_by_comm(m.pid, "mtad: logd"), 10)
    ids = [submit(m, "alice@x.test", ["bob@y.test"], make_message(i))
           for i in range(10)]
    os.kill(logd[0], signal.SIGKILL)
    ids += [submit(m, "alice@x.test", ["bob@y.test"], make_message(50 + i))
            for i in range(10)]
    assert wait_for(lambda: [p for p in children_by_comm(m.pid, "mtad: logd")
                             if p != logd[0]], 20, what="a new logd")
    receiver.up(True)
    want = set(ids)
    assert wait_for(lambda: count_ids(receiver, "reception") >= want, 60), \
        want - count_ids(receiver, "reception")
    assert wait_for(lambda: count_ids(receiver, "delivery") >= want, 30), \
        want - count_ids(receiver, "delivery")
