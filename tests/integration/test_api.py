"""The HTTP API process (api/, docs/API.md): tokens and roles, JSON errors,
the HTTP/1.1 rules (lengths, limits, keep-alive, slow clients), TLS, the
process's supervision, and GET /v1/status, with Python's http.client, curl
and raw sockets for the bytes a library would not send."""
import hashlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import time

import pytest

from mtadtest import MTAD, free_port, make_keyed_cert

TOKENS = {"reader": ("read", "r-secret-0123456789"),
          "operator": ("operate", "o-secret-0123456789"),
          "injector": ("inject", "i-secret-0123456789")}


def write_tokens(path, tokens=TOKENS, mode=0o600):
    with open(path, "w") as f:
        f.write("# name roles sha256(token)\n")
        for name, (roles, tok) in tokens.items():
            f.write("%s %s %s\n" % (name, roles,
                                    hashlib.sha256(tok.encode()).hexdigest()))
    os.chmod(path, mode)


def api_cfg(workdir, port, **over):
    tokens = os.path.join(workdir, "api-tokens")
    write_tokens(tokens)
    cfg = {"listen": "127.0.0.1:%d" % port, "tokens_file": tokens,
           "max_body": "64K", "header_timeout": "1s", "body_timeout": "1s",
           "idle_timeout": "2s"}
    cfg.update(over)
    return {"api": cfg}


def wait_api(port, timeout=15.0, tls=False):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise AssertionError("API not listening on %d: %r" % (port, last))


def assert_api_never_died(m):
    """No API process exited unasked (a sanitizer's abort, a crash): the
    master logs each such exit."""
    bad = [ln for ln in m.log_text().splitlines()
           if "API process (pid" in ln and ") exited" in ln]
    assert not bad, bad


@pytest.fixture
def api(mtad_factory, workdir):
    port = free_port()
    m = mtad_factory(api_cfg(workdir, port))
    m.start()
    wait_api(port)
    m.api_port = port
    m.kills_ok = False
    yield m
    if not m.kills_ok:
        assert_api_never_died(m)


def request(port, method, path, token=None, body=None, headers=None,
            conn=None, ctype="application/json"):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = "Bearer " + token
    if body is not None and ctype:
        h.setdefault("Content-Type", ctype)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r, data


def error_of(r, data, status):
    assert r.status == status, (r.status, data)
    assert r.getheader("Content-Type") == "application/json"
    doc = json.loads(data)
    assert doc["error"]["status"] == status
    assert isinstance(doc["error"]["message"], str) and doc["error"]["message"]
    return doc["error"]


def raw(port, data, timeout=5.0):
    """Sends data, returns all the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                return out
            out += b
        raise AssertionError("server did not close: %r" % out[:200])


def status_line(resp):
    return int(resp.split(b" ", 2)[1])


# ---- tokens and roles ------------------------------------------------------


def test_no_token_is_401(api):
    r, data = request(api.api_port, "GET", "/v1/status")
    error_of(r, data, 401)
    assert r.getheader("WWW-Authenticate", "").startswith("Bearer")


def test_bad_token_is_401_for_any_path(api):
    for path in ("/v1/status", "/v1/nothing-here", "/"):
        r, data = request(api.api_port, "GET", path, token="wrong-token")
        assert error_of(r, data, 401)["message"] == "invalid token"
    r, data = request(api.api_port, "GET", "/v1/status",
                      headers={"Authorization": "Basic dXNlcjpwdw=="})
    error_of(r, data, 401)


def test_refusals_do_not_flood_the_log(api):
    c = http.client.HTTPConnection("127.0.0.1", api.api_port, timeout=10)
    t0 = time.time()
    for _ in range(150):
        r, _ = request(api.api_port, "GET", "/v1/status", token=TOKENS[
            "injector"][1], conn=c)
        assert r.status == 403
    secs = int(time.time() - t0) + 2
    r, _ = request(api.api_port, "GET", "/v1/status", token=TOKENS[
        "injector"][1], conn=c)
    c.close()
    time.sleep(1.1)             # a new second: the count of those left out
    request(api.api_port, "GET", "/v1/status")
    text = api.wait_log("more refused requests not logged")
    n = text.count("403 GET /v1/status for token injector")
    assert 20 <= n <= 20 * secs, n


def test_status_with_each_reading_role(api):
    for name in ("reader", "operator"):
        r, data = request(api.api_port, "GET", "/v1/status",
                          token=TOKENS[name][1])
        assert r.status == 200, data
        doc = json.loads(data)
        assert doc["generation"] >= 1 and isinstance(doc["workers"], list)
        assert doc["api"]["state"] == "running" and doc["api"]["pid"] > 0
        assert r.getheader("Cache-Control") == "no-store"


def test_wrong_role_is_403(api):
    r, data = request(api.api_port, "GET", "/v1/status",
                      token=TOKENS["injector"][1])
    err = error_of(r, data, 403)
    assert "injector" in err["message"]
    api.wait_log("403 GET /v1/status for token injector")


def test_unknown_path_404_and_method_405(api):
    tok = TOKENS["reader"][1]
    r, data = request(api.api_port, "GET", "/v1/status/", token=tok)
    error_of(r, data, 404)
    r, data = request(api.api_port, "DELETE", "/v1/status", token=tok)
    error_of(r, data, 405)
    assert "GET" in r.getheader("Allow", "")
    resp = raw(api.api_port, b"BREW /v1/status HTTP/1.1\r\nHost: x\r\n"
               b"Authorization: Bearer " + tok.encode() + b"\r\n\r\n")
    assert status_line(resp) == 501


def test_tokens_file_checked_at_start(mtad_factory, workdir):
    port = free_port()
    m = mtad_factory(api_cfg(workdir, port))
    tokens = m.cfg["api"]["tokens_file"]
    with open(tokens, "a") as f:
        f.write("bad-line read nothex\n")
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert "%s:5:" % tokens in r.stderr + r.stdout, r.stderr
    write_tokens(tokens, mode=0o622)
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and "writable" in r.stderr + r.stdout


def test_listen_without_tokens_file_refused(mtad_factory):
    m = mtad_factory({"api": {"listen": "127.0.0.1:%d" % free_port()}})
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert "relay.yaml:" in r.stderr and "api.tokens_file" in r.stderr


# ---- HTTP rules ------------------------------------------------------------


@pytest.fixture
def echo(mtad_factory, workdir, monkeypatch):
    """An mtad whose API has the test route POST /v1/test/echo (JSON in,
    the same JSON written again out, one admin record): MTAD_API_TEST=1."""
    monkeypatch.setenv("MTAD_API_TEST", "1")
    port = free_port()
    m = mtad_factory(api_cfg(workdir, port))
    m.start()
    wait_api(port)
    m.api_port = port
    yield m
    assert_api_never_died(m)


def test_malformed_json_is_400(echo):
    tok = TOKENS["operator"][1]
    for body in (b"{", b"{\"a\":1,}", b"[1 2]", b"{'a':1}", b"\"\xff\"",
                 b"{\"a\":1,\"a\":2}", b"01", b"[" * 40 + b"]" * 40, b""):
        r, data = request(echo.api_port, "POST", "/v1/test/echo", token=tok,
                          body=body)
        err = error_of(r, data, 400)
        assert err["message"].startswith("malformed JSON: "), err
        assert "line 1 col" in err["message"] or "JSON" in err["message"]
    r, data = request(echo.api_port, "POST", "/v1/test/echo", token=tok,
                      body=b"{}", ctype="text/plain")
    error_of(r, data, 415)


def test_json_round_trip(echo):
    doc = {"s": "caf\u00e9 \U0001f600 \"q\" \\ \n\u0001", "n": -42,
           "f": 1.5, "big": 9223372036854775807, "t": True, "z": None,
           "a": [1, [2, {"x": []}], {}], "nul": "a\u0000b"}
    r, data = request(echo.api_port, "POST", "/v1/test/echo",
                      token=TOKENS["operator"][1],
                      body=json.dumps(doc).encode())
    assert r.status == 200, data
    assert json.loads(data) == doc
    data.decode("utf-8")                     # valid UTF-8 out


def test_echo_needs_operate(echo):
    r, data = request(echo.api_port, "POST", "/v1/test/echo",
                      token=TOKENS["reader"][1], body=b"{}")
    error_of(r, data, 403)


def test_admin_record(echo):
    r, data = request(echo.api_port, "POST", "/v1/test/echo",
                      token=TOKENS["operator"][1],
                      body=json.dumps({"note": "two words\nforged line"})
                      .encode())
    assert r.status == 200, data
    text = echo.wait_log("admin api:operator from=127.0.0.1 "
                         "action=test-echo")
    line = [ln for ln in text.splitlines() if "action=test-echo" in ln][0]
    assert "args=two\\x20words\\x0aforged\\x20line result=ok" in line, line
    assert not any(ln.startswith("forged line") for ln in text.splitlines())
    assert "refused a log record" not in text


def test_no_test_route_by_default(api):
    r, data = request(api.api_port, "POST", "/v1/test/echo",
                      token=TOKENS["operator"][1], body=b"{}")
    error_of(r, data, 404)


def test_bad_content_length_is_400(api):
    tok = TOKENS["operator"][1].encode()
    resp = raw(api.api_port, b"POST /v1/status HTTP/1.1\r\nHost: x\r\n"
               b"Authorization: Bearer " + tok + b"\r\n"
               b"Content-Length: abc\r\n\r\n{")
    assert status_line(resp) == 400
    assert b'"status":400' in resp


def test_oversized_body_is_413_before_the_body(api):
    tok = TOKENS["operator"][1].encode()
    resp = raw(api.api_port, b"POST /v1/status HTTP/1.1\r\nHost: x\r\n"
               b"Authorization: Bearer " + tok + b"\r\nContent-Type: "
               b"application/json\r\nContent-Length: 70000\r\n\r\n")
    assert status_line(resp) == 413
    body = json.loads(resp.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["status"] == 413


def test_oversized_body_sent_at_once_still_gets_413(api):
    """http.client sends the head and the whole body before it reads: the
    413 must reach it (no reset from a close with the body unread)."""
    for _ in range(3):
        r, data = request(api.api_port, "POST", "/v1/status",
                          token=TOKENS["operator"][1], body=b"x" * 300000)
        error_of(r, data, 413)
    r, data = request(api.api_port, "POST", "/v1/status", token="bad",
                      body=b"y" * 300000)
    error_of(r, data, 401)


def test_head_limits(api):
    tok = b"Authorization: Bearer " + TOKENS["reader"][1].encode() + b"\r\n"
    resp = raw(api.api_port, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n"
               b"Host: x\r\n\r\n")
    assert status_line(resp) == 414
    resp = raw(api.api_port, b"GET /v1/status HTTP/1.1\r\nHost: x\r\n" +
               b"".join(b"X-H%d: v\r\n" % i for i in range(100)) + b"\r\n")
    assert status_line(resp) == 431
    resp = raw(api.api_port, b"GET /v1/status HTTP/2.0\r\nHost: x\r\n\r\n")
    assert status_line(resp) == 505
    resp = raw(api.api_port, b"POST /v1/status HTTP/1.1\r\nHost: x\r\n" +
               tok + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert status_line(resp) == 411
    resp = raw(api.api_port, b"POST /v1/status HTTP/1.1\r\nHost: x\r\n" +
               tok + b"Transfer-Encoding: gzip\r\n\r\n")
    assert status_line(resp) == 501
    resp = raw(api.api_port, b"POST /v1/status HTTP/1.1\r\nHost: x\r\n" +
               tok + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"
               b"\r\n0\r\n\r\n")
    assert status_line(resp) == 400
    resp = raw(api.api_port, b"GET /v1/status HTTP/1.1\r\n" + tok + b"\r\n")
    assert status_line(resp) == 400              # no Host
    resp = raw(api.api_port, b"GET /v1/status HTTP/1.1\nHost: x\n\n")
    assert status_line(resp) == 400              # bare LF


def test_keep_alive_many_requests_one_connection(api):
    c = http.client.HTTPConnection("127.0.0.1", api.api_port, timeout=10)
    tok = TOKENS["reader"][1]
    c.connect()
    local = c.sock.getsockname()
    for i in range(20):
        path = "/v1/status" if i % 2 == 0 else "/v1/missing"
        r, data = request(api.api_port, "GET", path, token=tok, conn=c)
        assert r.status == (200 if i % 2 == 0 else 404), data
        assert c.sock is not None and c.sock.getsockname() == local
    c.close()


def test_token_does_not_carry_over_keep_alive(api):
    """Each request is authenticated by its own header: a second request
    on the same connection without a token is 401, with a reader's token
    403 on an operate route, whatever the first one had."""
    tok = TOKENS["operator"][1].encode()
    first = b"GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + \
            tok + b"\r\n\r\n"
    second = b"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    resp = raw(api.api_port, first + second)
    assert resp.startswith(b"HTTP/1.1 200 ")
    assert b"HTTP/1.1 401 " in resp and resp.count(b"HTTP/1.1 ") == 2
    c = http.client.HTTPConnection("127.0.0.1", api.api_port, timeout=10)
    r, _ = request(api.api_port, "GET", "/v1/status", token=tok.decode(),
                   conn=c)
    assert r.status == 200
    r, data = request(api.api_port, "GET", "/v1/status", conn=c)
    error_of(r, data, 401)
    c.close()


def test_http10_keep_alive(api):
    tok = TOKENS["reader"][1].encode()
    one = b"GET /v1/status HTTP/1.0\r\nConnection: keep-alive\r\n" \
          b"Authorization: Bearer " + tok + b"\r\n\r\n"
    two = b"GET /v1/status HTTP/1.0\r\nAuthorization: Bearer " + tok + \
          b"\r\n\r\n"
    resp = raw(api.api_port, one + two)
    assert resp.count(b"HTTP/1.1 200 ") == 2, resp[:300]
    assert b"Connection: keep-alive" in resp


def test_pipelined_requests_answered_in_order(api):
    tok = b"Authorization: Bearer " + TOKENS["reader"][1].encode() + b"\r\n"
    one = b"GET /v1/status HTTP/1.1\r\nHost: x\r\n" + tok + b"\r\n"
    two = b"GET /v1/nope HTTP/1.1\r\nHost: x\r\n" + tok + \
          b"Connection: close\r\n\r\n"
    resp = raw(api.api_port, one + two)
    assert resp.startswith(b"HTTP/1.1 200 ")
    assert resp.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 404 " in resp


def test_curl(api):
    tok = TOKENS["reader"][1]
    url = "http://127.0.0.1:%d/v1/status" % api.api_port
    r = subprocess.run(["curl", "-sS", "-H", "Authorization: Bearer " + tok,
                        "-w", "\n%{http_code}", url, url],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("200")
    r = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w",
                        "%{http_code}", url], capture_output=True, text=True,
                       timeout=30)
    assert r.stdout == "401"
    # curl -X POST without -d sends no length at all: a bodyless request
    r = subprocess.run(["curl", "-sS", "-X", "POST", "-H",
                        "Authorization: Bearer " + tok, "-w",
                        "\n%{http_code}", url], capture_output=True,
                       text=True, timeout=30)
    assert r.stdout.rstrip().endswith("405")


def test_slow_head_gets_408_and_close(api):
    t0 = time.time()
    with socket.create_connection(("127.0.0.1", api.api_port),
                                  timeout=10) as s:
        s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")
        out = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            out += b
    took = time.time() - t0
    assert status_line(out) == 408, out
    assert 0.8 <= took < 5, took


def test_stalled_body_closed(api):
    tok = b"Authorization: Bearer " + TOKENS["operator"][1].encode() + b"\r\n"
    t0 = time.time()
    with socket.create_connection(("127.0.0.1", api.api_port),
                                  timeout=10) as s:
        s.sendall(b"POST /v1/status HTTP/1.1\r\nHost: x\r\n" + tok +
                  b"Content-Length: 100\r\n\r\n{\"a\":")
        assert s.recv(4096) == b""
    assert time.time() - t0 < 5
    api.wait_log("request body stalled")


def test_idle_connection_closed(api):
    with socket.create_connection(("127.0.0.1", api.api_port),
                                  timeout=10) as s:
        t0 = time.time()
        assert s.recv(4096) == b""
        assert 1.5 <= time.time() - t0 < 6


def test_max_clients(mtad_factory, workdir):
    port = free_port()
    m = mtad_factory(api_cfg(workdir, port, max_clients=2))
    m.start()
    wait_api(port)
    held = []
    try:
        # two kept-alive clients, each answered: both are counted
        for _ in range(2):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            r, data = request(port, "GET", "/v1/status",
                              token=TOKENS["reader"][1], conn=c)
            assert r.status == 200, data
            held.append(c)
        resp = raw(port, b"")
        assert status_line(resp) == 503
        assert b"Retry-After: 1" in resp
        held.pop().close()
        deadline = time.time() + 10
        status = None
        while status != 200 and time.time() < deadline:
            # the freed place is taken again (until the close is seen, a
            # 503 or a reset: the refusal closes with the request unread)
            try:
                r, data = request(port, "GET", "/v1/status",
                                  token=TOKENS["reader"][1])
                status = r.status
            except OSError:
                time.sleep(0.05)
        assert status == 200
    finally:
        for c in held:
            c.close()


# ---- TLS ---------------------------------------------------------------------


def test_tls(mtad_factory, workdir):
    cert, key = make_keyed_cert(workdir, "api", "ec")
    port = free_port()
    m = mtad_factory(api_cfg(workdir, port,
                             tls={"cert_file": cert, "key_file": key}))
    m.start()
    wait_api(port)
    ctx = ssl.create_default_context(cafile=cert)
    ctx.check_hostname = False
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx,
                                    timeout=10)
    for _ in range(3):
        r, data = request(port, "GET", "/v1/status",
                          token=TOKENS["reader"][1], conn=c)
        assert r.status == 200, data
    c.close()
    r = subprocess.run(["curl", "-sS", "--cacert", cert, "-k", "-H",
                        "Authorization: Bearer " + TOKENS["reader"][1], "-w",
                        "\n%{http_code}", "https://127.0.0.1:%d/v1/status" %
                        port], capture_output=True, text=True, timeout=30)
    assert r.stdout.rstrip().endswith("200"), r.stderr
    # plain HTTP to the TLS port: no answer in HTTP, the connection ends
    resp = raw(port, b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not resp.startswith(b"HTTP/")


# ---- the process -------------------------------------------------------------


def api_pid(m):
    for pid in m.children():
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().startswith(b"mtad: api"):
                    return pid
        except OSError:
            pass
    return None


def wait_pid(m, old=None, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        p = api_pid(m)
        if p is not None and p != old:
            return p
        time.sleep(0.05)
    raise AssertionError("no API process (old %r)" % old)


def test_process_unprivileged_and_restarted(api):
    api.kills_ok = True
    pid = wait_pid(api)
    with open("/proc/%d/status" % pid) as f:
        st = f.read()
    uid_line = [ln for ln in st.splitlines() if ln.startswith("Uid:")][0]
    if os.geteuid() == 0:
        assert set(uid_line.split()[1:]) != {"0"}, uid_line
        assert "0" not in uid_line.split()[1:]
    os.kill(pid, signal.SIGKILL)
    new = wait_pid(api, old=pid)
    assert new != pid
    wait_api(api.api_port)
    r, data = request(api.api_port, "GET", "/v1/status",
                      token=TOKENS["reader"][1])
    assert r.status == 200, data
    api.wait_log("API process (pid %d) exited on signal 9" % pid)


def test_hung_process_killed_and_restarted(api):
    """SIGSTOP: no pong within the master's 10 s ping period: killed and
    forked again, and the relay itself was left alone."""
    api.kills_ok = True
    pid = wait_pid(api)
    os.kill(pid, signal.SIGSTOP)
    try:
        new = wait_pid(api, old=pid, timeout=30)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    api.wait_log("API process (pid %d) did not answer a ping" % pid)
    wait_api(api.api_port)
    r, data = request(api.api_port, "GET", "/v1/status",
                      token=TOKENS["reader"][1])
    assert r.status == 200, data
    assert json.loads(data)["api"]["pid"] == new


def test_reload_rereads_tokens(api):
    pid = wait_pid(api)
    tokens = api.cfg["api"]["tokens_file"]
    new = {"fresh": ("read", "fresh-secret-000000000")}
    write_tokens(tokens, new)
    os.kill(api.pid, signal.SIGHUP)
    wait_pid(api, old=pid)
    deadline = time.time() + 15
    while time.time() < deadline:
        r, _ = request(api.api_port, "GET", "/v1/status",
                       token="fresh-secret-000000000")
        if r.status == 200:
            break
        time.sleep(0.1)
    assert r.status == 200
    r, data = request(api.api_port, "GET", "/v1/status",
                      token=TOKENS["reader"][1])
    error_of(r, data, 401)


def test_reload_refuses_no_request(api):
    """Across a reload (a new API process, the old one stopping) every
    request on a new connection is answered: the socket stays open in the
    master, and the old process serves what it accepted."""
    pid = wait_pid(api)
    tok = TOKENS["reader"][1]
    statuses = []
    os.kill(api.pid, signal.SIGHUP)
    deadline = time.time() + 20
    new = None
    while time.time() < deadline and len(statuses) < 2000:
        r, _ = request(api.api_port, "GET", "/v1/status", token=tok)
        statuses.append(r.status)
        p = api_pid(api)
        if p is not None and p != pid:
            new = p
            if len(statuses) > 50 and not os.path.exists("/proc/%d" % pid):
                break
    assert new is not None, "no new API process"
    assert set(statuses) == {200}, statuses
    api.wait_log("API process (pid %d) serving" % new)


def test_admin_record_format_and_no_forgery(api):
    """The API's log lines reach the log as its own; the token never."""
    r, _ = request(api.api_port, "GET", "/v1/status", token="nope-nope")
    assert r.status == 401
    text = api.wait_log("401 (unknown token)")
    assert "nope-nope" not in text
    assert "refused a log record" not in text
    for name, (_, tok) in TOKENS.items():
        assert tok not in text


def test_no_api_without_listen(mtad):
    time.sleep(0.3)
    assert api_pid(mtad) is None


def test_openapi_has_every_endpoint_of_api_md():
    """docs/openapi.yaml and docs/API.md's endpoint table name the same
    operations, each with its role."""
    import re
    import yaml
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "openapi.yaml")) as f:
        doc = yaml.safe_load(f)
    assert doc["openapi"].startswith("3.0")
    ops = {(m.upper(), p): o["x-mtad-role"]
           for p, item in doc["paths"].items() for m, o in item.items()}
    with open(os.path.join(root, "docs", "API.md")) as f:
        md = f.read()
    table = {(m, p): role for m, p, role in re.findall(
        r"^\| `(GET|POST|PUT|DELETE) (/v1/[^`]*)` \| (\w+) \|", md, re.M)}
    assert len(table) >= 20, table
    assert table == ops
