"""The HTTP API's verbs other than status and injection (api/api_verbs.c):
each request is an mtactl command line the master runs (master/api_run.c)
and mtactl's output is the answer.  Every verb with http.client and with
curl, the role each one needs, the admin records on both sides (the API's
"admin api:NAME" and mtactl's, whose actor the master names), and the
mtactl additions the API uses (queue paging, route/tls --json).
"""
import hashlib
import http.client
import json
import os
import re
import subprocess
import time

import pytest

from mtadtest import free_port, make_message, send, wait_for


TOKENS = {"reader": ("read", "r-secret-1"),
          "ops": ("read,operate", "o-secret-2"),
          "inj": ("inject", "i-secret-3")}


def start_api(mtad_factory, **over):
    """mtad with the API on a fresh port, the three tokens; the queue's
    mail goes to a closed port (it stays, deferred)."""
    port = free_port()
    cfg = {"api": {"listen": "127.0.0.1:%d" % port}}
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    m = mtad_factory(cfg)
    path = os.path.join(m.dir, "api.tokens")
    with open(path, "w") as f:
        for name, (roles, tok) in TOKENS.items():
            f.write("%s %s %s\n" % (name, roles,
                                    hashlib.sha256(tok.encode()).hexdigest()))
    os.chmod(path, 0o600)
    m.cfg["api"]["tokens_file"] = path
    m.write_config()
    m.start()
    m.api_port = port
    wait_for(lambda: call(m, "GET", "/v1/status", "reader")[0] == 200, 10,
             what="the API answering")
    return m


def call(m, method, path, who=None, body=None, ctype=None, conn=None):
    """One request with http.client: (status, parsed JSON or None, raw,
    headers)."""
    c = conn or http.client.HTTPConnection("127.0.0.1", m.api_port,
                                           timeout=30)
    hdrs = {}
    if who is not None:
        hdrs["Authorization"] = "Bearer " + TOKENS[who][1]
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        ctype = ctype or "application/json"
    elif isinstance(body, str):
        body = body.encode()
    if ctype:
        hdrs["Content-Type"] = ctype
    try:
        c.request(method, path, body=body, headers=hdrs)
        r = c.getresponse()
        raw = r.read()
    finally:
        if conn is None:
            c.close()
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = None
    return r.status, doc, raw, dict(r.getheaders())


def curl(m, method, path, who=None, body=None, ctype="application/json"):
    """The same with curl: (status, parsed JSON or None)."""
    args = ["curl", "-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}",
            "--max-time", "30"]
    if who is not None:
        args += ["-H", "Authorization: Bearer " + TOKENS[who][1]]
    if body is not None:
        data = json.dumps(body) if isinstance(body, (dict, list)) else body
        args += ["-H", "Content-Type: " + ctype, "--data-binary", data]
    args.append("http://127.0.0.1:%d%s" % (m.api_port, path))
    r = subprocess.run(args, capture_output=True, text=True, timeout=40)
    assert r.returncode == 0, r.stderr
    text, _, code = r.stdout.rpartition("\n")
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        doc = None
    return int(code), doc


def queue_some(m, n, sender="s@home.test"):
    c = m.smtp(timeout=20)
    try:
        ids = [send(m, sender, ["r%d@far.test" % i], make_message(i), conn=c)
               for i in range(n)]
    finally:
        c.quit()
    wait_for(lambda: all(i in m.queue_ids() for i in ids), 10,
             what="the messages in the queue")
    return ids


def state_of(m, qid):
    st, doc, raw, _ = call(m, "GET", "/v1/queue/" + qid, "reader")
    assert st == 200, raw
    return doc["state"]


# ---- mtactl: what the API runs -----------------------------------------

def test_mtactl_paging_and_json(mtad_factory):
    """queue --after/--limit pages through every id once, in order, with
    "next" null on the last page; route list/get and tls policy list/get
    --json are single JSON documents."""
    m = mtad_factory()
    m.start()
    ids = sorted(queue_some(m, 5))
    seen, after = [], None
    for _ in range(5):
        args = ["queue", "--json", "--limit", "2"]
        if after:
            args += ["--after", after]
        doc = json.loads(m.ctl(*args, check=True).stdout)
        assert doc["summary"]["messages"] == 5        # every match counted
        seen += [e["id"] for e in doc["messages"]]
        after = doc["next"]
        if after is None:
            break
    assert seen == ids
    r = m.ctl("queue", "--limit", "2")
    assert "the next page: --after %s" % ids[1] in r.stdout, r.stdout
    assert m.ctl("queue", "--after", "../etc").returncode == 2
    m.ctl("route", "add", "example.org", "smtp:[192.0.2.1]:25", check=True)
    doc = json.loads(m.ctl("route", "list", "--json", check=True).stdout)
    assert {"key": "example.org", "route": "smtp:[192.0.2.1]:25"} in \
        doc["routes"]
    doc = json.loads(m.ctl("route", "get", "u@example.org", "--json",
                           check=True).stdout)
    assert doc == {"address": "u@example.org", "route": "smtp:[192.0.2.1]:25",
                   "match": "domain", "key": "example.org"}
    m.ctl("tls", "policy", "set", "example.org", "verify", check=True)
    doc = json.loads(m.ctl("tls", "policy", "list", "--json",
                           check=True).stdout)
    assert doc == {"policies": [{"domain": "example.org",
                                 "level": "verify"}]}
    r = m.ctl("tls", "policy", "get", "nowhere.test", "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout) == {"domain": "nowhere.test", "level": None}


# ---- the queue ---------------------------------------------------------

def test_queue_verbs(mtad_factory):
    """List (filters, paging), show, hold, release, flush, bounce, delete by
    id, with http.client and curl; by filter; 404 and 400; the admin
    records name the token on the API's side and the master's."""
    m = start_api(mtad_factory)
    ids = sorted(queue_some(m, 4))
    other = queue_some(m, 1, sender="spam@bad.test")[0]
    st, doc, raw, _ = call(m, "GET", "/v1/queue", "reader")
    assert st == 200, raw
    assert sorted(e["id"] for e in doc["messages"]) == sorted(ids + [other])
    assert doc["next"] is None and doc["summary"]["messages"] == 5
    st, doc, _, _ = call(m, "GET", "/v1/queue?limit=2", "reader")
    assert st == 200 and len(doc["messages"]) == 2 and doc["next"] == ids[1]
    code, doc2 = curl(m, "GET", "/v1/queue?limit=2&after=" + doc["next"],
                      "reader")
    assert code == 200 and [e["id"] for e in doc2["messages"]] == ids[2:4]
    st, doc, _, _ = call(m, "GET", "/v1/queue?from=spam%40bad", "reader")
    assert [e["id"] for e in doc["messages"]] == [other]
    for bad in ("limit=0", "limit=5000", "state=gone", "older_than=soon",
                "after=..%2Fetc", "from="):
        st, doc, raw, _ = call(m, "GET", "/v1/queue?" + bad, "reader")
        assert st == 400 and doc["error"]["status"] == 400, (bad, raw)
    # one message
    st, doc, raw, _ = call(m, "GET", "/v1/queue/" + ids[0], "reader")
    assert st == 200 and doc["id"] == ids[0], raw
    assert doc["sender"] == "s@home.test"
    assert doc["recipients"][0]["address"] == "r0@far.test", doc
    st, doc, _, _ = call(m, "GET", "/v1/queue/0000000000000000", "reader")
    assert st == 404 and "no such message" in doc["error"]["message"]
    assert call(m, "GET", "/v1/queue/..%2Fx", "reader")[0] in (400, 404)
    # changes by id
    st, doc, raw, _ = call(m, "POST", "/v1/queue/%s/hold" % ids[0], "ops")
    assert st == 200, raw
    assert doc["id"] == ids[0] and doc["action"] == "hold"
    assert state_of(m, ids[0]) == "held"
    code, doc = curl(m, "POST", "/v1/queue/%s/release" % ids[0], "ops")
    assert code == 200 and doc["action"] == "release", doc
    assert state_of(m, ids[0]) != "held"
    st, doc, raw, _ = call(m, "POST", "/v1/queue/%s/flush" % ids[1], "ops")
    assert st == 200, raw
    st, doc, raw, _ = call(m, "POST", "/v1/queue/%s/bounce" % ids[2], "ops")
    assert st == 200, raw
    wait_for(lambda: ids[2] not in m.queue_ids(), 15,
             what="the bounced message gone")
    code, doc = curl(m, "DELETE", "/v1/queue/" + ids[3], "ops")
    assert code == 200 and doc["action"] == "delete", doc
    assert ids[3] not in m.queue_ids()
    st, doc, _, _ = call(m, "DELETE", "/v1/queue/" + ids[3], "ops")
    assert st == 404, doc
    # by filter
    st, doc, raw, _ = call(m, "POST", "/v1/queue/actions", "ops",
                           {"action": "hold", "filter": {"from": "spam@"}})
    assert st == 200, raw
    assert doc["ids"] == [other] and doc["count"] == 1, doc
    assert state_of(m, other) == "held"
    code, doc = curl(m, "POST", "/v1/queue/actions", "ops",
                     {"action": "delete", "filter": {"state": "held"}})
    assert code == 200 and doc["ids"] == [other], doc
    assert other not in m.queue_ids()
    for bad in ({"action": "hold"}, {"action": "explode", "filter": {}},
                {"action": "hold", "filter": {"nope": "x"}},
                {"action": "hold", "filter": {"from": 3}},
                {"action": "hold", "filter": {}, "extra": 1}, [1]):
        st, doc, raw, _ = call(m, "POST", "/v1/queue/actions", "ops", bad)
        assert st == 400, (bad, raw)
    assert call(m, "POST", "/v1/queue/actions", "ops", "{not json",
                ctype="application/json")[0] == 400
    # the records: the API's, and mtactl's own with the actor
    m.wait_log("via=api actor=api:ops from=")
    log = m.wait_log("action=delete args=delete,--all,--state,held "
                     "result=ok")
    assert re.search(r"admin api:ops from=127\.0\.0\.1 action=hold "
                     r"args=hold,%s result=ok" % ids[0], log), log[-3000:]
    assert re.search(r"admin: uid=\d+ pid=\d+ via=api actor=api:ops "
                     r"from=\[127\.0\.0\.1\]:\d+: hold", log), log[-3000:]


# ---- routes, TLS policy ------------------------------------------------

def test_route_verbs(mtad_factory):
    m = start_api(mtad_factory)
    code, doc = curl(m, "PUT", "/v1/routes/example.org", "ops",
                     {"route": "smtp:[192.0.2.1]:25"})
    assert code == 200, doc
    assert doc["key"] == "example.org" and doc["action"] == "route_add"
    st, doc, raw, _ = call(m, "GET", "/v1/routes/user@example.org", "reader")
    assert st == 200, raw
    assert doc["route"] == "smtp:[192.0.2.1]:25" and doc["match"] == "domain"
    st, doc, raw, _ = call(m, "PUT", "/v1/routes/.example.net", "ops",
                           {"route": "reject:550 5.7.1 no such user"})
    assert st == 200, raw
    st, doc, _, _ = call(m, "GET", "/v1/routes", "reader")
    assert {"key": ".example.net", "route": "reject:550 5.7.1 no such user"} \
        in doc["routes"], doc
    code, doc = curl(m, "DELETE", "/v1/routes/example.org", "ops")
    assert code == 200, doc
    st, doc, raw, _ = call(m, "DELETE", "/v1/routes/example.org", "ops")
    assert st == 404, raw
    st, doc, raw, _ = call(m, "GET", "/v1/routes/user@example.org", "reader")
    assert st == 200 and doc["match"] == "default", raw   # routes.default
    assert doc["key"] is None
    for body in ({"route": "maildir:/root/Maildir"}, {"route": "-x"},
                 {"route": 5}, {"route": "a", "more": 1}, {}):
        st, doc, raw, _ = call(m, "PUT", "/v1/routes/example.org", "ops",
                               body)
        assert st == 400, (body, raw)
    st, doc, raw, _ = call(m, "PUT", "/v1/routes/example.org", "ops",
                           {"route": "smtp:[nonsense"})
    assert st == 422 and doc["error"]["message"], raw
    assert call(m, "PUT", "/v1/routes/-c", "ops", {"route": "mx"})[0] == 400
    # import from the body (stdin of mtactl route import -)
    st, doc, raw, _ = call(m, "POST", "/v1/routes/import", "ops",
                           "a.test smtp:[192.0.2.7]:25\n# c\nb.test mx\n",
                           ctype="text/plain")
    assert st == 200 and doc["imported"] == 2, raw
    keys = [r["key"] for r in call(m, "GET", "/v1/routes",
                                   "reader")[1]["routes"]]
    assert "a.test" in keys and ".example.net" in keys
    code, doc = curl(m, "POST", "/v1/routes/import?replace=true", "ops",
                     "c.test mx\n", ctype="text/plain")
    assert code == 200 and doc["imported"] == 1 and doc["replace"], doc
    keys = [r["key"] for r in call(m, "GET", "/v1/routes",
                                   "reader")[1]["routes"]]
    assert keys == ["c.test"], keys
    st, doc, raw, _ = call(m, "POST", "/v1/routes/import", "ops",
                           "x.test maildir:/etc\n", ctype="text/plain")
    assert st == 400, raw
    st, doc, raw, _ = call(m, "POST", "/v1/routes/import", "ops",
                           "bad line without route\n", ctype="text/plain")
    assert st == 422, raw
    m.wait_log("admin api:ops from=127.0.0.1 action=route_import")


def test_tls_policy_verbs(mtad_factory):
    m = start_api(mtad_factory)
    st, doc, raw, _ = call(m, "PUT", "/v1/tls/policy/example.org", "ops",
                           {"level": "verify"})
    assert st == 200 and doc["level"] == "verify", raw
    code, doc = curl(m, "GET", "/v1/tls/policy/example.org", "reader")
    assert code == 200 and doc == {"domain": "example.org",
                                   "level": "verify"}, doc
    st, doc, _, _ = call(m, "GET", "/v1/tls/policy", "reader")
    assert doc == {"policies": [{"domain": "example.org",
                                 "level": "verify"}]}
    st, doc, raw, _ = call(m, "PUT", "/v1/tls/policy/example.org", "ops",
                           {"level": "strong"})
    assert st == 400, raw
    code, doc = curl(m, "DELETE", "/v1/tls/policy/example.org", "ops")
    assert code == 200, doc
    st, doc, _, _ = call(m, "GET", "/v1/tls/policy/example.org", "reader")
    assert st == 404 and doc["level"] is None
    st, doc, _, _ = call(m, "DELETE", "/v1/tls/policy/example.org", "ops")
    assert st == 404, doc


# ---- shaping -----------------------------------------------------------

def test_shaping_verbs(mtad_factory):
    m = start_api(mtad_factory, shaping={
        "sites": [{"name": "bigmail", "mx": [".bigmail.test"],
                   "connections": 2}]})
    st, doc, raw, _ = call(m, "POST", "/v1/shaping/bigmail/suspend?for=10m",
                           "ops")
    assert st == 200 and "suspended for 600s" in doc["result"], raw
    st, doc, raw, _ = call(m, "GET", "/v1/shaping", "reader")
    assert st == 200, raw
    p = [p for p in doc["pairs"] if p["site"] == "bigmail"]
    assert p and p[0]["state"] == "suspended", doc
    code, doc = curl(m, "POST", "/v1/shaping/bigmail/resume", "ops")
    assert code == 200 and "resumed" in doc["result"], doc
    st, doc, raw, _ = call(m, "POST", "/v1/shaping/bigmail/resume", "ops")
    assert st in (404, 409, 422) and doc["error"], raw   # none left
    for bad in ("/v1/shaping/bigmail/suspend?for=ever",
                "/v1/shaping/-x/suspend", "/v1/shaping/bigmail/resume?for=1h"):
        assert call(m, "POST", bad, "ops")[0] == 400, bad


# ---- roles -------------------------------------------------------------

CHANGES = [("POST", "/v1/queue/0123456789ABCDEF/hold", None),
           ("POST", "/v1/queue/0123456789ABCDEF/release", None),
           ("POST", "/v1/queue/0123456789ABCDEF/flush", None),
           ("POST", "/v1/queue/0123456789ABCDEF/bounce", None),
           ("DELETE", "/v1/queue/0123456789ABCDEF", None),
           ("POST", "/v1/queue/actions", {"action": "hold", "filter": {}}),
           ("PUT", "/v1/routes/example.org", {"route": "mx"}),
           ("DELETE", "/v1/routes/example.org", None),
           ("POST", "/v1/routes/import", "a.test mx\n"),
           ("PUT", "/v1/tls/policy/example.org", {"level": "may"}),
           ("DELETE", "/v1/tls/policy/example.org", None),
           ("POST", "/v1/shaping/x/suspend", None),
           ("POST", "/v1/shaping/x/resume", None)]
READS = ["/v1/queue", "/v1/queue/0123456789ABCDEF", "/v1/routes",
         "/v1/routes/example.org", "/v1/tls/policy",
         "/v1/tls/policy/example.org", "/v1/shaping"]


def test_roles_per_verb(mtad_factory):
    """read may read but change nothing; inject may do neither; no token
    is 401; nothing refused ran (no admin record of it, routes unchanged)."""
    m = start_api(mtad_factory)
    for method, path, body in CHANGES:
        for who, want in (("reader", 403), ("inj", 403), (None, 401)):
            st, doc, raw, _ = call(m, method, path, who, body,
                                   ctype="text/plain" if isinstance(body, str)
                                   else None)
            assert st == want, (method, path, who, raw)
            assert doc["error"]["status"] == want
    for path in READS:
        assert call(m, "GET", path, "inj")[0] == 403, path
        assert call(m, "GET", path)[0] == 401, path
        assert call(m, "GET", path, "reader")[0] in (200, 404), path
    assert json.loads(m.ctl("route", "list", "--json",
                            check=True).stdout)["routes"] == []
    assert "action=route_add" not in m.log_text()


def test_many_at_once_and_keep_alive(mtad_factory):
    """Requests on one keep-alive connection, and more runs at once than
    the master runs (8): each is answered, 200 or 503 with Retry-After,
    and the master has no mtactl left over."""
    m = start_api(mtad_factory)
    c = http.client.HTTPConnection("127.0.0.1", m.api_port, timeout=30)
    for _ in range(5):
        st, doc, raw, _ = call(m, "GET", "/v1/routes", "reader", conn=c)
        assert st == 200, raw
    c.close()
    conns = [http.client.HTTPConnection("127.0.0.1", m.api_port, timeout=60)
             for _ in range(20)]
    for c in conns:
        c.request("GET", "/v1/queue", headers={
            "Authorization": "Bearer " + TOKENS["reader"][1]})
    codes = []
    for c in conns:
        r = c.getresponse()
        body = r.read()
        codes.append(r.status)
        if r.status == 503:
            assert r.getheader("Retry-After") == "1", body
        else:
            assert r.status == 200, body
        c.close()
    assert codes.count(200) >= 8, codes

    def no_mtactl():
        # mtactl runs are the runner's children (the master's grandchildren)
        kids = set(m.children())
        for pid in kids | {g for k in kids for g in grandchildren(k)}:
            try:
                if open("/proc/%d/comm" % pid).read().strip() == "mtactl":
                    return False
            except OSError:
                pass
        return True
    wait_for(no_mtactl, 10, what="every mtactl reaped")
    runner = [k for k in m.children()
              if "mtad: runner" in open("/proc/%d/cmdline" % k).read()]
    assert len(runner) == 1, m.children()


def grandchildren(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def runner_pid(m):
    pids = [k for k in m.children()
            if open("/proc/%d/cmdline" % k).read().startswith("mtad: runner")]
    assert len(pids) == 1, m.children()
    return pids[0]


def test_api_process_killed_mid_run_and_runner_gone(mtad_factory):
    """kill -9 of the API process while runs are out: the master forgets
    their channel, the restarted API process runs verbs again.  kill -9 of
    the runner: the master says so, the verbs answer 503 (Retry-After),
    everything else keeps serving."""
    import signal
    m = start_api(mtad_factory)
    queue_some(m, 2)
    api = [k for k in m.children()
           if open("/proc/%d/cmdline" % k).read().startswith("mtad: api")]
    assert len(api) == 1
    conns = []
    for _ in range(4):
        c = http.client.HTTPConnection("127.0.0.1", m.api_port, timeout=30)
        c.request("GET", "/v1/queue", headers={
            "Authorization": "Bearer " + TOKENS["reader"][1]})
        conns.append(c)
    os.kill(api[0], signal.SIGKILL)
    for c in conns:
        c.close()
    wait_for(lambda: call(m, "GET", "/v1/routes", "reader")[0] == 200, 15,
             what="the restarted API process running verbs")
    assert m.proc.poll() is None
    os.kill(runner_pid(m), signal.SIGKILL)
    m.wait_log("the runner (pid")
    st, doc, raw, hdrs = call(m, "GET", "/v1/routes", "reader")
    assert st == 503 and "runner" in doc["error"]["message"], raw
    assert hdrs.get("Retry-After") == "1", hdrs
    assert call(m, "GET", "/v1/status", "reader")[0] == 200
    with m.smtp() as s:                       # mail still flows in
        assert s.noop()[0] == 250


def test_every_verb_with_curl(mtad_factory):
    """The verbs the tests above drive with http.client, now with curl
    (and the reverse), so each one is seen from both clients."""
    m = start_api(mtad_factory, shaping={
        "sites": [{"name": "bigmail", "mx": [".bigmail.test"],
                   "connections": 2}]})
    ids = sorted(queue_some(m, 3))
    code, doc = curl(m, "GET", "/v1/queue/" + ids[0], "reader")
    assert code == 200 and doc["id"] == ids[0], doc
    code, doc = curl(m, "POST", "/v1/queue/%s/hold" % ids[0], "ops")
    assert code == 200 and doc["action"] == "hold", doc
    st, doc, raw, _ = call(m, "POST", "/v1/queue/%s/release" % ids[0], "ops")
    assert st == 200 and doc["action"] == "release", raw
    code, doc = curl(m, "POST", "/v1/queue/%s/flush" % ids[1], "ops")
    assert code == 200 and doc["action"] == "flush", doc
    code, doc = curl(m, "POST", "/v1/queue/%s/bounce" % ids[1], "ops")
    assert code == 200 and doc["action"] == "bounce", doc
    st, doc, raw, _ = call(m, "DELETE", "/v1/queue/" + ids[2], "ops")
    assert st == 200 and doc["action"] == "delete", raw
    st, doc, raw, _ = call(m, "PUT", "/v1/routes/example.org", "ops",
                           {"route": "smtp:[192.0.2.1]:25"})
    assert st == 200, raw
    code, doc = curl(m, "GET", "/v1/routes", "reader")
    assert code == 200 and doc["routes"][0]["key"] == "example.org", doc
    code, doc = curl(m, "GET", "/v1/routes/example.org", "reader")
    assert code == 200 and doc["match"] == "domain", doc
    code, doc = curl(m, "PUT", "/v1/tls/policy/example.org", "ops",
                     {"level": "encrypt"})
    assert code == 200 and doc["level"] == "encrypt", doc
    code, doc = curl(m, "GET", "/v1/tls/policy", "reader")
    assert code == 200 and doc["policies"][0]["level"] == "encrypt", doc
    code, doc = curl(m, "POST", "/v1/shaping/bigmail/suspend?for=5m", "ops")
    assert code == 200 and "suspended for 300s" in doc["result"], doc
    code, doc = curl(m, "GET", "/v1/shaping", "reader")
    assert code == 200 and any(p["site"] == "bigmail" and
                               p["state"] == "suspended"
                               for p in doc["pairs"]), doc
    st, doc, raw, _ = call(m, "POST", "/v1/shaping/bigmail/resume", "ops")
    assert st == 200, raw
    code, doc = curl(m, "GET", "/v1/queue/" + ids[0], "inj")
    assert code == 403 and doc["error"]["status"] == 403, doc
    code, doc = curl(m, "DELETE", "/v1/routes/example.org", "reader")
    assert code == 403, doc
    code, doc = curl(m, "GET", "/v1/routes")
    assert code == 401, doc
