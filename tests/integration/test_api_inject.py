"""Injection over HTTP: POST /v1/messages through the API process and the
workers' injection socket (inject.sock beside the control socket).

The worker side is driven first with raw unix sockets (mode and owner of
the socket, the PROXY v1 header it requires, the trusted relay as "api");
then the API with http.client and curl: bytes delivered exactly (dot
lines, CRLF, LF made CRLF, base64), limits (size, recipients), a reject
and a defer route, DSN parameters in the spool, the HTTP client's address
in the events, errors as JSON, the connection pool, and kill -9 of the
worker while it holds a message (never a 201 for a message not spooled).
"""
import base64
import hashlib
import http.client
import json
import os
import pwd
import shutil
import socket
import subprocess
import time

import pytest

from fakemilter import FakeMilter
from mtadtest import (Mtad, closed_port, free_port, read_queue_file,
                      spool_files, wait_for, workers, xtext_decode)
from test_events import Receiver, events_cfg

TOKEN = "inject-secret-token-1"
READ_TOKEN = "read-only-token-2"


def tokens_file(d):
    p = os.path.join(d, "tokens")
    with open(p, "w") as f:
        f.write("injector inject %s\n" %
                hashlib.sha256(TOKEN.encode()).hexdigest())
        f.write("reader read %s\n" %
                hashlib.sha256(READ_TOKEN.encode()).hexdigest())
    os.chmod(p, 0o600)
    return p


def make(workdir, route, extra=None, api=True, http=True):
    over = {"routes": {"default": route}}
    if api:
        over["api"] = {"listen": "127.0.0.1:%d" % free_port(),
                       "tokens_file": tokens_file(workdir)}
    if extra:
        for k, v in extra.items():
            over.setdefault(k, {}).update(v) if isinstance(v, dict) \
                else over.__setitem__(k, v)
    m = Mtad(workdir, over)
    m.start()
    m.inject_sock = os.path.join(workdir, "inject.sock")
    if api:
        host, port = m.cfg["api"]["listen"].rsplit(":", 1)
        m.api = (host, int(port))
        if http:
            wait_api(m)
    return m


def wait_api(m, timeout=15.0):
    def up():
        try:
            socket.create_connection(m.api, timeout=1).close()
            return True
        except OSError:
            return False
    assert wait_for(up, timeout, what="the API listener"), m.log_text()[-3000:]


def post(m, body, token=TOKEN, conn=None, raw=None):
    """(status, headers dict, decoded JSON) of one POST /v1/messages."""
    own = conn is None
    c = conn or http.client.HTTPConnection(*m.api, timeout=30)
    data = raw if raw is not None else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"}
    if token is not None:
        hdrs["Authorization"] = "Bearer " + token
    c.request("POST", "/v1/messages", body=data, headers=hdrs)
    r = c.getresponse()
    text = r.read()
    if own:
        c.close()
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        doc = text
    return r.status, {k.lower(): v for k, v in r.getheaders()}, doc


def strip_received(data):
    """The content after mtad's Received: field (its first header)."""
    assert data.startswith(b"Received: "), data[:200]
    i = data.index(b"\r\n")
    while data[i + 2:i + 3] in (b"\t", b" "):
        i = data.index(b"\r\n", i + 2)
    return data[i + 2:]


MSG = (b"From: a@x.test\r\nTo: b@y.test\r\nSubject: dots\r\n\r\n"
       b".starts with a dot\r\n..two dots\r\n.\r\n \r\nlast line\r\n")


# --- the worker side: the socket itself -----------------------------------

def test_socket_exists_only_with_the_api_mode_0600_owned_by_server_user(
        workdir, sink):
    d1 = os.path.join(workdir, "off")
    os.mkdir(d1)
    os.chmod(d1, 0o755)
    m = make(d1, sink.route, api=False)
    try:
        assert not os.path.exists(m.inject_sock)
    finally:
        m.stop()
    d2 = os.path.join(workdir, "on")
    os.mkdir(d2)
    os.chmod(d2, 0o755)
    m = make(d2, sink.route, http=False)
    try:
        st = os.stat(m.inject_sock)
        assert oct(st.st_mode & 0o777) == "0o600"
        if os.geteuid() == 0:
            assert st.st_uid == pwd.getpwnam(m.cfg["server"].get(
                "user", "mtad")).pw_uid
    finally:
        m.stop()


def raw_session(m, header):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(m.inject_sock)
    s.sendall(header)
    return s


def read_until(s, pred, timeout=10.0):
    buf = b""
    deadline = time.time() + timeout
    while not pred(buf) and time.time() < deadline:
        try:
            k = s.recv(4096)
        except (socket.timeout, ConnectionResetError):
            break
        if not k:
            break
        buf += k
    return buf


def test_socket_requires_a_proxy_v1_header(workdir, sink):
    m = make(workdir, sink.route, http=False)
    try:
        s = raw_session(m, b"EHLO no.header\r\n")
        got = read_until(s, lambda b: False, timeout=6)
        assert b"220" not in got, got     # closed, never greeted
        s.close()
        s = raw_session(m, b"PROXY UNKNOWN\r\n")
        got = read_until(s, lambda b: False, timeout=6)
        assert b"220" not in got, got
        s.close()
        assert m.wait_log("PROXY UNKNOWN on the injection socket")
    finally:
        m.stop()


def test_socket_session_relays_as_api_for_the_named_client(workdir, sink):
    """192.0.2.7 is not in relay.allow_networks: only the socket's trust
    lets it relay; logs and the spool name it, Received: names it."""
    m = make(workdir, sink.route,
             {"relay": {"allow_networks": ["10.9.9.0/24"]}}, http=False)
    try:
        s = raw_session(m, b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 8025\r\n"
                           b"EHLO api.test\r\n")
        got = read_until(s, lambda b: b"250 " in b)
        assert got.startswith(b"220 "), got
        assert b"AUTH" not in got
        s.sendall(b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@far.example>\r\n"
                  b"DATA\r\n")
        got = read_until(s, lambda b: b"354" in b or b.count(b"\r\n") >= 3)
        assert b"250 2.1.5" in got and b"354" in got, got
        s.sendall(MSG + b".\r\n")
        got = read_until(s, lambda b: b"queued as" in b)
        assert b"250 2.0.0" in got, got
        s.close()
        msgs = sink.wait_for(1)
        assert strip_received(msgs[0].data).startswith(b"From: a@x.test")
        assert b"[192.0.2.7]" in msgs[0].data.split(b"\r\n\r\n")[0]
        assert m.wait_log("client=[192.0.2.7]:40000")
    finally:
        m.stop()


def test_a_plain_client_from_the_same_address_may_not_relay(workdir, sink):
    """The control: without the socket's trust the same relay is refused."""
    m = make(workdir, sink.route,
             {"relay": {"allow_networks": ["10.9.9.0/24"]}}, http=False)
    try:
        with socket.create_connection(("127.0.0.1", m.port), timeout=10) as s:
            read_until(s, lambda b: b"220 " in b)
            s.sendall(b"EHLO c.test\r\nMAIL FROM:<a@x.test>\r\n"
                      b"RCPT TO:<b@far.example>\r\n")
            got = read_until(s, lambda b: b.count(b"\r\n") >= 12 and
                             (b"\r\n5" in b or b"\r\n2" in b[-60:]))
        assert b"554 5.7.1" in got or b"550 5.7.1" in got, got
    finally:
        m.stop()


# --- the API ----------------------------------------------------------------

def test_post_delivers_the_bytes_exactly(workdir, sink):
    m = make(workdir, sink.route)
    try:
        st, h, doc = post(m, {"from": "a@x.test", "to": ["b@y.test"],
                              "message": MSG.decode()})
        assert st == 201, (st, doc)
        qid = doc["queue_id"]
        assert len(qid) == 16, doc
        msgs = sink.wait_for(1)
        assert strip_received(msgs[0].data) == MSG
        assert msgs[0].mail_from == "a@x.test"
        assert msgs[0].rcpt_tos == ["b@y.test"]
        assert m.wait_log("%s: from=<a@x.test>" % qid)
    finally:
        m.stop()


def test_lf_made_crlf_base64_and_8bit(workdir, sink):
    m = make(workdir, sink.route)
    try:
        st, _, doc = post(m, {"from": "", "to": ["b@y.test"],
                              "message": "Subject: lf\n\n.dot\nend"})
        assert st == 201, doc
        body = "Subject: caf\u00e9\r\n\r\nna\u00efve\r\n".encode()
        st, _, doc = post(m, {"from": "a@x.test", "to": ["c@y.test"],
                              "message_base64":
                                  base64.b64encode(body).decode()})
        assert st == 201, doc
        msgs = sink.wait_for(2)
        by = {x.rcpt_tos[0]: x for x in msgs}
        assert strip_received(by["b@y.test"].data) == \
            b"Subject: lf\r\n\r\n.dot\r\nend\r\n"
        assert by["b@y.test"].mail_from == ""
        assert strip_received(by["c@y.test"].data) == body
    finally:
        m.stop()


def test_curl_and_keep_alive_reuse_one_smtp_connection(workdir, sink):
    m = make(workdir, sink.route)
    try:
        c = http.client.HTTPConnection(*m.api, timeout=30)
        for i in range(20):
            st, _, doc = post(m, {"from": "a@x.test", "to": ["r%d@y.test" % i],
                                  "message": "Subject: %d\r\n\r\nx\r\n" % i},
                              conn=c)
            assert st == 201, doc
        c.close()
        sink.wait_for(20)
        # twenty messages, one pooled SMTP session from the one client
        log = m.log_text()
        sessions = [ln for ln in log.splitlines()
                    if "connect from [127.0.0.1]" in ln and
                    "disconnect" not in ln]
        assert len(sessions) <= 3, sessions    # + readiness probes
        if shutil.which("curl"):
            body = json.dumps({"from": "a@x.test", "to": ["curl@y.test"],
                               "message": "Subject: curl\r\n\r\nhi\r\n"})
            r = subprocess.run(
                ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}",
                 "-H", "Authorization: Bearer " + TOKEN,
                 "-H", "Content-Type: application/json", "--data-binary",
                 body, "http://%s:%d/v1/messages" % m.api],
                capture_output=True, text=True, timeout=30)
            out, code = r.stdout.rsplit("\n", 1)
            assert code == "201", r.stdout + r.stderr
            assert len(json.loads(out)["queue_id"]) == 16
    finally:
        m.stop()


def test_size_limit_is_413_with_the_smtp_reply(workdir, sink):
    m = make(workdir, sink.route, {"limits": {"max_message_size": "2K"}})
    try:
        st, _, doc = post(m, {"from": "a@x.test", "to": ["b@y.test"],
                              "message": "Subject: big\r\n\r\n" +
                              "x" * 4000 + "\r\n"})
        assert st == 413, doc
        assert doc["error"]["status"] == 413
        assert doc["error"]["smtp"]["code"] == 552, doc
        assert doc["error"]["smtp"]["enhanced"] == "5.3.4", doc
        st, _, doc = post(m, {"from": "a@x.test", "to": ["b@y.test"],
                              "message": "Subject: small\r\n\r\nok\r\n"})
        assert st == 201, doc
        assert len(sink.wait_for(1)) == 1
    finally:
        m.stop()


def test_too_many_recipients_is_422_and_nothing_is_sent(workdir, sink):
    m = make(workdir, sink.route, {"limits": {"max_recipients": 2}})
    try:
        st, _, doc = post(m, {"from": "a@x.test",
                              "to": ["a@y.test", "b@y.test", "c@y.test"],
                              "message": "Subject: 3\r\n\r\nx\r\n"})
        assert st == 422, doc
        assert doc["error"]["smtp"]["enhanced"] == "4.5.3", doc
        assert doc["error"]["recipient"] == "c@y.test"
        st, _, doc = post(m, {"from": "a@x.test", "to": ["ok@y.test"],
                              "message": "Subject: 1\r\n\r\nx\r\n"})
        assert st == 201, doc
        msgs = sink.wait_for(1)
        time.sleep(0.5)             # a wrongly committed one would show
        assert [x.rcpt_tos for x in sink.received()] == [["ok@y.test"]]
        assert not spool_files(m.spool, "queue")
    finally:
        m.stop()


def test_reject_route_refuses_the_whole_message(workdir, sink):
    m = make(workdir, sink.route)
    try:
        r = m.ctl("route", "add", "blocked.example",
                  "reject:550 5.7.1 blocked by route", check=True)
        st, _, doc = post(m, {"from": "a@x.test",
                              "to": ["fine@y.test", "u@blocked.example"],
                              "message": "Subject: r\r\n\r\nx\r\n"})
        assert st == 422, doc
        e = doc["error"]
        assert e["smtp"]["code"] == 550 and e["smtp"]["enhanced"] == "5.7.1"
        assert "blocked by route" in e["smtp"]["text"]
        assert e["recipient"] == "u@blocked.example"
        # all or nothing: fine@y.test got nothing; the pool still works
        st, _, doc = post(m, {"from": "a@x.test", "to": ["after@y.test"],
                              "message": "Subject: a\r\n\r\nx\r\n"})
        assert st == 201, doc
        sink.wait_for(1)
        time.sleep(0.5)
        assert [x.rcpt_tos for x in sink.received()] == [["after@y.test"]]
        del r
    finally:
        m.stop()


def test_defer_route_is_503_with_retry_after(workdir, sink):
    m = make(workdir, sink.route)
    try:
        m.ctl("route", "add", "later.example", "defer:451 4.3.0 not now",
              check=True)
        st, h, doc = post(m, {"from": "a@x.test", "to": ["u@later.example"],
                              "message": "Subject: d\r\n\r\nx\r\n"})
        assert st == 503, doc
        assert int(h["retry-after"]) > 0
        assert doc["error"]["smtp"]["code"] == 451
    finally:
        m.stop()


def test_dsn_parameters_reach_the_spool(workdir):
    m = make(workdir, "smtp:[127.0.0.1]:%d" % closed_port())
    try:
        st, _, doc = post(m, {
            "from": "a@x.test",
            "to": [{"address": "b@y.test", "notify": ["SUCCESS", "DELAY"],
                    "orcpt": "rfc822;orig+b@y.test"},
                   {"address": "c@y.test", "notify": ["NEVER"]},
                   "d@y.test"],
            "notify": ["FAILURE"], "ret": "hdrs", "envid": "env id=1",
            "message": "Subject: dsn\r\n\r\nx\r\n"})
        assert st == 201, doc
        qid = doc["queue_id"]
        path = os.path.join(m.spool, "queue", qid)
        assert wait_for(lambda: os.path.exists(path), 10), \
            spool_files(m.spool, "queue")
        env, _ = read_queue_file(path)
        text = json.dumps({k: (v.decode("latin-1") if isinstance(v, bytes)
                               else [x.decode("latin-1") for x in v])
                           for k, v in env.items()})
        assert env["ret"] == b"HDRS", text
        assert xtext_decode(env["envid"]) == b"env id=1", text
        r = {}
        for line in env["rcpt"]:
            n, addr, orcpt = line.split(b" ")
            r[xtext_decode(addr)] = (int(n), xtext_decode(orcpt))
        assert r[b"b@y.test"] == (2 | 8, b"rfc822;orig+b@y.test"), text
        assert r[b"c@y.test"] == (1, None), text
        assert r[b"d@y.test"][0] == 4, text
        assert xtext_decode(env["auth"]) == b"api", text
        assert env["client"].startswith(b"127.0.0.1"), text
    finally:
        m.stop()


def test_reception_event_names_the_http_client(workdir, sink):
    rec = Receiver()
    try:
        m = make(workdir, sink.route,
                 {"events": events_cfg(workdir, rec.url)})
        try:
            st, _, doc = post(m, {"from": "a@x.test", "to": ["b@y.test"],
                                  "message": "Subject: ev\r\n\r\nx\r\n"})
            assert st == 201, doc
            qid = doc["queue_id"]
            assert wait_for(lambda: rec.of("reception", qid), 20), rec.events
            ev = rec.of("reception", qid)[0]
            assert ev["client_address"] == "127.0.0.1", ev
            assert ev["sender"] == "a@x.test"
        finally:
            m.stop()
    finally:
        rec.stop()


@pytest.mark.parametrize("body,status,needle", [
    ({"to": ["b@y.test"], "message": "x"}, 400, "from"),
    ({"from": "a@x.test", "to": [], "message": "x"}, 400, "to"),
    ({"from": "a@x.test", "to": ["b@y.test"]}, 400, "message"),
    ({"from": "a@x.test", "to": ["b@y.test"], "message": "x",
      "message_base64": "eA=="}, 400, "not both"),
    ({"from": "a@x.test", "to": ["b@y.test"], "message_base64": "!!"},
     400, "base64"),
    ({"from": "a@x.test", "to": ["b@y.test"], "message": "x", "cc": []},
     400, "unknown member"),
    ({"from": "a@x.test", "to": ["b@y.test"], "message": "x",
      "notify": ["NEVER", "SUCCESS"]}, 400, "notify"),
    ({"from": "a@x.test", "to": ["b@y.test"], "message": "x",
      "ret": "ALL"}, 400, "ret"),
    ({"from": "a@x.test", "to": ["b@y.test>"], "message": "x"}, 400, "to"),
    ({"from": "a@x.test", "to": ["b@y.test"], "message": "x",
      "pool": "p1"}, 422, "pool"),
])
def test_bad_requests_are_json_errors(workdir, sink, body, status, needle):
    m = make(workdir, sink.route)
    try:
        st, _, doc = post(m, body)
        assert st == status, doc
        assert doc["error"]["status"] == status
        assert needle in doc["error"]["message"], doc
        assert not sink.received()
    finally:
        m.stop()


def test_tokens_and_roles(workdir, sink):
    m = make(workdir, sink.route)
    try:
        body = {"from": "a@x.test", "to": ["b@y.test"], "message": "x\r\n"}
        assert post(m, body, token=None)[0] == 401
        assert post(m, body, token="wrong")[0] == 401
        assert post(m, body, token=READ_TOKEN)[0] == 403
        assert post(m, None, raw=b"{\"from\":")[0] == 400
        assert not sink.received()
        assert m.wait_log("admin api:injector")
    finally:
        m.stop()


def test_idle_pooled_connection_closed_by_the_worker_is_replaced(workdir,
                                                                  sink):
    m = make(workdir, sink.route, {"limits": {"command_timeout": "1s"}})
    try:
        st, _, doc = post(m, {"from": "a@x.test", "to": ["one@y.test"],
                              "message": "Subject: 1\r\n\r\nx\r\n"})
        assert st == 201, doc
        # the worker times the idle pooled session out and closes it
        m.wait_log("timeout after command from [127.0.0.1]", 10)
        st, _, doc = post(m, {"from": "a@x.test", "to": ["two@y.test"],
                              "message": "Subject: 2\r\n\r\nx\r\n"})
        assert st == 201, doc
        assert len(sink.wait_for(2)) == 2
    finally:
        m.stop()


def test_kill_9_of_the_worker_mid_request_is_never_a_201(workdir, sink):
    """The milter holds the message at its end (before the spool commit);
    the worker is killed there: the answer is 503, nothing was spooled,
    and the next request (a fresh worker) is 201."""
    fm = FakeMilter()
    try:
        fm.script["stall_at"] = "E"
        m = Mtad(workdir, {
            "routes": {"default": sink.route},
            "api": {"listen": "127.0.0.1:%d" % free_port(),
                    "tokens_file": tokens_file(workdir)}})
        port = m.port
        m.cfg["server"]["listen"] = [{
            "address": "127.0.0.1:%d" % port,
            "milters": [{"name": "m1", "socket": fm.socket_spec,
                         "default_action": "tempfail",
                         "timeouts": {"connect": "5s", "command": "5s",
                                      "eom": "60s"}}]}]
        m.write_config()
        m.start()
        host, p = m.cfg["api"]["listen"].rsplit(":", 1)
        m.api = (host, int(p))
        wait_api(m)
        try:
            import threading
            out = {}

            def run():
                out["r"] = post(m, {"from": "a@x.test", "to": ["k@y.test"],
                                    "message": "Subject: k\r\n\r\nx\r\n"})
            t = threading.Thread(target=run)
            t.start()
            assert wait_for(lambda: any(c[0] == "E" for sess in fm.all()
                                       for c in sess), 20), \
                fm.all()
            for pid in workers(m.pid):
                os.kill(pid, 9)
            t.join(30)
            st, _, doc = out["r"]
            assert st == 503, doc
            assert not spool_files(m.spool, "queue")
            fm.script.pop("stall_at")
            def ok():
                s, _, d = post(m, {"from": "a@x.test", "to": ["n@y.test"],
                                   "message": "Subject: n\r\n\r\nx\r\n"})
                return s == 201
            assert wait_for(ok, 30, step=0.5)
            assert [x.rcpt_tos for x in sink.wait_for(1)] == [["n@y.test"]]
        finally:
            m.stop()
    finally:
        fm.stop()


def test_concurrent_clients_each_get_their_own_201s(workdir, sink):
    """8 keep-alive clients at once, 40 messages each: every answer a 201
    with a distinct id, every message delivered once, and the pool holds
    no more sessions than clients at once (one address: 127.0.0.1)."""
    import threading
    m = make(workdir, sink.route)
    try:
        ids, errors = [], []
        lock = threading.Lock()

        def client(k):
            c = http.client.HTTPConnection(*m.api, timeout=30)
            try:
                for i in range(40):
                    st, _, doc = post(m, {
                        "from": "a@x.test", "to": ["c%d-%d@y.test" % (k, i)],
                        "message": "Subject: %d %d\r\n\r\nx\r\n" % (k, i)},
                        conn=c)
                    with lock:
                        (ids if st == 201 else errors).append(
                            doc["queue_id"] if st == 201 else (st, doc))
            finally:
                c.close()
        ts = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errors, errors[:3]
        assert len(ids) == 320 and len(set(ids)) == 320
        got = sink.wait_for(320, 60)
        rcpts = sorted(x.rcpt_tos[0] for x in got)
        assert rcpts == sorted("c%d-%d@y.test" % (k, i) for k in range(8)
                               for i in range(40))
        sessions = [ln for ln in m.log_text().splitlines()
                    if " connect from [127.0.0.1]" in ln]
        assert len(sessions) <= 8 + 3, len(sessions)
    finally:
        m.stop()


def test_reload_keeps_injecting_and_turning_the_api_off_removes_the_socket(
        workdir, sink):
    m = make(workdir, sink.route)
    try:
        ino = os.stat(m.inject_sock).st_ino
        old = set(workers(m.pid))
        m.ctl("reload", check=True)
        assert wait_for(lambda: set(workers(m.pid)) and
                        not (set(workers(m.pid)) & old), 20), "no new workers"
        assert os.stat(m.inject_sock).st_ino == ino     # the same socket
        wait_api(m)

        def ok():
            st, _, doc = post(m, {"from": "a@x.test", "to": ["r@y.test"],
                                  "message": "Subject: r\r\n\r\nx\r\n"})
            return st == 201
        assert wait_for(ok, 20, step=0.2)
        sink.wait_for(1)
        del m.cfg["api"]
        m.write_config()
        m.ctl("reload", check=True)
        assert wait_for(lambda: not os.path.exists(m.inject_sock), 20)
    finally:
        m.stop()


def test_a_banned_http_client_is_429_with_retry_after(workdir, sink):
    """The ban is the HTTP client's address (the PROXY header's), not the
    API process's: the pooled connection is refused at its greeting (an
    address in relay.allow_networks is never banned, hence 10.9.9.0/24)."""
    m = make(workdir, sink.route,
             {"relay": {"allow_networks": ["10.9.9.0/24"]}})
    try:
        m.ctl("ban", "add", "127.0.0.1", "--for", "1h", check=True)
        st, h, doc = post(m, {"from": "a@x.test", "to": ["b@y.test"],
                              "message": "Subject: b\r\n\r\nx\r\n"})
        assert st == 429, doc
        assert int(h["retry-after"]) > 0
        assert doc["error"]["smtp"]["code"] == 421, doc
        m.ctl("ban", "del", "127.0.0.1", check=True)
        st, _, doc = post(m, {"from": "a@x.test", "to": ["b@y.test"],
                              "message": "Subject: b\r\n\r\nx\r\n"})
        assert st == 201, doc
    finally:
        m.stop()


def test_an_ipv6_http_client_is_named_by_a_tcp6_header(workdir, sink):
    m = Mtad(workdir, {"routes": {"default": sink.route},
                       "api": {"listen": "[::1]:%d" % free_port("::1"),
                               "tokens_file": tokens_file(workdir)}})
    m.start()
    try:
        port = int(m.cfg["api"]["listen"].rsplit(":", 1)[1])
        m.api = ("::1", port)
        wait_api(m)
        st, _, doc = post(m, {"from": "a@x.test", "to": ["v6@y.test"],
                              "message": "Subject: 6\r\n\r\nx\r\n"})
        assert st == 201, doc
        assert m.wait_log("%s: from=<a@x.test>, size=" % doc["queue_id"])
        assert m.wait_log("client=[::1]:")
        assert b"[::1]" in sink.wait_for(1)[0].data.split(b"\r\n\r\n")[0]
    finally:
        m.stop()


def test_injected_mail_is_dkim_signed_by_the_sockets_trust(workdir):
    """Neither relay.allow_networks nor dkim.sign_networks holds the HTTP
    client (127.0.0.1): the signature comes from the socket's trust, as
    for an authenticated session, and verifies."""
    from test_dkim import Keys, signatures, verify
    keys = Keys(workdir)
    key = keys.make("example.org", "s1", "ed25519-sha256")
    m = make(workdir, "smtp:[127.0.0.1]:%d" % closed_port(),
             {"relay": {"allow_networks": ["10.9.9.0/24"]},
              "dkim": {"sign": [key], "sign_networks": ["10.9.9.0/24"]}})
    try:
        msg = (b"From: a@example.org\r\nTo: b@y.test\r\nSubject: signed\r\n"
               b"\r\n.dot line\r\nbody\r\n")
        st, _, doc = post(m, {"from": "a@example.org", "to": ["b@y.test"],
                              "message": msg.decode()})
        assert st == 201, doc
        path = os.path.join(m.spool, "queue", doc["queue_id"])
        assert wait_for(lambda: os.path.exists(path), 10)
        _, body = read_queue_file(path)
        assert len(signatures(body)) == 1, body[:400]
        assert body.endswith(msg)
        assert verify(keys, body), body[:600]
    finally:
        m.stop()
