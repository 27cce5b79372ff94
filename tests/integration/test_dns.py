"""MX routes resolved through real DNS: `mtactl route get` against Debian's
nsd serving the test zone of mtadtest.py, plus a server that answers
SERVFAIL and one that never answers.

Each test writes a relay.yaml with its own routes.db and `dns.servers`
pointing at the server under test, then runs the real mtactl binary.
Output lines for addresses read "    PREF HOST[ADDR]:PORT ttl=Ns".
"""
import os
import re
import subprocess

import pytest

from mtadtest import ZONE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MTACTL = os.path.join(ROOT, os.environ.get("MTAD_BUILD", "build"), "mtactl")

ADDR_LINE = re.compile(r"^    (\d+) (\S+)\[([0-9a-f.:]+)\]:(\d+) ttl=(\d+)s")


def z(name):
    return "%s.%s" % (name, ZONE)


class Ctl:
    """A relay.yaml for mtactl: routes.default and dns.* as given."""

    def __init__(self, tmp_path, servers, default="mx", **dns):
        self.dir = str(tmp_path)
        os.makedirs(self.dir, exist_ok=True)
        self.path = os.path.join(self.dir, "relay.yaml")
        dns_lines = ["  servers: [%s]" % ", ".join(
            '"%s"' % s for s in servers)]
        dns.setdefault("timeout", "300ms")
        dns.setdefault("attempts", 1)
        for k, v in dns.items():
            dns_lines.append("  %s: %s" % (k, v))
        with open(self.path, "w") as f:
            f.write("routes:\n  db: %s/routes.mdb\n  default: \"%s\"\n"
                    "dns:\n%s\n" % (self.dir, default, "\n".join(dns_lines)))
        # create the routes db (route get opens it read-only)
        self.run("route", "add", "placeholder.invalid", "discard", check=0)

    def run(self, *args, check=None):
        r = subprocess.run([MTACTL, "-c", self.path, *args],
                           capture_output=True, text=True, timeout=60)
        if check is not None:
            assert r.returncode == check, "mtactl %s: rc=%d out=%r err=%r" % (
                " ".join(args), r.returncode, r.stdout, r.stderr)
        return r

    def get(self, addr, check=None):
        return self.run("route", "get", addr, check=check)


def addrs(out):
    """[(pref, host, addr, port, ttl)] in printed order."""
    res = []
    for line in out.splitlines():
        m = ADDR_LINE.match(line)
        if m:
            res.append((int(m.group(1)), m.group(2), m.group(3),
                        int(m.group(4)), int(m.group(5))))
    return res


def test_mx_sorted_equal_preferences_in_random_order(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd])
    firsts = set()
    for _ in range(30):         # both orders of the two pref-10 hosts
        out = ctl.get("user@" + z("multi"), check=0).stdout
        got = addrs(out)
        assert [(p, h) for p, h, _, _, _ in got][2] == (20, z("mx3.multi")), out
        assert sorted(got[:2]) == [
            (10, z("mx1.multi"), "127.0.0.11", 25, 300),
            (10, z("mx2.multi"), "127.0.0.12", 25, 300)], out
        assert got[2][2] == "127.0.0.13"
        firsts.add(got[0][1])
    # P(one order missing in 30 runs) = 2 * 2^-30
    assert firsts == {z("mx1.multi"), z("mx2.multi")}


def test_null_mx_and_nxdomain_are_distinct(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd])
    r = ctl.get("user@" + z("nullmx"), check=1)
    assert "%s: nullmx: domain %s accepts no mail (null MX)" % (
        z("nullmx"), z("nullmx")) in r.stdout
    assert addrs(r.stdout) == []
    r = ctl.get("user@" + z("nosuch"), check=1)
    assert "%s: nxdomain:" % z("nosuch") in r.stdout
    assert "NXDOMAIN" in r.stdout


def test_cname_chain_to_an_mx_domain_is_followed(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd])
    r = ctl.get("user@" + z("alias2"), check=0)
    assert "%s: CNAME to %s" % (z("alias2"), z("multi")) in r.stdout
    assert sorted(a for _, _, a, _, _ in addrs(r.stdout)) == [
        "127.0.0.11", "127.0.0.12", "127.0.0.13"]


def test_mx_host_that_is_a_cname_is_followed(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd])
    r = ctl.get("user@" + z("cnamehost"), check=0)
    assert addrs(r.stdout) == [(10, z("mxalias.cnamehost"), "127.0.0.31",
                                25, 300)]


def test_no_mx_falls_back_to_the_domains_address(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd])
    r = ctl.get("user@" + z("aonly"), check=0)
    assert "no MX; implicit MX" in r.stdout
    assert addrs(r.stdout) == [(0, z("aonly"), "127.0.0.41", 25, 300)]


def test_ipv6_family_and_preference(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd])
    assert addrs(ctl.get("u@" + z("v6only"), check=0).stdout) == [
        (10, z("mx.v6only"), "::1", 25, 300)]
    assert [a for _, _, a, _, _ in addrs(
        ctl.get("u@" + z("dual"), check=0).stdout)] == ["127.0.0.52", "::1"]
    ctl6 = Ctl(tmp_path / "v6", [dns_servers.nsd], prefer="ipv6")
    assert [a for _, _, a, _, _ in addrs(
        ctl6.get("u@" + z("dual"), check=0).stdout)] == ["::1", "127.0.0.52"]
    ctl4 = Ctl(tmp_path / "v4", [dns_servers.nsd], address_family="ipv4")
    r = ctl4.get("u@" + z("v6only"), check=1)
    assert "no MX host of %s has an address" % z("v6only") in r.stdout
    assert "%s: no address (nodata)" % z("mx.v6only") in r.stdout


def test_mx_host_without_address(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd])
    r = ctl.get("u@" + z("badhost"), check=1)
    assert "10 %s: no address (nxdomain)" % z("nohost") in r.stdout


def test_address_limit(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd], address_limit=3)
    got = addrs(ctl.get("u@" + z("many"), check=0).stdout)
    assert len(got) == 3, got
    assert len({h for _, h, _, _, _ in got}) == 2   # 2 + 1 of 4 hosts


def test_servfail_is_temporary(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.servfail])
    r = ctl.get("u@" + z("multi"), check=1)
    assert "%s: tempfail: MX lookup for %s:" % (z("multi"), z("multi")) \
        in r.stdout, r.stdout
    assert "SERVFAIL" in r.stdout


def test_timeout_is_temporary(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.silent], timeout="200ms", attempts=2)
    r = ctl.get("u@" + z("multi"), check=1)
    assert "%s: tempfail: MX lookup for %s: timed out" % (
        z("multi"), z("multi")) in r.stdout, r.stdout


def test_servers_tried_in_order_past_a_broken_one(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.servfail, dns_servers.nsd])
    got = addrs(ctl.get("u@" + z("one"), check=0).stdout)
    assert got == [(10, z("mx.one"), "127.0.0.21", 25, 300)]
    ctl = Ctl(tmp_path / "t", [dns_servers.silent, dns_servers.nsd],
              timeout="200ms")
    got = addrs(ctl.get("u@" + z("one"), check=0).stdout)
    assert got == [(10, z("mx.one"), "127.0.0.21", 25, 300)]


def test_smtp_domain_route_looks_up_mx_brackets_do_not(dns_servers, tmp_path):
    ctl = Ctl(tmp_path, [dns_servers.nsd])
    ctl.run("route", "add", "a.example", "smtp:%s:2525" % z("one"), check=0)
    r = ctl.get("x@a.example", check=0)
    assert addrs(r.stdout) == [(10, z("mx.one"), "127.0.0.21", 2525, 300)]
    ctl.run("route", "add", "b.example", "smtp:[%s]:2526" % z("mx1.multi"),
            check=0)
    r = ctl.get("x@b.example", check=0)
    assert "no MX" in r.stdout          # the host itself, not its MX
    assert addrs(r.stdout) == [(0, z("mx1.multi"), "127.0.0.11", 2526, 300)]
    ctl.run("route", "add", "c.example", "smtp:[127.0.0.5]:25", check=0)
    r = ctl.get("x@c.example", check=0)
    assert r.stdout == ("x@c.example -> smtp:[127.0.0.5]:25 (matched domain "
                        "key 'c.example')\n")


def test_concurrent_lookups_of_one_name_are_joined(dns_servers, tmp_path):
    """Three fail-over entries name the same domain: mtactl starts three MX
    lookups at once in one loop; the counting SERVFAIL server must see one
    query (attempts 1, one server), not three."""
    srv = dns_servers.servfail_server
    ctl = Ctl(tmp_path, [dns_servers.servfail], attempts=1)
    ctl.run("route", "add", "j.example", ",".join(
        ["smtp:%s:%d" % (z("joined"), 2500 + i) for i in range(3)]), check=0)
    before = srv.count
    r = ctl.get("x@j.example", check=1)
    assert r.stdout.count("tempfail") == 3, r.stdout
    assert srv.count - before == 1, "%d queries" % (srv.count - before)


def test_validated_answers_are_secure(signed_dns, tmp_path):
    """Signed zone (ldns-signzone) served by nsd, validated by unbound with
    the zone's trust anchor: our queries carry AD=1, so the answers come
    back with AD=1 and the destination is marked secure."""
    ctl = Ctl(tmp_path, [signed_dns.resolver], timeout="2s")
    r = ctl.get("u@" + z("multi"), check=0)
    assert "%s: MX ttl=300s (dnssec)" % z("multi") in r.stdout, r.stdout
    got = addrs(r.stdout)
    assert len(got) == 3
    assert all(line.endswith("(dnssec)") for line in r.stdout.splitlines()
               if ADDR_LINE.match(line)), r.stdout
    r = ctl.get("u@" + z("cnamehost"), check=0)
    assert "(dnssec)" in r.stdout


def test_unvalidated_answers_are_not_secure(signed_dns, tmp_path):
    """The same signed zone straight from nsd (no validator): no AD bit."""
    ctl = Ctl(tmp_path, [signed_dns.nsd])
    r = ctl.get("u@" + z("multi"), check=0)
    assert len(addrs(r.stdout)) == 3
    assert "(dnssec)" not in r.stdout, r.stdout


def test_bogus_signature_is_temporary(signed_dns, tmp_path):
    ctl = Ctl(tmp_path, [signed_dns.resolver], timeout="2s")
    r = ctl.get("u@" + z("bogus"), check=1)
    assert "%s: tempfail:" % z("bogus") in r.stdout, r.stdout


@pytest.mark.parametrize("dns, want", [
    ('  servers: ["localhost"]', r"relay.yaml:\d+:\d+: dns.servers\[0\]: "
     r"expected resolver addresses"),
    ('  servers: "127.0.0.1:99999"', r"relay.yaml:\d+:\d+: dns.servers: "
     r"expected resolver addresses"),
    ("  address_family: ipv5", r"relay.yaml:\d+:\d+: dns.address_family: "
     r"expected ipv4, ipv6 or both"),
    ("  prefer: both", r"relay.yaml:\d+:\d+: dns.prefer: expected ipv4 or "
     r"ipv6"),
    ("  min_ttl: 2h\n  max_ttl: 1h", r"relay.yaml:\d+:\d+: dns.min_ttl: must "
     r"not be above dns.max_ttl"),
    ("  attempts: 0", r"relay.yaml:\d+:\d+: dns.attempts: expected an "
     r"integer from 1 to 10"),
    ("  timeout: soon", r"relay.yaml:\d+:\d+: dns.timeout: expected a "
     r"duration"),
])
def test_bad_dns_settings_name_file_line_col(tmp_path, dns, want):
    path = os.path.join(str(tmp_path), "relay.yaml")
    with open(path, "w") as f:
        f.write("routes:\n  db: %s/r.mdb\n  default: mx\ndns:\n%s\n" % (
            tmp_path, dns))
    r = subprocess.run([MTACTL, "-c", path, "check"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert re.search(want, r.stdout + r.stderr), r.stdout + r.stderr
