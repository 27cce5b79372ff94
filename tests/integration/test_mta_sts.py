"""MTA-STS (RFC 8461) end to end: mtad (sandbox on, the default) with
`routes.default: mx` resolving through a real nsd serving the zone sts.test
(MX records, `_mta-sts` TXT records, mta-sts.<domain> addresses), a real
HTTPS server (Python's http.server with ssl) on 127.0.0.80:443 serving the
policies with a certificate from the shared test CA (mtadtest.TestCA, given
to mtad as tls.ca_file), and sinks on the MX addresses at port 25 offering
STARTTLS with certificates from the same CA.

Checked: enforce with a matching MX (delivered over TLS, verify=sts, SNI
the MX name), with a matching MX whose certificate names another host
(deferred 4.7.5, no MAIL sent) and with a non-matching MX (deferred 4.7.5,
never connected); testing mode (delivered to the MX that does not match and
whose certificate is wrong, the failure in the log line); a new TXT id
makes mtad fetch the policy again; with the HTTPS server down, the cached
unexpired policy is still applied (RFC 8461 5.1); enforce with an MX that
offers no STARTTLS defers 4.7.4; mode none changes nothing; a redirect is
not followed and a non-text/plain answer is no policy; a policy server
that never answers holds only the mail to its domain, not the worker's
loop; a REQUIRETLS message may follow the (unsigned) MX answer only where
an MTA-STS policy covers it, and "TLS-Required: No" ignores the policy.
Ports 25 and 443 need root (CI runs as root); loopback only."""
import http.server
import os
import re
import signal
import smtplib
import socket
import ssl
import threading
import time

import pytest

from mtadtest import (Nsd, make_message, make_test_ca, query, send,
                      tls_server_context, wait_for)


pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="ports 25 and 443 need root")

ZONE = "sts.test"
HTTPS_IP = "127.0.0.80"

# enf: enforce, its MX matches;  bad: enforce, its MX does not match;
# tst: testing, its MX does not match;  redir / html: broken servers;
# chg: a policy whose id changes during the test.
ZONE_TEXT = """$ORIGIN sts.test.
$TTL 1
@            IN SOA ns.sts.test. hostmaster.sts.test. 1 3600 600 86400 1
@            IN NS  ns
ns           IN A   127.0.0.1
enf          IN MX  10 mx1.enf
mx1.enf      IN A   127.0.0.81
_mta-sts.enf IN TXT "v=STSv1; id=enf1"
mta-sts.enf  IN A   %(ip)s
enf2         IN MX  10 mx1.enf2
mx1.enf2     IN A   127.0.0.84
_mta-sts.enf2 IN TXT "v=STSv1; id=e2"
mta-sts.enf2 IN A   %(ip)s
bad          IN MX  10 mx.elsewhere
mx.elsewhere IN A   127.0.0.82
_mta-sts.bad IN TXT "v=STSv1; id=bad1"
mta-sts.bad  IN A   %(ip)s
tst          IN MX  10 mx.other
mx.other     IN A   127.0.0.83
_mta-sts.tst IN TXT "v=STSv1; id=tst1"
mta-sts.tst  IN A   %(ip)s
redir        IN MX  10 mx.elsewhere
_mta-sts.redir IN TXT "v=STSv1; id=r1"
mta-sts.redir IN A  %(ip)s
html         IN MX  10 mx.elsewhere
_mta-sts.html IN TXT "v=STSv1; id=h1"
mta-sts.html IN A   %(ip)s
nostls       IN MX  10 mx1.nostls
mx1.nostls   IN A   127.0.0.86
_mta-sts.nostls IN TXT "v=STSv1; id=n1"
mta-sts.nostls IN A %(ip)s
nonem        IN MX  10 mx.elsewhere
_mta-sts.nonem IN TXT "v=STSv1; id=none1"
mta-sts.nonem IN A  %(ip)s
slow         IN MX  10 mx.elsewhere
_mta-sts.slow IN TXT "v=STSv1; id=s1"
mta-sts.slow IN A   127.0.0.85
chg          IN MX  10 mx.elsewhere
_mta-sts.chg IN TXT "v=STSv1; id=%(chg_id)s"
mta-sts.chg  IN A   %(ip)s
"""


def policy(mode, *mx, max_age=86400):
    return ("version: STSv1\nmode: %s\n%smax_age: %d\n" % (
        mode, "".join("mx: %s\n" % m for m in mx), max_age)).encode()


POLICIES = {
    "enf": policy("enforce", "*.enf.sts.test"),
    "enf2": policy("enforce", "mx1.enf2.sts.test"),
    "nostls": policy("enforce", "*.nostls.sts.test"),
    "nonem": policy("none"),
    "bad": policy("enforce", "*.bad.sts.test", "mail.bad.sts.test"),
    "tst": policy("testing", "mx.nomatch.sts.test"),
    "html": policy("enforce", "*.html.sts.test"),
    "chg": policy("enforce", "*.chg.sts.test"),
}


class PolicyServer:
    """HTTPS on HTTPS_IP:443 serving /.well-known/mta-sts.txt per Host:
    mta-sts.<label>.sts.test gets POLICIES[label]; "redir" answers 301 to
    a policy elsewhere, "html" answers text/html.  Counts fetches per
    label."""

    def __init__(self, cert, key):
        self.fetches = {}
        self.policies = dict(POLICIES)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                host = (self.headers.get("Host") or "").split(":")[0]
                label = host[len("mta-sts."):-len("." + ZONE)]
                outer.fetches[label] = outer.fetches.get(label, 0) + 1
                if self.path != "/.well-known/mta-sts.txt":
                    self.send_error(404)
                elif label == "redir":
                    self.send_response(301)
                    self.send_header("Location", "https://mta-sts.enf.%s"
                                     "/.well-known/mta-sts.txt" % ZONE)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif label in outer.policies:
                    body = outer.policies[label]
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html"
                                     if label == "html" else "text/plain")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_error(404)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.httpd = http.server.ThreadingHTTPServer((HTTPS_IP, 443), Handler)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket,
                                            server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()

    def stop(self):
        if self.thread is None:
            return
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
        if self.thread.is_alive():
            raise RuntimeError("HTTPS policy server did not stop")
        self.thread = None


@pytest.fixture
def sts_world(workdir):
    """nsd for sts.test, the CA, the HTTPS policy server."""
    d = os.path.join(workdir, "sts")
    os.makedirs(d)
    os.chmod(d, 0o755)
    ca = make_test_ca(d)
    cert, key = ca.issue(["mta-sts.%s.%s" % (l, ZONE) for l in
                          ("enf", "enf2", "bad", "tst", "redir", "html",
                           "chg", "nostls", "nonem")])
    nsd = Nsd(d, zone_text=ZONE_TEXT % {"ip": HTTPS_IP, "chg_id": "c1"},
              zone=ZONE + ".")
    nsd.start()
    web = PolicyServer(cert, key)
    try:
        yield {"ca": ca, "nsd": nsd, "web": web, "dir": d}
    finally:
        web.stop()
        nsd.stop()


STARTED = []


@pytest.fixture(autouse=True)
def no_sanitizer_reports():
    """Under `make asan`: a worker's ASan/UBSan report fails the test."""
    STARTED.clear()
    yield
    for m in STARTED:
        err = m.stderr_text()
        assert "Sanitizer" not in err and "runtime error" not in err, err


def start(mtad_factory, w, **over):
    cfg = {"routes": {"default": "mx"}, "tls": {"ca_file": w["ca"].cert},
           "dns": {"servers": [w["nsd"].addr], "timeout": "1s",
                   "attempts": 1, "max_ttl": "1s"},
           "delivery": {"mta_sts": {"fetch_timeout": "5s"}}}
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    m = mtad_factory(cfg).start()
    STARTED.append(m)
    return m


def mx_sink(sink_factory, last_octet, ca=None, names=None, **kw):
    """A sink on 127.0.0.N:25; with ca, offering STARTTLS with a leaf for
    names."""
    s = sink_factory(host="127.0.0.%d" % last_octet, port=25, **kw)
    if ca is not None:
        chain, key = ca.issue(names)
        s.tls_context = tls_server_context(chain, key)
    return s


def wait_log(m, needle):
    """The log text once it holds needle (30 s: fetches and deliveries
    under ASan on a loaded machine)."""
    return m.wait_log(needle, timeout=30)


def line_of(m, needle):
    text = wait_log(m, needle)
    return [ln for ln in text.splitlines() if needle in ln][-1]


def test_enforce_matching_mx_delivered(mtad_factory, sink_factory, sts_world):
    mx = "mx1.enf.%s" % ZONE
    s81 = mx_sink(sink_factory, 81, sts_world["ca"], [mx])
    # one worker: each worker has its own policy cache
    m = start(mtad_factory, sts_world, server={"workers": 1})
    qid = send(m, "a@home.test", ["x@enf.%s" % ZONE], make_message(1))
    msg = s81.wait_for(1)[0]
    assert msg.rcpt_tos == ["x@enf.%s" % ZONE]
    assert msg.tls is not None and msg.tls["sni"] == mx
    wait_log(m, "mta-sts: enf.%s: fetched policy id=enf1 mode=enforce "
               "max_age=86400" % ZONE)
    ln = line_of(m, "%s: to=<x@enf.%s>" % (qid, ZONE))
    assert "status=sent" in ln, ln
    assert re.search(r"relay=%s\[127\.0\.0\.81\]:25, tls=TLSv1\.[23] "
                     r"cipher=\S+ verify=sts" % re.escape(mx), ln), ln
    # a second message: the cached policy, no second fetch
    qid = send(m, "a@home.test", ["y@enf.%s" % ZONE], make_message(2))
    s81.wait_for(2)
    assert "status=sent" in line_of(m, "%s: to=<y@enf.%s>" % (qid, ZONE))
    assert sts_world["web"].fetches == {"enf": 1}


def test_enforce_matching_mx_with_wrong_certificate_deferred(
        mtad_factory, sink_factory, sts_world):
    s84 = mx_sink(sink_factory, 84, sts_world["ca"],
                  ["someone-else.%s" % ZONE])
    m = start(mtad_factory, sts_world)
    qid = send(m, "a@home.test", ["x@enf2.%s" % ZONE], make_message(1))
    ln = line_of(m, "%s: to=<x@enf2.%s>" % (qid, ZONE))
    assert "status=deferred (451 4.7.5 MTA-STS verified TLS is required" \
        in ln, ln
    assert "tls_failure=certificate-host-mismatch" in ln, ln
    assert s84.received() == []
    assert "MAIL" not in [v for _, v in s84.commands]


def test_enforce_mismatching_mx_deferred(mtad_factory, sink_factory,
                                         sts_world):
    s82 = mx_sink(sink_factory, 82)
    m = start(mtad_factory, sts_world)
    qid = send(m, "a@home.test", ["x@bad.%s" % ZONE], make_message(1))
    ln = line_of(m, "%s: to=<x@bad.%s>" % (qid, ZONE))
    assert "status=deferred (451 4.7.5 MTA-STS policy of bad.%s (enforce): "\
        "no MX host matches (mx.elsewhere.%s)" % (ZONE, ZONE) in ln, ln
    wait_log(m, "mta-sts: bad.%s: MX host mx.elsewhere.%s does not match "
               "the policy (mode enforce): not used" % (ZONE, ZONE))
    # the mismatching MX never saw a connection
    assert s82.received() == [] and s82.connections == 0
    assert qid in m.queue_ids()


def test_enforce_without_starttls_deferred_and_mode_none(
        mtad_factory, sink_factory, sts_world):
    """enforce: a matching MX that does not offer STARTTLS defers 4.7.4
    (no MAIL sent); mode none: the MX that no pattern lists gets the mail
    as without a policy (plaintext here)."""
    s86 = mx_sink(sink_factory, 86)             # no STARTTLS
    s82 = mx_sink(sink_factory, 82)
    m = start(mtad_factory, sts_world)
    qid = send(m, "a@home.test", ["x@nostls.%s" % ZONE], make_message(1))
    ln = line_of(m, "%s: to=<x@nostls.%s>" % (qid, ZONE))
    assert "status=deferred (451 4.7.4" in ln and \
        "STARTTLS was not offered" in ln, ln
    assert "MAIL" not in [v for _, v in s86.commands]
    qid = send(m, "a@home.test", ["y@nonem.%s" % ZONE], make_message(2))
    assert s82.wait_for(1)[0].rcpt_tos == ["y@nonem.%s" % ZONE]
    wait_log(m, "mta-sts: nonem.%s: fetched policy id=none1 mode=none"
             % ZONE)
    ln = line_of(m, "%s: to=<y@nonem.%s>" % (qid, ZONE))
    assert "status=sent" in ln and "tls=none" in ln, ln


def test_testing_mode_delivers_and_logs(mtad_factory, sink_factory,
                                        sts_world):
    """The MX does not match and its certificate names another host:
    delivered over TLS anyway, the failure recorded in the log line (and
    in the outcome TLS-RPT reads)."""
    s83 = mx_sink(sink_factory, 83, sts_world["ca"], ["wrong.%s" % ZONE])
    m = start(mtad_factory, sts_world)
    qid = send(m, "a@home.test", ["x@tst.%s" % ZONE], make_message(1))
    msg = s83.wait_for(1)[0]
    assert msg.rcpt_tos == ["x@tst.%s" % ZONE] and msg.tls is not None
    wait_log(m, "mta-sts: tst.%s: MX host mx.other.%s does not match the "
               "policy (mode testing): delivering anyway" % (ZONE, ZONE))
    ln = line_of(m, "%s: to=<x@tst.%s>" % (qid, ZONE))
    assert "status=sent" in ln, ln
    assert re.search(r"tls=TLSv1\.[23] cipher=\S+ verify=none "
                     r"tls_failure=certificate-host-mismatch", ln), ln


def test_redirect_and_wrong_type_are_no_policy(mtad_factory, sink_factory,
                                               sts_world):
    """RFC 8461 3.3: no redirects; text/plain only.  Both fetches fail, so
    the domains have no policy and mail goes to their MX (which the
    enforce policy behind the redirect would have refused)."""
    s82 = mx_sink(sink_factory, 82)
    m = start(mtad_factory, sts_world)
    send(m, "a@home.test", ["r@redir.%s" % ZONE], make_message(1))
    send(m, "a@home.test", ["h@html.%s" % ZONE], make_message(2))
    s82.wait_for(2)
    wait_log(m, "mta-sts: redir.%s: fetch failed: HTTP status 301" % ZONE)
    wait_log(m, "mta-sts: html.%s: fetch failed: Content-Type text/html, "
               "not text/plain" % ZONE)
    assert "enf" not in sts_world["web"].fetches


def reload_zone(nsd, chg_id):
    nsd.zone_text = ZONE_TEXT % {"ip": HTTPS_IP, "chg_id": chg_id}
    with open(os.path.join(nsd.dir, "zone"), "w") as f:
        f.write(nsd.zone_text)
    os.kill(nsd.proc.pid, signal.SIGHUP)      # nsd reloads its zone files

    def served():
        ans = query(nsd.addr, "_mta-sts.chg." + ZONE, 16, timeout=0.5)
        return ans is not None and ("id=%s" % chg_id).encode() in ans
    wait_for(served, 20, what="nsd serving id=%s" % chg_id)
    # mtad's DNS cache keeps the old TXT answer for its TTL (1 s, and
    # dns.max_ttl 1s): a sleep past it is a lower bound, not a race
    time.sleep(1.5)


def delivered_to(sink, rcpt):
    return [x for x in sink.received() if x.rcpt_tos == [rcpt]]


def test_new_id_refetches_and_cache_survives_server_down(
        mtad_factory, sink_factory, sts_world):
    web, nsd = sts_world["web"], sts_world["nsd"]
    s82 = mx_sink(sink_factory, 82, sts_world["ca"],
                  ["mx.elsewhere.%s" % ZONE])
    # id c1: enforce, the policy lists the MX: delivered
    web.policies["chg"] = policy("enforce", "mx.elsewhere.%s" % ZONE)
    m = start(mtad_factory, sts_world, server={"workers": 1})
    a, b, c = ("%s@chg.%s" % (x, ZONE) for x in "abc")
    send(m, "a@home.test", [a], make_message(1))
    wait_for(lambda: delivered_to(s82, a), 20, what="a delivered under c1")
    wait_log(m, "mta-sts: chg.%s: fetched policy id=c1" % ZONE)
    # id c2, a policy that does not list the MX: fetched again, deferred
    web.policies["chg"] = policy("enforce", "*.chg.%s" % ZONE)
    reload_zone(nsd, "c2")
    qid = send(m, "a@home.test", [b], make_message(2))
    wait_log(m, "mta-sts: chg.%s: fetched policy id=c2" % ZONE)
    ln = line_of(m, "%s: to=<%s>" % (qid, b))
    assert "status=deferred (451 4.7.5 MTA-STS policy of chg." in ln, ln
    assert web.fetches["chg"] == 2
    # the server goes down and the id changes again: the fetch fails and
    # the cached, unexpired policy c2 still decides (RFC 8461 5.1): without
    # it the message would go to the MX
    web.stop()
    reload_zone(nsd, "c3")
    qid = send(m, "a@home.test", [c], make_message(3))
    ln = line_of(m, "mta-sts: chg.%s: fetch failed" % ZONE)
    assert "; cached policy id=c2 (" in ln, ln
    ln = line_of(m, "%s: to=<%s>" % (qid, c))
    assert "status=deferred (451 4.7.5 MTA-STS policy of chg." in ln, ln
    assert delivered_to(s82, c) == [] and delivered_to(s82, b) == []


class StalledServer:
    """Accepts TCP connections on ip:443 and never says a word; close()
    closes them (the client then sees the connection end)."""

    def __init__(self, ip):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, 443))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.conns = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        if self.sock is None:
            return
        self._stop.set()
        self.thread.join(timeout=10)
        if self.thread.is_alive():
            raise RuntimeError("stalled server thread did not stop")
        for c in self.conns:
            c.close()
        self.sock.close()
        self.sock = None


def test_stalled_policy_server_holds_only_its_domain(
        mtad_factory, sink_factory, sts_world):
    """One worker; the policy fetch of slow.sts.test hangs (a long
    fetch_timeout).  Meanwhile the worker still takes and delivers mail
    to enf.sts.test, fetching that policy too; the slow domain's message
    waits, and goes on (no policy) once its server drops the connection."""
    stalled = StalledServer("127.0.0.85")
    try:
        s81 = mx_sink(sink_factory, 81, sts_world["ca"],
                      ["mx1.enf.%s" % ZONE])
        s82 = mx_sink(sink_factory, 82)
        m = start(mtad_factory, sts_world, server={"workers": 1},
                  delivery={"mta_sts": {"fetch_timeout": "5m"}})
        slow = "x@slow.%s" % ZONE
        qid = send(m, "a@home.test", [slow], make_message(1))
        wait_for(lambda: stalled.conns, 20, what="the policy fetch connected")
        send(m, "a@home.test", ["y@enf.%s" % ZONE], make_message(2))
        s81.wait_for(1)
        assert s82.received() == []
        assert "mta-sts: slow.%s" % ZONE not in m.log_text()
        stalled.close()
        ln = line_of(m, "mta-sts: slow.%s: fetch failed" % ZONE)
        assert ln.endswith("; no policy"), ln
        assert s82.wait_for(1)[0].rcpt_tos == [slow]
        assert "status=sent" in line_of(m, "%s: to=<%s>" % (qid, slow))
    finally:
        stalled.close()


def send_requiretls(m, rcpt, msg):
    """One message over STARTTLS into m with MAIL ... REQUIRETLS; its id."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = smtplib.SMTP("127.0.0.1", m.port, timeout=10)
    try:
        s.ehlo("client.test")
        s.starttls(context=ctx)
        s.ehlo("client.test")
        code, resp = s.mail("a@home.test", ["REQUIRETLS"])
        assert code == 250, resp
        code, resp = s.rcpt(rcpt)
        assert code == 250, resp
        code, resp = s.data(msg)
        assert code == 250, resp
        return re.search(rb"queued as ([0-9A-F]{16})", resp).group(1).decode()
    finally:
        s.quit()


def test_requiretls_over_an_mta_sts_covered_mx(mtad_factory, sink_factory,
                                               sts_world):
    """RFC 8689 4.2.1: a REQUIRETLS message may follow an MX answer that is
    not DNSSEC-secure (this zone is unsigned) only when an MTA-STS policy
    covers the MX host: enf.sts.test (enforce) is delivered, verify=sts;
    nonem.sts.test (mode none) bounces 5.7.10."""
    ca = sts_world["ca"]
    s81 = mx_sink(sink_factory, 81, ca, ["mx1.enf.%s" % ZONE])
    s81.requiretls = True
    s82 = mx_sink(sink_factory, 82, ca, ["mx.elsewhere.%s" % ZONE])
    s82.requiretls = True
    chain, key = ca.issue(["mx.test.example"])
    m = start(mtad_factory, sts_world,
              tls={"cert_file": chain, "key_file": key})
    rcpt = "r@enf.%s" % ZONE
    qid = send_requiretls(m, rcpt, make_message(1))
    assert s81.wait_for(1)[0].rcpt_tos == [rcpt]
    ln = line_of(m, "%s: to=<%s>" % (qid, rcpt))
    assert "status=sent" in ln and "verify=sts" in ln, ln
    rcpt = "r@nonem.%s" % ZONE
    qid = send_requiretls(m, rcpt, make_message(2))
    ln = line_of(m, "%s: to=<%s>" % (qid, rcpt))
    assert "status=bounced (550 5.7.10 REQUIRETLS: the MX record that " \
        "names mx.elsewhere.%s is neither DNSSEC-secure nor covered by an " \
        "MTA-STS policy" % ZONE in ln, ln
    assert s82.received() == []


def test_tls_required_no_ignores_the_policy(mtad_factory, sink_factory,
                                            sts_world):
    """RFC 8689 5: a message with "TLS-Required: No" is delivered as if
    the domain had no MTA-STS policy: bad.sts.test's enforce policy does
    not list its MX, which still gets this message (and not another).
    One worker: the worker that accepted the message delivers it from the
    envelope it kept at the start of DATA (the hand-off), which must learn
    of the field found later in the header section, and of the body that
    moved behind the envelope line it added."""
    s82 = mx_sink(sink_factory, 82)
    m = start(mtad_factory, sts_world, server={"workers": 1})
    msg = (b"Subject: not secret\r\nTLS-Required: No\r\n\r\nhello\r\n")
    qid = send(m, "a@home.test", ["n@bad.%s" % ZONE], msg)
    got = s82.wait_for(1)[0]
    assert got.rcpt_tos == ["n@bad.%s" % ZONE]
    assert got.data.endswith(msg.replace(b"\r\n", b"\n")) or \
        got.data.endswith(msg), got.data
    text = wait_log(m, "%s: to=<n@bad.%s>, relay=" % (qid, ZONE))
    mine = [ln for ln in text.splitlines()
            if "%s: to=<n@bad.%s>" % (qid, ZONE) in ln]
    assert len(mine) == 1 and "status=sent" in mine[0], mine
    qid = send(m, "a@home.test", ["p@bad.%s" % ZONE], make_message(2))
    ln = line_of(m, "%s: to=<p@bad.%s>" % (qid, ZONE))
    assert "status=deferred (451 4.7.5 MTA-STS policy of bad." in ln, ln
    assert len(s82.received()) == 1
