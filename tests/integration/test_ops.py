"""Operations (issue 13), each against a running mtad: the spool across
restarts and crashes, the load policy, Prometheus metrics, JSON logs and
admin records, the systemd watchdog and STATUS=, and `status --json`.
The Debian package has its own test: tests/deb/test_deb.sh."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from mtadtest import (MTACTL, MTAD, ROOT, Sink, closed_port, free_port, make_message,
                      children_by_comm, proc_status, recv_until_eof, send,
                      workers)

UNIT = os.path.join(ROOT, "packaging", "systemd", "mtad.service")


def wait(pred, what, timeout=20.0, step=0.05):
    """Poll pred until it is true; raise (never pass silently) on timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))


def http_get(port, path="/metrics", method="GET"):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def scrape(port):
    """{sample name + sorted labels: value} and the families, parsed by the
    reference parser (Debian's python3-prometheus-client)."""
    parser = pytest.importorskip("prometheus_client.parser")
    status, headers, text = http_get(port)
    assert status == 200, (status, text)
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
    fams = list(parser.text_string_to_metric_families(text))
    samples = {}
    for f in fams:
        for s in f.samples:
            key = s.name + "".join("{%s=%s}" % kv for kv in sorted(s.labels.items()))
            samples[key] = s.value
    return fams, samples, text


# --- (a) the spool survives restarts and crashes -----------------------------

def unit_keys():
    keys = {}
    with open(UNIT) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                keys.setdefault(k, []).append(v)
    return keys


def test_unit_keeps_the_runtime_directory():
    """The shipped unit must not let systemd delete the RAM spool when the
    unit stops: RuntimeDirectory=mtad with RuntimeDirectoryPreserve=yes,
    and the default spool.dir lies inside it."""
    keys = unit_keys()
    assert keys["RuntimeDirectory"] == ["mtad"]
    assert keys["RuntimeDirectoryPreserve"] == ["yes"]
    with open(os.path.join(ROOT, "packaging", "relay.yaml.example")) as f:
        m = re.search(r"^\s*dir:\s*(\S+)", f.read(), re.M)
    assert m and m.group(1).startswith("/run/mtad/"), m
    assert keys["Restart"] == ["on-failure"]


def test_unit_passes_systemd_analyze_verify(workdir):
    """CI runs systemd-analyze verify on the unit (with @SBINDIR@ pointed at
    the built binaries, which it checks exist).  No output is allowed:
    verify only warns (exit 0) about unknown keys."""
    sa = shutil.which("systemd-analyze")
    if sa is None:
        pytest.skip("systemd-analyze is not installed: unit not verified")
    with open(UNIT) as f:
        text = f.read().replace("@SBINDIR@", os.path.dirname(MTAD))
    path = os.path.join(workdir, "mtad.service")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([sa, "verify", path], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout + r.stderr == "", r.stdout + r.stderr
    assert "WatchdogSec=30s" in text


@pytest.mark.parametrize("how", ["stop", "master_crash"])
def test_queue_survives_restart(mtad_factory, how):
    """A deferred message is still delivered after a graceful stop and
    start (what systemctl restart does, the directory being preserved)
    and after kill -9 of the master (workers follow it; Restart= starts a
    new master on the same spool)."""
    port, mport = closed_port(), free_port()
    m = mtad_factory({"routes": {"default": "smtp:[127.0.0.1]:%d" % port},
                      "delivery": {"retry": ["1s"]},
                      "metrics": {"listen": "127.0.0.1:%d" % mport}})
    m.start()
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    m.wait_log("%s: to=<b@example.net>" % qid)     # deferred, connection refused
    r = m.ctl("queue", "--json", check=True)
    size = json.loads(r.stdout)["messages"][0]["size"]
    kids = m.children()
    if how == "stop":
        m.stop()
    else:
        os.kill(m.pid, signal.SIGKILL)
        m.proc.wait(10)
        wait(lambda: not any(os.path.exists("/proc/%d" % k) for k in kids),
             "the workers to follow the master", 15)
    assert qid in m.queue_ids()
    m.start()
    # the index a clean stop saved, or (after a crash) the files read
    # again, give the queue gauges the same message
    wait(lambda: scrape(mport)[1]["mtad_queue_bytes"] == size and
         scrape(mport)[1]["mtad_queue_oldest_age_seconds"] > 0,
         "the queue gauges after the restart")
    s = Sink(port=port).start()
    try:
        msgs = s.wait_for(1, timeout=30)
        assert b"serial 1" in msgs[0].data
        wait(lambda: qid not in m.queue_ids(), "the queue file to go")
        wait(lambda: scrape(mport)[1]["mtad_queue_bytes"] == 0 and
             scrape(mport)[1]["mtad_queue_oldest_age_seconds"] == 0,
             "the queue gauges to empty")
    finally:
        s.stop()


# --- (b) the load policy -----------------------------------------------------

def load_mtad(mtad_factory, workdir, sink_route, **extra):
    loadf = os.path.join(workdir, "loadavg")
    with open(loadf, "w") as f:
        f.write("0.10 0.10 0.10 1/100 1\n")
    mport = free_port()
    cfg = {"limits": {"load": {"queue_only": 4, "refuse": 8, "file": loadf}},
           "routes": {"default": sink_route},
           "metrics": {"listen": "127.0.0.1:%d" % mport}}
    cfg.update(extra)
    m = mtad_factory(cfg).start()
    m.mport = mport
    m.loadf = loadf
    return m


def set_load(m, value):
    tmp = m.loadf + ".new"
    with open(tmp, "w") as f:
        f.write("%s 1.00 1.00 1/100 1\n" % value)
    os.rename(tmp, m.loadf)


def test_load_queue_only_holds_deliveries(mtad_factory, workdir, sink):
    m = load_mtad(mtad_factory, workdir, sink.route)
    set_load(m, "5.00")
    m.wait_log("load 5.00: holding deliveries (limits.load.queue_only 4.00)")
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    # accepted, and waiting in its worker's schedule, not delivered
    wait(lambda: scrape(m.mport)[1].get('mtad_queue_messages{state=queued}') == 1,
         "the message to show as queued")
    assert sink.received() == []
    _, samples, _ = scrape(m.mport)
    assert samples["mtad_throttle{mode=queue_only}"] == 1
    assert samples["mtad_throttle{mode=refuse}"] == 0
    assert samples["mtad_recipient_deliveries_total{status=sent}"] == 0
    set_load(m, "1.50")
    m.wait_log("load 1.50: delivering again (limits.load.queue_only 4.00)")
    msgs = sink.wait_for(1, timeout=20)
    assert b"serial 1" in msgs[0].data
    wait(lambda: qid not in m.queue_ids(), "the message to leave the queue")


def test_load_refuse_answers_421(mtad_factory, workdir, sink):
    m = load_mtad(mtad_factory, workdir, sink.route)
    set_load(m, "9.25")
    m.wait_log("load 9.25: holding deliveries (limits.load.queue_only 4.00); "
               "refusing new connections (limits.load.refuse 8.00)")
    with socket.create_connection(("127.0.0.1", m.port), timeout=10) as c:
        c.settimeout(10)
        assert c.recv(512).startswith(b"421 4.3.2 ")
    m.wait_log("refused [127.0.0.1]:")
    _, samples, _ = scrape(m.mport)
    assert samples["mtad_rejections_total{reason=overload}"] == 1
    assert samples["mtad_throttle{mode=refuse}"] == 1
    st = json.loads(m.ctl("status", "--json", check=True).stdout)
    assert st["throttle"] == {"queue_only": True, "refuse": True}
    assert st["load"] == 9.25
    set_load(m, "0.50")
    m.wait_log("load 0.50: delivering again (limits.load.queue_only 4.00); "
               "accepting connections again (limits.load.refuse 8.00)")
    send(m, "a@example.org", ["b@example.net"], make_message(2))
    sink.wait_for(1, timeout=20)


def test_load_file_errors_are_logged_once(mtad_factory, workdir, sink):
    m = load_mtad(mtad_factory, workdir, sink.route)
    os.unlink(m.loadf)
    m.wait_log("limits.load.file: cannot read a load average from %s" % m.loadf)
    set_load(m, "0.20")
    m.wait_log("limits.load.file: %s readable again" % m.loadf)
    assert m.log_text().count("cannot read a load average") == 1


def test_load_config_errors(mtad_factory):
    m = mtad_factory({"limits": {"load": {"refuse": "high"}}})
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert re.search(r"relay\.yaml:\d+:\d+: limits\.load\.refuse: expected a "
                     r"load average like 8 or 12\.5", r.stderr), r.stderr


# --- (c) Prometheus metrics --------------------------------------------------

def raw_session(port, lines):
    """Send lines one by one and return every reply line."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.settimeout(10)
        f = c.makefile("rb")
        out.append(f.readline())
        for line in lines:
            c.sendall(line + b"\r\n")
            r = f.readline()
            while r[3:4] == b"-":
                r = f.readline()
            out.append(r)
    return out


def test_metrics_exposition(mtad_factory, sink):
    mport = free_port()
    m = mtad_factory({
        "relay": {"allow_networks": ["10.0.0.0/8"]},   # 127.0.0.1 may not relay
        "routes": {"static": {"example.net": sink.route}},
        "limits": {"max_message_size": "2K"},
        "metrics": {"listen": "127.0.0.1:%d" % mport}}).start()
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    sink.wait_for(1)
    r = raw_session(m.port, [b"EHLO c.test", b"MAIL FROM:<a@example.org>",
                             b"RCPT TO:<x@elsewhere.test>", b"QUIT"])
    assert r[3].startswith(b"554 5.7.1"), r
    r = raw_session(m.port, [b"EHLO c.test", b"MAIL FROM:<a@example.org> SIZE=99999",
                             b"QUIT"])
    assert r[2].startswith(b"552 5.3.4"), r
    wait(lambda: qid not in m.queue_ids(), "delivery to finish")

    def ready():
        s = scrape(mport)[1]
        return s["mtad_recipient_deliveries_total{status=sent}"] == 1 and \
            s["mtad_connections_total"] == 4 and s["mtad_sessions"] == 0 \
            and s["mtad_workers_ready"] == 2
    # 4: wait_ready()'s probe, the message, the two raw sessions; the
    # listener answers before every worker is ready (one may still be
    # loading its CA bundle, slow under ASan)
    wait(ready, "the counters")
    fams, s, text = scrape(mport)
    types = {f.name: f.type for f in fams}
    assert types["mtad_messages_received"] == "counter"
    assert types["mtad_delivery_latency_seconds"] == "histogram"
    assert types["mtad_queue_messages"] == "gauge"
    assert s["mtad_messages_received_total"] == 1
    assert s["mtad_received_bytes_total"] > 100
    assert s["mtad_rejections_total{reason=relay_denied}"] == 1
    assert s["mtad_rejections_total{reason=too_large}"] == 1
    assert s["mtad_rejections_total{reason=overload}"] == 0
    assert s["mtad_recipient_deliveries_total{status=deferred}"] == 0
    assert s["mtad_workers_ready"] == 2 and s["mtad_workers_running"] == 2
    assert s["mtad_log_process_up"] == 1
    assert s["mtad_queue_files"] == 0
    # one delivered recipient in the histogram, cumulative buckets
    assert s["mtad_delivery_latency_seconds_count"] == 1
    assert s["mtad_delivery_latency_seconds_bucket{le=+Inf}"] == 1
    buckets = sorted((float(k.split("le=")[1].rstrip("}")), v)
                     for k, v in s.items()
                     if k.startswith("mtad_delivery_latency_seconds_bucket"))
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert 0 <= s["mtad_delivery_latency_seconds_sum"] < 60
    assert abs(s["mtad_start_time_seconds"] - time.time()) < 3600
    # every family has HELP text and is documented in the operations
    # guide's metrics table or in relay.yaml(5)'s METRICS section
    with open(os.path.join(ROOT, "docs", "OPERATIONS.md")) as f:
        readme = f.read()
    with open(os.path.join(ROOT, "docs", "relay.yaml.5")) as f:
        man = f.read().replace("\\-", "-").replace("\\_", "_")
    for f in fams:
        assert f.documentation, f.name
        name = f.name + ("_total" if f.type == "counter" else "")
        assert "`%s`" % name in readme or "\n.B %s\n" % name in man, \
            name + " is not documented in docs/OPERATIONS.md or relay.yaml(5)"
    # counters of a worker that dies are kept
    workers = [p for p in m.children()
               if "worker" in open("/proc/%d/cmdline" % p).read()]
    assert len(workers) == 2, workers
    os.kill(workers[0], signal.SIGKILL)
    m.wait_log("(pid %d) exited on signal 9" % workers[0])
    wait(lambda: scrape(mport)[1]["mtad_workers_ready"] == 2, "the respawn")
    s2 = scrape(mport)[1]
    assert s2["mtad_messages_received_total"] == 1
    assert s2["mtad_rejections_total{reason=relay_denied}"] == 1
    assert s2["mtad_delivery_latency_seconds_count"] == 1


def test_queue_gauge_follows_mtactl_hold_and_delete(mtad_factory):
    """A message held or deleted by mtactl leaves the deferred gauge at the
    next second's publication, not when its retry time comes up (1h)."""
    mport = free_port()
    m = mtad_factory({
        "routes": {"default": "smtp:[127.0.0.1]:%d" % closed_port()},
        "delivery": {"retry": ["1h"], "connect_timeout": "2s"},
        "metrics": {"listen": "127.0.0.1:%d" % mport}}).start()
    q1 = send(m, "a@example.org", ["b@example.net"], make_message(1))
    q2 = send(m, "a@example.org", ["c@example.net"], make_message(2))

    def gauge(state):
        return scrape(mport)[1].get("mtad_queue_messages{state=%s}" % state)
    wait(lambda: gauge("deferred") == 2, "both messages to be deferred")
    # the queue's bytes, held count and oldest age, as mtactl sees them;
    # the version from VERSION, the one source the Makefile reads
    r = m.ctl("queue", "--json", check=True)
    q = {e["id"]: e for e in json.loads(r.stdout)["messages"]}
    sizes = {i: e["size"] for i, e in q.items()}
    assert set(sizes) == {q1, q2} and min(sizes.values()) > 100
    s = scrape(mport)[1]
    assert s["mtad_queue_bytes"] == sizes[q1] + sizes[q2], s
    assert s["mtad_queue_held_messages"] == 0
    age = time.time() - q[q1]["arrival_ms"] / 1000
    assert abs(s["mtad_queue_oldest_age_seconds"] - age) < 2, (s, age)
    with open(os.path.join(ROOT, "VERSION")) as f:
        version = f.read().strip()
    assert s["mtad_build_info{version=%s}" % version] == 1
    m.ctl("hold", q1, check=True)
    wait(lambda: gauge("deferred") == 1 and gauge("other") == 1,
         "the held message to count as other")
    m.ctl("delete", q2, check=True)
    wait(lambda: gauge("deferred") == 0 and gauge("other") == 1,
         "the deleted message to leave the gauge")
    assert m.queue_ids() == [q1]
    wait(lambda: scrape(mport)[1]["mtad_queue_bytes"] == sizes[q1] and
         scrape(mport)[1]["mtad_queue_held_messages"] == 1,
         "the queue's bytes and held count to follow")
    # released, it is scheduled again (now) and tried: deferred once more
    m.ctl("release", q1, check=True)
    wait(lambda: gauge("deferred") == 1 and gauge("other") == 0,
         "the released message to be deferred again")
    assert scrape(mport)[1]["mtad_queue_held_messages"] == 0


def test_metrics_http_answers(mtad_factory):
    mport = free_port()
    m = mtad_factory({"metrics": {"listen": "127.0.0.1:%d" % mport}}).start()
    assert http_get(mport, "/nothing")[0] == 404
    assert http_get(mport, "/metrics", "POST")[0] == 405
    st, h, body = http_get(mport, "/metrics", "HEAD")
    assert st == 200 and body == "" and int(h["Content-Length"]) > 1000
    # a client that sends nothing does not block the master
    idle = socket.create_connection(("127.0.0.1", mport), timeout=10)
    try:
        assert http_get(mport)[0] == 200
        assert m.ctl("status", check=True).returncode == 0
    finally:
        idle.close()


def http_raw(port, request):
    """Send request bytes as they are; the status code of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(request)
        c.shutdown(socket.SHUT_WR)
        got = recv_until_eof(c)    # one answer, then mtad closes
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", got)
    assert m, got[:200]
    return int(m.group(1))


def test_metrics_request_line_only(mtad_factory):
    """Only the request line is read (master/metrics_req.c): a method
    without a path is a bad request, whatever follows the empty line in
    the same read; a control byte in the line (a NUL, which once hid the
    end of the request) is answered 400 at once."""
    mport = free_port()
    mtad_factory({"metrics": {"listen": "127.0.0.1:%d" % mport}}).start()
    assert http_raw(mport, b"GET\r\n\r\n/metrics HTTP/1.1\r\n\r\n") == 400
    assert http_raw(mport, b"GET\r\n/metrics\r\n\r\n") == 400
    assert http_raw(mport, b"GET /metrics\x00 HTTP/1.1\r\n\r\n") == 400
    assert http_raw(mport, b"GET\t/metrics HTTP/1.0\n\n") == 200
    assert http_raw(mport, b"GET /metrics?x=1 HTTP/1.1\r\n\r\n") == 200


def slow_client(port, source):
    """A client from source that sends half a request line and waits."""
    c = socket.create_connection(("127.0.0.1", port), timeout=10,
                                 source_address=(source, 0))
    c.sendall(b"GET /met")
    return c


def refused(c):
    """True when mtad closed c without a byte of answer."""
    c.settimeout(10)
    try:
        return c.recv(100) == b""
    except ConnectionResetError:
        return True


def test_metrics_slow_clients_of_one_address_leave_room(mtad_factory):
    """20 slow clients from 127.0.0.2 (more than the 16 the master
    serves at once) take only metrics.max_connections_per_ip slots: a
    scrape from 127.0.0.1 gets its answer while they hang; before the
    limit no scrape did."""
    mport = free_port()
    m = mtad_factory({"metrics": {"listen": "127.0.0.1:%d" % mport,
                                  "max_connections_per_ip": 3,
                                  "header_timeout": "20s"}}).start()
    slow = [slow_client(mport, "127.0.0.2") for _ in range(20)]
    try:
        # the 4th and later are closed at accept, the first 3 are held
        assert all(refused(c) for c in slow[3:])
        assert http_get(mport)[0] == 200
        for c in slow[:3]:
            c.settimeout(0.2)
            with pytest.raises(socket.timeout):
                c.recv(100)         # still open: a limit, not a timeout
    finally:
        for c in slow:
            c.close()
    assert m.ctl("status", check=True).returncode == 0


def test_metrics_slow_clients_of_a_few_addresses_leave_room(mtad_factory):
    """16 slow clients from four addresses of 127.0.0.0/8 (each within
    max_connections_per_ip) fill every slot: a scrape from a fifth address
    takes the slot of the oldest client of an address holding the most,
    and gets its answer; before, it was closed at accept until a slot
    timed out, and the slow ones took it back at once."""
    mport = free_port()
    mtad_factory({"metrics": {"listen": "127.0.0.1:%d" % mport,
                              "max_connections_per_ip": 4,
                              "header_timeout": "20s"}}).start()
    slow = [slow_client(mport, "127.0.0.%d" % (2 + k // 4))
            for k in range(16)]
    try:
        # all 16 are held (the master accepted them: a 17th from one of
        # these addresses is over its limit and closed)
        extra = slow_client(mport, "127.0.0.2")
        assert refused(extra)
        extra.close()
        assert http_get(mport)[0] == 200
        assert refused(slow[0])         # the oldest of 127.0.0.2's
        for c in slow[1:]:
            c.settimeout(0.05)
            with pytest.raises(socket.timeout):
                c.recv(100)
    finally:
        for c in slow:
            c.close()


def test_metrics_allow_networks_and_header_timeout(mtad_factory):
    """A client outside metrics.allow_networks is closed unanswered; a
    trickler that does not finish its request within
    metrics.header_timeout is closed; listening beyond loopback is
    warned about at start."""
    mport = free_port()
    m = mtad_factory({"metrics": {"listen": "0.0.0.0:%d" % mport,
                                  "allow_networks": ["127.0.0.1/32"],
                                  "header_timeout": "1s"}}).start()
    # at start the master still writes to stderr (the journal)
    assert "warning: metrics.listen 0.0.0.0:%d is reachable beyond " \
        "loopback" % mport in m.stderr_text()
    outsider = socket.create_connection(("127.0.0.1", mport), timeout=10,
                                        source_address=("127.0.0.3", 0))
    outsider.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    assert refused(outsider)
    outsider.close()
    assert http_get(mport)[0] == 200
    t0 = time.monotonic()
    trickler = slow_client(mport, "127.0.0.1")
    try:
        trickler.settimeout(0.3)
        closed = False
        while not closed and time.monotonic() - t0 < 8:
            try:
                trickler.sendall(b"r")      # a byte now and then
                closed = trickler.recv(100) == b""
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
        assert closed, "the trickler was not closed"
        # 1 s deadline, checked on the master's 1 s tick
        assert time.monotonic() - t0 < 3.5
    finally:
        trickler.close()


def test_metrics_off_by_default_and_bind_errors(mtad_factory, workdir):
    m = mtad_factory().start()
    assert "metrics on http" not in m.log_text() + m.stderr_text()
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        m2 = mtad_factory({"metrics": {"listen": "127.0.0.1:%d" %
                                       busy.getsockname()[1]}},
                          subdir="second")
        m2.start(wait=False)
        assert m2.proc.wait(15) != 0
        assert "mtad: metrics.listen: 127.0.0.1:%d: Address already in use" % \
            busy.getsockname()[1] in m2.stderr_text()
    finally:
        busy.close()


# --- (d) JSON logs and admin records -----------------------------------------

JSON_BASE = ("ts", "level", "proc", "pid", "event", "msg")


def json_lines(m):
    with open(m.log, "rb") as f:
        raw = f.read()
    recs = []
    for n, line in enumerate(raw.split(b"\n")[:-1], 1):
        rec = json.loads(line.decode("utf-8"))  # every line, strictly
        for k in JSON_BASE:
            assert k in rec, (n, k, rec)
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", rec["ts"])
        assert rec["level"] in ("err", "warn", "notice", "info", "debug")
        recs.append(rec)
    assert raw.endswith(b"\n")
    return recs


def test_json_log_every_line_parses(mtad_factory, sink, workdir):
    port = closed_port()
    m = mtad_factory({
        "log": {"format": "json"},
        "relay": {"allow_networks": ["10.0.0.0/8"]},
        "routes": {"static": {"example.net": sink.route,
                              "slow.test": "smtp:[127.0.0.1]:%d" % port}},
        "delivery": {"retry": ["1h"]}}).start()
    sent = send(m, "a@example.org", ["b@example.net"], make_message(1))
    sink.wait_for(1)
    held = send(m, "a@example.org", ["c@slow.test"], make_message(2))
    m.wait_log(held + ": to=<c@slow.test>")
    r = raw_session(m.port, [b"EHLO c.test", b"MAIL FROM:<a@example.org>",
                             b"RCPT TO:<x@elsewhere.test>", b"QUIT"])
    assert r[3].startswith(b"554"), r
    # text from the network with quotes, backslashes, control characters
    # and non-ASCII: a next hop's reply (bytes that are not UTF-8 are in
    # the unit test, tests/unit/test_logfmt.c)
    sink.fail_first = 1
    sink.fail_code = '451 4.3.0 "odd" \\ reply \x01\x7f caf\u00e9'
    odd = send(m, "a@example.org", ["e@example.net"], make_message(4))
    m.wait_log('"queue_id":"%s","from":"a@example.org","to":"e@example.net"'
               % odd)
    m.ctl("kick", odd, check=True)     # delivery.retry is 1h here
    sink.wait_for(2)
    # admin actions
    m.ctl("hold", held, check=True)
    m.ctl("release", held, check=True)
    m.ctl("route", "add", "other.test", "discard", check=True)
    m.ctl("route", "del", "other.test", check=True)
    m.ctl("bounce", held, check=True)
    third = send(m, "a@example.org", ["d@slow.test"], make_message(3))
    m.wait_log(third + ": to=<d@slow.test>")
    m.ctl("delete", third, check=True)
    m.ctl("reload", check=True)
    m.wait_log('"action":"delete"')
    m.ctl("stop", check=True)
    m.proc.wait(15)
    recs = json_lines(m)
    by = {}
    for r in recs:
        by.setdefault(r["event"], []).append(r)
    d = [r for r in by["delivery"] if r["queue_id"] == sent][0]
    assert d["status"] == "sent" and d["to"] == "b@example.net"
    assert d["from"] == "a@example.org" and d["dsn"] == "2.0.0"
    assert d["relay"].endswith(sink.route.split(":", 1)[1].strip("[]").split("]")[0]) \
        or "127.0.0.1" in d["relay"]
    assert isinstance(d["delay"], float) and d["proc"].startswith("worker ")
    rcv = [r for r in by["received"] if r["queue_id"] == sent][0]
    assert rcv["from"] == "a@example.org" and rcv["nrcpt"] == 1
    assert rcv["client"] == "127.0.0.1" and rcv["size"] > 0
    rej = [r for r in by["reject"] if r.get("reason") == "relay_denied"][0]
    assert rej["dsn"] == "5.7.1" and rej["to"] == "x@elsewhere.test"
    assert rej["helo"] == "c.test", rej
    oddr = [r for r in by["delivery"] if r["queue_id"] == odd]
    assert oddr[0]["status"] == "deferred" and oddr[0]["dsn"] == "4.3.0"
    assert "caf\u00e9" in oddr[0]["reply"] and '"odd"' in oddr[0]["reply"], oddr
    assert oddr[-1]["status"] == "sent", oddr
    assert by["connect"] and by["disconnect"]
    uid = os.geteuid()
    admin = [(r["action"], r.get("args", ""), r["uid"], r["via"])
             for r in by["admin"]]
    for action in ("hold", "release", "route_add", "route_del", "bounce",
                   "delete", "reload", "stop"):
        assert [a for a in admin if a[0] == action and a[2] == uid], \
            (action, admin)
    assert ("hold", "%s (on hold)" % held, uid, "mtactl") in admin
    assert ("route_add", "other.test discard", uid, "mtactl") in admin
    bnc = [r for r in by["bounce"] if r["queue_id"] == held]
    assert bnc and bnc[0]["bounce_id"]


def worker_log_socket(pid):
    """A copy (pidfd_getfd) of worker pid's end of the log socketpair:
    what code running inside a compromised worker would send on."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    found = []
    try:
        for name in os.listdir("/proc/%d/fd" % pid):
            try:
                if not os.readlink("/proc/%d/fd/%s" % (pid, name)).startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = libc.syscall(438, pidfd, int(name), 0)    # pidfd_getfd
            assert fd >= 0, os.strerror(ctypes.get_errno())
            s = socket.socket(fileno=fd)
            if s.family == socket.AF_UNIX and s.type == socket.SOCK_DGRAM:
                found.append(s)
            else:
                s.close()
    finally:
        os.close(pidfd)
    assert len(found) == 1, found
    return found[0]


def as_user(uid, gid, act):
    """Run act(its pid) in a child process running as uid:gid (a worker's
    ids, without its privileges); the child's pid, once it succeeded."""
    child = os.fork()
    if child == 0:
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            act(os.getpid())
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(child, 0)
    assert os.WEXITSTATUS(status) == 0
    return child


def send_as_user(sock, uid, gid, make):
    """Send make(its pid) on sock as uid:gid; the sender's pid."""
    return as_user(uid, gid, lambda pid: sock.send(make(pid)))


def worker_ids(w):
    """Worker w's real uid and gid, once it dropped root."""
    def ids():
        st = proc_status(w)
        uid, gid = int(st["Uid"].split()[0]), int(st["Gid"].split()[0])
        return (uid, gid) if uid != 0 else None
    return wait(ids, "the worker to drop its privileges")


@pytest.mark.skipif(os.geteuid() != 0, reason="pidfd_getfd on a worker "
                    "that dropped to the mtad user needs root")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_worker_cannot_forge_the_masters_records(mtad_factory, fmt):
    """Code running with a worker's uid, on a worker's log socket, writes
    an "admin:" record as the master, a record with the worker's own pid,
    and (JSON) one that names the master in a second "proc" key: none of
    them is written; the log says which pid and uid sent them (the
    kernel's SCM_CREDENTIALS).  A record under its own pid still is
    (that is what a worker can write).  Before, all were written."""
    m = mtad_factory({"log": {"format": fmt}}).start()
    w = workers(m.pid)[0]
    uid, gid = worker_ids(w)
    sock = worker_log_socket(w)
    ts = "2026-01-01T00:00:00.000Z"
    if fmt == "text":
        forged = ["%s mtad[%d]: master: admin: uid=0 pid=1 via=mtactl: "
                  "stop FORGED-1" % (ts, m.pid),
                  "%s mtad[%d]: worker 0: FORGED-2" % (ts, w),
                  "%s mtad[%%d]: master: FORGED-3" % ts]
        own = "%s mtad[%%d]: worker 0: OWN-LINE" % ts
    else:
        rec = ('{"ts":"%s","level":"notice","proc":"%s","pid":%s,'
               '"event":"admin","uid":0,"action":"stop","msg":"%s"%s}')
        forged = [rec % (ts, "master", m.pid, "FORGED-1", ""),
                  rec % (ts, "worker 0", w, "FORGED-2", ""),
                  rec % (ts, "worker 0", "%d", "FORGED-3",
                         ',"proc":"master"')]
        own = rec % (ts, "worker 0", "%d", "OWN-LINE", "")
    # "%d": the sender's own pid, known in the child
    child = send_as_user(sock, uid, gid, lambda pid: (
        "\n".join(x.replace("%d", str(pid)) for x in forged + [own]) +
        "\n").encode())
    sock.close()
    note = "refused 3 log records that pid %d (uid %d) sent as another " \
        "process's" % (child, uid)
    m.wait_log(note)
    m.wait_log("OWN-LINE")
    text = m.log_text()
    assert "FORGED" not in text, text
    if fmt == "json":
        json_lines(m)               # the log is still one object per line


@pytest.mark.skipif(os.geteuid() != 0, reason="pidfd_getfd on a worker "
                    "that dropped to the mtad user needs root")
def test_a_worker_filling_the_log_queue_drops_no_master_record(
        mtad_factory):
    """Code with a worker's uid fills the workers' log socket (the log
    process stopped meanwhile, so nothing drains it) until the kernel
    says EAGAIN: the master's audit record of an action taken then is
    still written, on the master's own socketpair.  Before, the master
    sent on the same full socket and the record was dropped."""
    m = mtad_factory().start()
    w = workers(m.pid)[0]
    logd, = children_by_comm(m.pid, "mtad: logd")
    uid, gid = worker_ids(w)
    sock = worker_log_socket(w)

    def fill(_):
        sock.setblocking(False)
        try:
            for _ in range(20000):
                sock.send(b"x" * 16384)
        except BlockingIOError:
            return
        raise AssertionError("the log socket never filled")
    os.kill(logd, signal.SIGSTOP)
    try:
        as_user(uid, gid, fill)
        m.ctl("route", "add", "full.test", "discard", check=True)
    finally:
        os.kill(logd, signal.SIGCONT)
        sock.close()
    m.wait_log("via=mtactl: route_add full.test discard")


def test_admin_actions_in_text_log(mtad_factory):
    port = closed_port()
    m = mtad_factory({"routes": {"default": "smtp:[127.0.0.1]:%d" % port},
                      "delivery": {"retry": ["1h"]}}).start()
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    m.wait_log(qid + ": to=<b@example.net>")
    m.ctl("hold", qid, check=True)
    assert qid in m.ctl("queue", check=True).stdout     # read-only
    m.ctl("route", "add", "x.test", "discard", check=True)
    os.kill(m.pid, signal.SIGHUP)
    m.wait_log("reload done")
    uid = os.geteuid()
    m.wait_log("admin: uid=%d pid=" % uid)
    text = m.wait_log("via=mtactl: route_add x.test discard")
    assert re.search(r"master: admin: uid=%d pid=\d+ via=mtactl: hold %s "
                     r"\(on hold\)" % (uid, qid), text), text
    assert re.search(r"master: admin: uid=%d pid=%d via=signal: reload SIGHUP"
                     % (uid, os.getpid()), text), text
    # one record for the hold (not a second one for the workers' look at
    # it), none for the listing; the records came in order, so both would
    # be in by the route's
    assert len(re.findall(r"via=mtactl: \w+ %s" % qid, text)) == 1, text
    assert "queue-stream" not in text, text


# --- (e) watchdog and STATUS= ------------------------------------------------

class Notify:
    """A stand-in for systemd's notification socket."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        os.chmod(path, 0o777)
        self.sock.setblocking(False)
        self.got = []

    def drain(self):
        while True:
            try:
                self.got.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return self.got

    def wait(self, pred, what, timeout=20.0):
        def probe():
            self.drain()
            return [g for g in self.got if pred(g)]
        return wait(probe, what, timeout)


def test_watchdog_only_while_children_answer(mtad_factory, workdir):
    m = mtad_factory()
    n = Notify(os.path.join(workdir, "notify.sock"))
    env = dict(os.environ, NOTIFY_SOCKET=os.path.join(workdir, "notify.sock"),
               WATCHDOG_USEC="3000000")
    m.logf = open(os.path.join(m.dir, "stderr.log"), "ab")
    m.proc = subprocess.Popen([MTAD, "-f", "-c", m.cfg_path], env=env,
                              stdout=m.logf, stderr=m.logf, cwd=m.dir)
    m.wait_ready()
    n.wait(lambda g: g == "READY=1", "READY=1")
    n.wait(lambda g: g.startswith("STATUS=serving: generation 1, 2/2 workers"),
           "STATUS=")
    n.got.clear()
    n.wait(lambda g: g == "WATCHDOG=1", "WATCHDOG=1")
    worker = [p for p in m.children()
              if "worker" in open("/proc/%d/cmdline" % p).read()][0]
    os.kill(worker, signal.SIGSTOP)
    try:
        m.wait_log("watchdog: worker", timeout=30)
        # everything sent before the failure was logged is queued now
        n.got.clear()
        n.drain()
        n.got.clear()
        time.sleep(2.5)                 # at least two ticks of the master
        assert "WATCHDOG=1" not in n.drain()
    finally:
        os.kill(worker, signal.SIGCONT)
    m.wait_log("watchdog: every process answers again")
    n.wait(lambda g: g == "WATCHDOG=1", "WATCHDOG=1 again")
    # a stopped log process also stops the notifications
    logd = [p for p in m.children()
            if "log" in open("/proc/%d/cmdline" % p).read()]
    assert len(logd) == 1, m.children()
    os.kill(logd[0], signal.SIGSTOP)
    try:
        def missed():
            n.got.clear()
            n.drain()
            n.got.clear()
            time.sleep(1.2)
            return "WATCHDOG=1" not in n.drain()
        wait(missed, "the watchdog to notice the log process", 30, 0)
    finally:
        os.kill(logd[0], signal.SIGCONT)
    n.wait(lambda g: g == "WATCHDOG=1", "WATCHDOG=1 after the log process")
    m.wait_log("the log process (pid %d) has not answered" % logd[0])


def test_sigusr1_reopen_with_logrotate_snippet(mtad_factory):
    """The shipped logrotate snippet rotates log.file by rename and
    SIGUSR1 (postrotate); after it, records go to the new file."""
    with open(os.path.join(ROOT, "packaging", "logrotate", "mtad")) as f:
        snippet = f.read()
    assert "kill -USR1" in snippet and "nocopytruncate" in snippet
    m = mtad_factory().start()
    os.rename(m.log, m.log + ".1")
    os.kill(m.pid, signal.SIGUSR1)
    m.wait_log("log file %s (re)opened" % m.log)
    send(m, "a@example.org", ["b@example.net"], make_message(1))
    m.wait_log("from=<a@example.org>")


# --- (g) status --json -------------------------------------------------------

def test_status_json(mtad_factory, sink):
    m = mtad_factory({"routes": {"default": sink.route}}).start()
    for i in range(3):
        send(m, "a@example.org", ["b@example.net"], make_message(i))
    sink.wait_for(3)

    def counted():
        # the listener answers before every worker is ready: one may still
        # be "starting" after the first one delivered all three
        st = json.loads(m.ctl("status", "--json", check=True).stdout)
        return st if st["totals"]["recipients_sent"] == 3 and all(
            w["state"] == "running" for w in st["workers"]) else None
    st = wait(counted, "three deliveries and both workers running in the "
              "status")
    assert st["pid"] == m.pid and st["generation"] == 1
    assert st["version"] == VERSION
    assert st["workers_configured"] == 2 and len(st["workers"]) == 2
    assert {w["state"] for w in st["workers"]} == {"running"}
    assert sum(w["messages_in"] for w in st["workers"]) == 3
    assert st["totals"]["messages_in"] == 3 and st["queue"] == 0
    assert st["logd"]["state"] == "running"
    assert st["throttle"] == {"queue_only": False, "refuse": False}
    assert set(st["rate"]) == {"messages_in_per_s", "recipients_sent_per_s",
                               "window_s"}
    # text status still works, and usage errors say so
    text = m.ctl("status", check=True).stdout
    assert "generation: 1" in text
    assert text.splitlines()[0] == "version: %s" % VERSION
    r = m.ctl("status", "--yaml")
    assert r.returncode == 2 and "usage: mtactl status [--json]" in r.stderr
    r = m.ctl("status", "--json", "x")
    assert r.returncode == 2 and "wrong number of arguments" in r.stderr


# The one version, from the VERSION file at the top of the tree
VERSION = open(os.path.join(os.path.dirname(__file__), "..", "..",
                            "VERSION")).read().strip()


def test_every_binary_says_its_version():
    build = os.path.dirname(MTACTL)
    for prog in ("mtad", "mtactl", "mtad-sendmail"):
        r = subprocess.run([os.path.join(build, prog), "--version"],
                           capture_output=True, text=True, timeout=10)
        assert (r.returncode, r.stdout, r.stderr) == \
            (0, "%s %s\n" % (prog, VERSION), ""), prog


def test_help_and_dispatch_come_from_one_table(mtad_factory):
    """Every command mtactl --help lists has its help and is dispatched
    (never "unknown command"); an unknown one is refused by both."""
    m = mtad_factory()
    r = subprocess.run([MTACTL, "--help"], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0 and r.stdout.startswith("usage: mtactl ")
    assert "--version" in r.stdout
    listed = re.findall(r"^  ([a-z]+)\b", r.stdout.split("commands:\n")[1],
                        re.M)
    assert {"status", "reload", "stop", "drain", "check", "kick", "queue",
            "show", "delete", "hold", "release", "flush", "bounce", "trace",
            "route", "tls", "dkim", "user", "help"} <= set(listed), listed
    assert all(len(l) <= 80 for l in r.stdout.splitlines()), r.stdout
    for verb in listed:
        h = m.ctl("help", verb)
        assert h.returncode == 0 and h.stdout and h.stderr == "", verb
        assert "usage: mtactl %s" % verb in h.stdout or \
            "mtactl %s " % verb in h.stdout, (verb, h.stdout)
        # the verb is dispatched: whatever it says, it is not unknown
        d = m.ctl(verb, "--no-such-option", "x", "y", "z", "w", "v")
        assert "unknown command '%s'" % verb not in d.stderr, (verb, d.stderr)
    assert "needs: a running mtad" in m.ctl("help", "reload").stdout
    assert "needs: root or the user mtad runs as" in \
        m.ctl("help", "hold").stdout
    for args in (("help", "nosuch"), ("nosuch",)):
        r = m.ctl(*args)
        assert r.returncode == 2 and "unknown command 'nosuch'" in r.stderr
