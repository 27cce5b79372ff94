"""DANE for SMTP (RFC 7672) with a real DNSSEC-signed zone: nsd serves
mtad.test signed with ldns-signzone plus TLSA records made at set-up from
the test certificates, unbound validates it with the zone's trust anchor
(AD=1), and a second nsd serves plain.test unsigned (AD=0: insecure).

The names under dane.mtad.test (MX host -> 127.0.0.x, TLSA at _25._tcp):
  ee       3 1 1 of the sink's key                 -> .71 (match)
  eebad    3 1 1 of another key                    -> .72 (mismatch)
  none     no TLSA (secure denial)                 -> .76
  tlsabogus 3 1 1 of the sink, RRSIG broken        -> .77 (SERVFAIL)
  cname    MX host is a CNAME; TLSA at its target  -> .78
and plain.test: MX mx -> .79, a TLSA that matches nothing, insecure."""
import os
import shutil
import tempfile

import pytest

from mtadtest import (ZONE, SignedDns, answer_rdata, make_keyed_cert, query,
                      rcode, tlsa_record)

T_TLSA = 52
D = "dane." + ZONE
PLAIN = "plain.test"


def dane_zone(leaf, other):
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
    mx("none", 76)
    mx("tlsabogus", 77, [tlsa_record(leaf, 3, 1, 1)])
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


class DaneWorld:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="mtad-dane-", dir="/dev/shm")
        try:
            self.leaf, self.key = make_keyed_cert(self.dir, "leaf", "ec")
            self.other, _ = make_keyed_cert(self.dir, "other", "ec")
            extra, plain = dane_zone(self.leaf, self.other)
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
    os.makedirs("/dev/shm", exist_ok=True)
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


def test_unsigned_zone_answers_are_insecure(dane):
    ans = ask(dane.dns.resolver, "_25._tcp.mx.%s" % PLAIN)
    assert rcode(ans) == 0 and not ans[3] & 0x20, "want NOERROR, AD=0"
    assert answer_rdata(ans, T_TLSA) == [rdata_of(
        tlsa_record(dane.other, 3, 1, 1))]
