"""REQUIRETLS (RFC 8689) at delivery, end to end: a message received with
MAIL ... REQUIRETLS (over STARTTLS into mtad) goes on only over TLS that
authenticated the next hop, to a hop whose EHLO (after STARTTLS) lists
REQUIRETLS, with REQUIRETLS on its MAIL FROM; else it bounces at once with
5.7.10 (no authenticated TLS: plaintext only, an untrusted certificate, an
MX answer that is not DNSSEC-secure) or 5.7.30 (no keyword), and nothing
reaches the next hop.  The bounce is headers only (RET=FULL disregarded,
RFC 8689 5), goes over verified TLS, carries REQUIRETLS when the sender's
host offers it, and goes without the keyword when it does not (its null
reverse path, RFC 8689 5).

Certificates come from the shared test CA (mtadtest.TestCA); sinks listen
on 127.0.0.x with random ports and name themselves by IP address (the
route hosts are literals) or by the test zone's names (the MX tests).
"""
import os
import re
import smtplib
import ssl

import pytest

from mtadtest import (ZONE, make_message, make_test_ca, tls_server_context,
                      wait_for)


@pytest.fixture
def ca(workdir):
    d = os.path.join(workdir, "ca")
    os.makedirs(d)
    os.chmod(d, 0o755)
    return make_test_ca(d)


def tls_sink(sink_factory, ca, names, host="127.0.0.1", requiretls=True):
    s = sink_factory(host=host)
    chain, key = ca.issue(names)
    s.tls_context = tls_server_context(chain, key)
    s.requiretls = requiretls
    return s


def start(mtad_factory, ca, route, home, dns=None):
    """mtad: STARTTLS inbound (a leaf of ca), tls.ca_file = ca, default
    route `route`, home.test (the senders' domain) to the sink `home`."""
    chain, key = ca.issue(["mx.test.example"])
    cfg = {"routes": {"default": route,
                      "static": {"home.test": home.route}},
           "tls": {"ca_file": ca.cert, "cert_file": chain, "key_file": key},
           "delivery": {"retry": ["1s", "2s"], "connect_timeout": "2s"}}
    if dns is not None:
        cfg["dns"] = {"servers": [dns], "timeout": "1s", "attempts": 1}
    return mtad_factory(cfg).start()


def send(m, rcpt, msg, requiretls=True, ret=None):
    """One message over STARTTLS into m, with MAIL ... REQUIRETLS; its id."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = smtplib.SMTP("127.0.0.1", m.port, timeout=10)
    try:
        s.ehlo("client.test")
        s.starttls(context=ctx)
        s.ehlo("client.test")
        assert s.has_extn("requiretls")
        opts = (["REQUIRETLS"] if requiretls else []) + \
            (["RET=%s" % ret] if ret else [])
        code, resp = s.mail("alice@home.test", opts)
        assert code == 250, resp
        code, resp = s.rcpt(rcpt)
        assert code == 250, resp
        code, resp = s.data(msg)
        assert code == 250, resp
        return re.search(rb"queued as ([0-9A-F]{16})", resp).group(1).decode()
    finally:
        s.quit()


def line_of(m, qid, rcpt, status, timeout=20):
    needle = "%s: to=<%s>" % (qid, rcpt)

    def find():
        for line in m.log_text().splitlines():
            if needle in line and "status=%s" % status in line:
                return line
        return None
    return wait_for(find, timeout, what="%s status=%s" % (needle, status))


def dsn_of(home, rcpt="alice@home.test"):
    got = home.wait_for(1, timeout=20)
    assert len(got) == 1, got
    dsn = got[0]
    assert dsn.mail_from == "" and dsn.rcpt_tos == [rcpt], dsn
    return dsn, dsn.data.decode("utf-8", "replace")


def assert_never_sent(sink):
    assert sink.received() == []
    assert "MAIL" not in [v for _, v in sink.commands]


# --- delivered -----------------------------------------------------------

def test_verified_hop_with_the_keyword_gets_it(mtad_factory, sink_factory,
                                               ca):
    remote = tls_sink(sink_factory, ca, ["127.0.0.1"])
    home = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, remote.route, home)
    qid = send(m, "x@far.test", make_message(1))
    plain = send(m, "y@far.test", make_message(2), requiretls=False)
    got = remote.wait_for(2)
    by_rcpt = {g.rcpt_tos[0]: g for g in got}
    assert "REQUIRETLS" in by_rcpt["x@far.test"].mail_params
    assert by_rcpt["x@far.test"].tls is not None
    assert "REQUIRETLS" not in by_rcpt["y@far.test"].mail_params
    line = line_of(m, qid, "x@far.test", "sent")
    assert re.search(r"tls=TLSv1\.[23] cipher=\S+ verify=ca", line), line
    line_of(m, plain, "y@far.test", "sent")
    assert home.received() == []


# --- bounced ---------------------------------------------------------------

def test_plaintext_hop_bounces_5_7_10_and_dsn_goes_with_requiretls(
        mtad_factory, sink_factory, ca):
    remote = sink_factory()             # no STARTTLS at all
    home = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, remote.route, home)
    qid = send(m, "x@far.test", make_message(3, b"the secret body\r\n"),
               ret="FULL")
    line = line_of(m, qid, "x@far.test", "bounced")
    assert "550 5.7.10 REQUIRETLS" in line, line
    dsn, body = dsn_of(home)
    assert "Status: 5.7.10\r\n" in body, body
    assert "Diagnostic-Code: smtp; 550 5.7.10 REQUIRETLS" in body, body
    # RET=FULL is disregarded: the header only (RFC 8689 5)
    assert "X-Serial: 3" in body
    assert "the secret body" not in body
    # the bounce itself went the REQUIRETLS way
    assert dsn.tls is not None
    assert "REQUIRETLS" in dsn.mail_params, dsn.mail_params
    assert_never_sent(remote)
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()
    r = m.ctl("show", qid)
    assert r.returncode != 0            # gone: bounced, not deferred


def test_hop_without_the_keyword_bounces_5_7_30(mtad_factory, sink_factory,
                                                ca):
    remote = tls_sink(sink_factory, ca, ["127.0.0.1"], requiretls=False)
    home = tls_sink(sink_factory, ca, ["127.0.0.1"], requiretls=False)
    m = start(mtad_factory, ca, remote.route, home)
    qid = send(m, "x@far.test", make_message(4))
    line = line_of(m, qid, "x@far.test", "bounced")
    assert "550 5.7.30 REQUIRETLS support required" in line, line
    dsn, body = dsn_of(home)
    assert "Status: 5.7.30\r\n" in body, body
    # home offers no REQUIRETLS either: the bounce (null reverse path)
    # still goes, over verified TLS, without the parameter
    assert dsn.tls is not None
    assert "REQUIRETLS" not in dsn.mail_params
    assert remote.tls, "the hop was reached over TLS"
    assert_never_sent(remote)


def test_untrusted_certificate_bounces_5_7_10(mtad_factory, sink_factory,
                                              ca, workdir):
    d = os.path.join(workdir, "other")
    os.makedirs(d)
    other = make_test_ca(d, "Other CA")
    remote = tls_sink(sink_factory, other, ["127.0.0.1"])
    home = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, remote.route, home)
    qid = send(m, "x@far.test", make_message(5))
    line = line_of(m, qid, "x@far.test", "bounced")
    assert "550 5.7.10 REQUIRETLS: no authenticated TLS session" in line, \
        line
    _, body = dsn_of(home)
    assert "Status: 5.7.10\r\n" in body, body
    assert_never_sent(remote)


# --- the MX rule (RFC 8689 4.2.1 step 2) ----------------------------------

ONE = "one.%s" % ZONE                   # MX 10 mx.one -> 127.0.0.21
MX_ONE = "mx.one.%s" % ZONE


def test_insecure_mx_bounces_secure_mx_delivers(mtad_factory, sink_factory,
                                                ca, signed_dns):
    remote = tls_sink(sink_factory, ca, [MX_ONE], host="127.0.0.21")
    home = tls_sink(sink_factory, ca, ["127.0.0.1"])
    route = "smtp:%s:%d" % (ONE, remote.port)
    # nsd itself: answers without the AD bit, so the MX is not secure
    m = start(mtad_factory, ca, route, home, dns=signed_dns.nsd)
    qid = send(m, "x@far.test", make_message(6))
    line = line_of(m, qid, "x@far.test", "bounced")
    assert "550 5.7.10 REQUIRETLS: the MX record that names %s is neither "\
        "DNSSEC-secure" % MX_ONE in line, line
    _, body = dsn_of(home)
    assert "Status: 5.7.10\r\n" in body
    assert remote.connections == 0
    # the same mail through the validating resolver: AD=1, delivered
    m.stop()
    m.cfg["dns"]["servers"] = [signed_dns.resolver]
    m.write_config()
    m.start()
    qid = send(m, "z@far.test", make_message(7))
    got = remote.wait_for(1)[0]
    assert "REQUIRETLS" in got.mail_params and got.tls["sni"] == MX_ONE
    line = line_of(m, qid, "z@far.test", "sent")
    assert "verify=ca" in line, line


# --- idle connections ------------------------------------------------------

def send_plain_then_requiretls(m, remote):
    """A plain message first (its connection then idles), then a
    REQUIRETLS one to the same destination; their ids."""
    plain = send(m, "y@far.test", make_message(8), requiretls=False)
    line_of(m, plain, "y@far.test", "sent")
    assert remote.connections == 1
    return plain, send(m, "x@far.test", make_message(9))


def test_no_ride_on_an_idle_unverified_connection(mtad_factory,
                                                  sink_factory, ca, workdir):
    d = os.path.join(workdir, "other")
    os.makedirs(d)
    other = make_test_ca(d, "Other CA")
    # TLS the default level `may` takes without checking the certificate
    remote = tls_sink(sink_factory, other, ["127.0.0.1"])
    home = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, remote.route, home)
    plain, qid = send_plain_then_requiretls(m, remote)
    assert "verify=none" in line_of(m, plain, "y@far.test", "sent")
    line = line_of(m, qid, "x@far.test", "bounced")
    assert "550 5.7.10 REQUIRETLS" in line, line
    # a connection of its own, refused at the certificate
    assert remote.connections == 2
    assert [g.rcpt_tos for g in remote.received()] == [["y@far.test"]]
    _, body = dsn_of(home)
    assert "Status: 5.7.10\r\n" in body


def test_idle_verified_connection_without_keyword_is_not_used(
        mtad_factory, sink_factory, ca):
    remote = tls_sink(sink_factory, ca, ["127.0.0.1"], requiretls=False)
    home = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, remote.route, home)
    r = m.ctl("tls", "policy", "set", "far.test", "verify")
    assert r.returncode == 0, r.stderr
    plain, qid = send_plain_then_requiretls(m, remote)
    assert "verify=ca" in line_of(m, plain, "y@far.test", "sent")
    line = line_of(m, qid, "x@far.test", "bounced")
    assert "550 5.7.30 REQUIRETLS support required" in line, line
    assert [g.rcpt_tos for g in remote.received()] == [["y@far.test"]]
    assert remote.connections == 2
    _, body = dsn_of(home)
    assert "Status: 5.7.30\r\n" in body
