"""DANE for SMTP (RFC 7672) end to end, with a real DNSSEC-signed zone:
nsd serves mtad.test signed with ldns-signzone plus TLSA records made at
set-up from the test certificates, unbound validates it with the zone's
trust anchor (AD=1), and a second nsd serves plain.test unsigned (AD=0:
insecure).  mtad (routes by MX, dns.servers = that unbound) delivers to
TLS sinks on 127.0.0.x:25 that serve one leaf from the test CA (chain:
leaf + CA) named for every MX host below except mx.taname.

The names under dane.mtad.test (MX host -> 127.0.0.x, TLSA at _25._tcp):
  ee        3 1 1 of the sink's key                 -> .71 (match)
  eebad     3 1 1 of another key                    -> .72 (mismatch)
  ta        2 1 1 of the test CA                    -> .73 (match)
  tabad     2 1 1 of another CA                     -> .74 (mismatch)
  pkix      only 1 1 1 and 0 0 1 (unusable in SMTP) -> .75
  none      no TLSA (secure denial)                 -> .76
  tlsabogus 3 1 1 of the sink, RRSIG broken         -> .77 (SERVFAIL)
  cname     MX host is a CNAME; TLSA at its target  -> .78
  taname    2 1 1 of the test CA, leaf not named    -> .80
  mixed     MX host mx.plain.test (secure MX answer, insecure host)
and plain.test: MX mx -> .79, a TLSA that matches nothing, insecure.
Port 25 needs root (CI runs as root); loopback only."""
import os
import re
import shutil
import tempfile

import pytest

from mtadtest import (ZONE, SignedDns, answer_rdata, make_keyed_cert,
                      make_message, make_test_ca, query, rcode, send,
                      tls_server_context, tlsa_record, wait_for)

T_TLSA = 52
D = "dane." + ZONE
PLAIN = "plain.test"


def dane_zone(leaf, other, ca, other_ca):
    """Records for ZONE (relative names) and the unsigned plain.test."""
    rel = lambda n: "%s.dane" % n  # noqa: E731
    lines = []

    def mx(name, octet, tlsa=()):
        lines.append("%s IN MX 10 mx.%s" % (rel(name), rel(name)))
        lines.append("mx.%s IN A 127.0.0.%d" % (rel(name), octet))
        for t in tlsa:
            lines.append("_25._tcp.mx.%s IN TLSA %s" % (rel(name), t))
    mx("ee", 71, [tlsa_record(leaf, 3, 1, 1)])
    mx("eebad", 72, [tlsa_record(other, 3, 1, 1)])
    mx("ta", 73, [tlsa_record(ca, 2, 1, 1)])
    mx("tabad", 74, [tlsa_record(other_ca, 2, 1, 1)])
    mx("pkix", 75, [tlsa_record(leaf, 1, 1, 1), tlsa_record(ca, 0, 0, 1)])
    mx("none", 76)
    mx("taname", 80, [tlsa_record(ca, 2, 1, 1)])
    mx("tlsabogus", 77, [tlsa_record(leaf, 3, 1, 1)])
    lines.append("mixed.dane IN MX 10 mx.%s." % PLAIN)
    lines.append("cname.dane IN MX 10 mx.cname.dane")
    lines.append("mx.cname.dane IN CNAME real.cname.dane")
    lines.append("real.cname.dane IN A 127.0.0.78")
    lines.append("_25._tcp.real.cname.dane IN TLSA %s"
                 % tlsa_record(leaf, 3, 1, 1))
    plain = """$ORIGIN %(z)s.
$TTL 300
@    IN SOA ns.%(z)s. hostmaster.%(z)s. 1 3600 600 86400 60
@    IN NS  ns
ns   IN A   127.0.0.1
@    IN MX  10 mx
mx   IN A   127.0.0.79
_25._tcp.mx IN TLSA %(t)s
""" % {"z": PLAIN, "t": tlsa_record(other, 3, 1, 1)}
    return "\n".join(lines) + "\n", plain


# MX hosts the sinks' leaf is named for (all but mx.taname)
NAMED = ["mx.%s.%s" % (n, D) for n in ("ee", "eebad", "ta", "tabad", "pkix",
                                        "none", "tlsabogus", "cname")] + [
    "real.cname.%s" % D, "mx.%s" % PLAIN]


class DaneWorld:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="mtad-dane-", dir="/dev/shm")
        os.chmod(self.dir, 0o755)
        try:
            for sub in ("ca", "other_ca"):
                os.makedirs(os.path.join(self.dir, sub))
                os.chmod(os.path.join(self.dir, sub), 0o755)
            self.ca = make_test_ca(os.path.join(self.dir, "ca"))
            self.other_ca = make_test_ca(os.path.join(self.dir, "other_ca"),
                                       name="Another CA")
            self.leaf, self.key = self.ca.issue(NAMED)
            self.other, _ = make_keyed_cert(self.dir, "other", "ec")
            extra, plain = dane_zone(self.leaf, self.other, self.ca.cert,
                                     self.other_ca.cert)
            self.dns = SignedDns(os.path.join(self.dir, "dns"),
                                 bogus=("bogus",
                                        "_25._tcp.mx.tlsabogus.dane"),
                                 extra=extra, unsigned=(PLAIN, plain))
        except Exception:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def stop(self):
        self.dns.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def dane():
    w = DaneWorld()
    try:
        yield w
    finally:
        w.stop()


def ask(resolver, name, qtype=T_TLSA):
    ans = query(resolver, name, qtype, timeout=5.0, ad=True)
    assert ans is not None, "no answer from %s for %s" % (resolver, name)
    return ans


def rdata_of(record):
    u, s, m, data = record.split()
    return bytes([int(u), int(s), int(m)]) + bytes.fromhex(data)


# ---- the zone itself: what the delivery tests stand on ----

def test_tlsa_made_from_the_certificate_is_served_and_validated(dane):
    ans = ask(dane.dns.resolver, "_25._tcp.mx.ee.%s" % D)
    assert rcode(ans) == 0 and ans[3] & 0x20, "want NOERROR with AD=1"
    assert answer_rdata(ans, T_TLSA) == [rdata_of(
        tlsa_record(dane.leaf, 3, 1, 1))]


def test_tlsa_with_a_broken_signature_fails_validation(dane):
    ans = ask(dane.dns.resolver, "_25._tcp.mx.tlsabogus.%s" % D)
    assert rcode(ans) == 2, "a bogus TLSA rrset must be SERVFAIL"


def test_missing_tlsa_is_a_validated_denial(dane):
    ans = ask(dane.dns.resolver, "_25._tcp.mx.none.%s" % D)
    assert rcode(ans) in (0, 3) and ans[3] & 0x20
    assert answer_rdata(ans, T_TLSA) == []


def test_mixed_mx_is_secure_but_its_host_is_not(dane):
    assert ask(dane.dns.resolver, "mixed." + D, 15)[3] & 0x20
    assert not ask(dane.dns.resolver, "mx." + PLAIN, 1)[3] & 0x20


def test_unsigned_zone_answers_are_insecure(dane):
    ans = ask(dane.dns.resolver, "_25._tcp.mx.%s" % PLAIN)
    assert rcode(ans) == 0 and not ans[3] & 0x20, "want NOERROR, AD=0"
    assert answer_rdata(ans, T_TLSA) == [rdata_of(
        tlsa_record(dane.other, 3, 1, 1))]


# ---- delivery ----

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="sinks on port 25 need root")


def dane_sink(sink_factory, world, octet, **kw):
    s = sink_factory(host="127.0.0.%d" % octet, port=25, **kw)
    s.tls_context = tls_server_context(world.leaf, world.key)
    return s


def start(mtad_factory, world, level, subdir=None, route="mx"):
    return mtad_factory({
        "routes": {"default": route},
        "dns": {"servers": [world.dns.resolver], "timeout": "2s",
                "attempts": 1},
        # a CA that signed none of the sinks' certificates: a check
        # against tls.ca_file fails, so only DANE can authenticate them
        "tls": {"ca_file": world.other_ca.cert},
        "delivery": {"tls": level, "retry": ["1s", "2s"],
                     "connect_timeout": "2s"}}, subdir=subdir).start()


def result_line(m, qid, rcpt, status, timeout=20):
    """The log line of qid's result for rcpt with status=status."""
    pat = re.compile(r"^.*%s: to=<%s>.*status=%s.*$" % (
        re.escape(qid), re.escape(rcpt), status), re.M)
    return wait_for(lambda: (pat.search(m.log_text()) or [None])[0],
                    timeout, what="%s %s status=%s" % (qid, rcpt, status))


def deliver_one(mtad_factory, world, level, name, subdir=None):
    """mtad at level; one message to x@<name>; (mtad, qid, rcpt)."""
    m = start(mtad_factory, world, level, subdir)
    rcpt = "x@%s" % name
    qid = send(m, "a@src.test", [rcpt], make_message(1))
    return m, qid, rcpt


# (name under D, sink octet, level, the SNI the sink must see)
VERIFIED = [
    ("ee", 71, "dane", "mx.ee." + D),
    ("ee", 71, "dane-only", "mx.ee." + D),
    ("ta", 73, "dane", "mx.ta." + D),
    # RFC 7672 2.2.3 and 8.1: the TLSA and the SNI of the CNAME's target
    ("cname", 78, "dane-only", "real.cname." + D),
]


@needs_root
@pytest.mark.parametrize("name,octet,level,sni", VERIFIED,
                         ids=["%s-%s" % (v[0], v[2]) for v in VERIFIED])
def test_matching_tlsa_is_verify_dane(dane, mtad_factory, sink_factory,
                                      name, octet, level, sni):
    s = dane_sink(sink_factory, dane, octet)
    m, qid, rcpt = deliver_one(mtad_factory, dane, level, name + "." + D)
    msg = s.wait_for(1)[0]
    assert msg.tls is not None and msg.tls["sni"] == sni, msg.tls
    line = result_line(m, qid, rcpt, "sent")
    assert re.search(r"tls=TLSv1\.[23] cipher=\S+ verify=dane", line), line


# (name under D, sink octet, level, in the deferral line, handshake done)
DEFERRED = [
    ("eebad", 72, "dane", "tls_failure=tlsa-invalid", True),
    ("tabad", 74, "dane", "tls_failure=tlsa-invalid", True),
    ("taname", 80, "dane", "tls_failure=certificate-host-mismatch", True),
    # dropped before connecting (RFC 7672 2.2): no host is tried
    ("none", 76, "dane-only", "no usable TLSA record for", False),
    ("tlsabogus", 77, "dane", "TLSA lookup failed", False),
    ("tlsabogus", 77, "dane-only", "TLSA lookup failed", False),
]


@needs_root
@pytest.mark.parametrize("name,octet,level,why,handshake", DEFERRED,
                         ids=["%s-%s" % (v[0], v[2]) for v in DEFERRED])
def test_dane_failure_defers(dane, mtad_factory, sink_factory, name, octet,
                             level, why, handshake):
    s = dane_sink(sink_factory, dane, octet)
    m, qid, rcpt = deliver_one(mtad_factory, dane, level, name + "." + D)
    line = result_line(m, qid, rcpt, "deferred")
    assert "451 4.7.5 " in line and why in line, line
    assert s.received() == []
    if handshake:                       # TLS came up; no mail went over it
        assert s.tls, "the sink saw no handshake"
    else:
        assert s.connections == 0


@needs_root
def test_only_unusable_records_make_tls_mandatory_unauthenticated(
        dane, mtad_factory, sink_factory):
    s = dane_sink(sink_factory, dane, 75)
    s.starttls = False
    m, qid, rcpt = deliver_one(mtad_factory, dane, "dane", "pkix." + D)
    line = result_line(m, qid, rcpt, "deferred")
    assert "4.7" in line, line
    assert s.received() == []
    s.starttls = True                   # the retry finds STARTTLS
    assert s.wait_for(1, timeout=30)[0].tls is not None
    line = result_line(m, qid, rcpt, "sent")
    assert re.search(r"tls=TLSv1\.[23] ", line), line
    assert "verify=dane" not in line, line


@needs_root
def test_no_tlsa_dane_is_opportunistic(dane, mtad_factory, sink_factory):
    s = dane_sink(sink_factory, dane, 76)
    s.starttls = False
    m, qid, rcpt = deliver_one(mtad_factory, dane, "dane", "none." + D)
    assert s.wait_for(1)[0].tls is None
    assert "tls=none" in result_line(m, qid, rcpt, "sent")


@needs_root
@pytest.mark.parametrize("domain", [PLAIN, "mixed." + D])
def test_insecure_answers_fall_back(dane, mtad_factory, sink_factory,
                                    domain):
    """plain.test: nothing is secure.  mixed: the MX answer is secure but
    its host's address answer (in plain.test) is not, so no TLSA is asked
    (RFC 7672 2.2.2).  Either way the TLSA at mx.plain.test, which matches
    nothing, does not count: dane delivers as may, dane-only defers."""
    s = dane_sink(sink_factory, dane, 79)
    m, qid, rcpt = deliver_one(mtad_factory, dane, "dane", domain)
    assert s.wait_for(1)[0].tls is not None
    line = result_line(m, qid, rcpt, "sent")
    assert "verify=dane" not in line and "tls_failure" not in line, line
    m.stop()
    m, qid, rcpt = deliver_one(mtad_factory, dane, "dane-only", domain,
                               subdir="only")
    line = result_line(m, qid, rcpt, "deferred")
    assert "no usable TLSA record for" in line, line
    assert len(s.received()) == 1


@needs_root
def test_host_route_uses_the_tlsa_of_its_host(dane, mtad_factory,
                                               sink_factory):
    """smtp:[host]:25 has no MX: the host's secure addresses are enough
    for its TLSA to count (RFC 7672 2.2.2)."""
    s = dane_sink(sink_factory, dane, 71)
    m = start(mtad_factory, dane, "dane-only",
              route="smtp:[mx.ee.%s]:25" % D)
    qid = send(m, "a@src.test", ["x@elsewhere.test"], make_message(1))
    assert s.wait_for(1)[0].tls is not None
    assert "verify=dane" in result_line(m, qid, "x@elsewhere.test", "sent")


@needs_root
def test_dane_connections_do_not_resume_sessions(dane, mtad_factory,
                                                 sink_factory):
    """OpenSSL matches TLSA records only in a full handshake: every DANE
    connection does one (tlspol.h), so the second still says verify=dane."""
    s = dane_sink(sink_factory, dane, 71)
    s.close_after_data = True           # a fresh connection per message
    m = start(mtad_factory, dane, "dane-only")
    for i in range(2):
        rcpt = "r%d@ee.%s" % (i, D)
        qid = send(m, "a@src.test", [rcpt], make_message(i))
        assert "verify=dane" in result_line(m, qid, rcpt, "sent")
    got = s.wait_for(2)
    assert [g.tls["resumed"] for g in got] == [False, False]
    assert s.connections == 2
    assert "status=deferred" not in m.log_text()
