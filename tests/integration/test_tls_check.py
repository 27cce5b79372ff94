"""mtactl tls check DOMAIN under DANE (RFC 7672), on test_dane.py's signed
zone and validating resolver: the TLSA state of each MX host, the level
DANE leaves in force, and the live probe judged as the delivery judges it.
Sinks on 127.0.0.x:25 need root (CI runs as root)."""
import re

from test_dane import D, dane, dane_sink, needs_root  # noqa: F401 (fixture)
from test_tls_out import check_fields


def check(mtad_factory, world, level, name, connect_timeout="2s"):
    m = mtad_factory({
        "routes": {"default": "mx"},
        "dns": {"servers": [world.dns.resolver], "timeout": "2s",
                "attempts": 1},
        "tls": {"ca_file": world.other_ca.cert},
        "delivery": {"tls": level, "connect_timeout": connect_timeout}})
    m.start()
    r = m.ctl("tls", "check", "%s.%s" % (name, D))
    return r, check_fields(r.stdout)


@needs_root
def test_tls_check_matching_tlsa(dane, mtad_factory, sink_factory):
    dane_sink(sink_factory, dane, 71)
    r, f = check(mtad_factory, dane, "dane", "ee")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f["mx of:"] == ["ee.%s (dnssec)" % D]
    assert f["mx host:"] == ["mx.ee.%s [127.0.0.71]:25" % D]
    assert f["tlsa:"][0] == "usable" and f["tlsa:"][1].startswith("3 1 1 ")
    assert f["in force:"] == ["dane (authenticate with TLSA), TLS required"]
    assert re.match(r"tls=TLSv1\.[23] cipher=\S+ verify=dane$", f["tls:"][0])
    assert f["verdict:"] == ["passes"]


@needs_root
def test_tls_check_mismatching_tlsa_fails(dane, mtad_factory, sink_factory):
    dane_sink(sink_factory, dane, 72)
    r, f = check(mtad_factory, dane, "dane", "eebad")
    assert r.returncode == 1, r.stdout
    assert f["tlsa:"][0] == "usable"
    assert "tls_failure=tlsa-invalid" in f["tls:"][0], f
    assert f["verdict:"][0].startswith("fails dane: "), f


@needs_root
def test_tls_check_without_tlsa_under_dane_only(dane, mtad_factory,
                                                sink_factory):
    dane_sink(sink_factory, dane, 76)
    r, f = check(mtad_factory, dane, "dane-only", "none")
    assert r.returncode == 1, r.stdout
    assert f["tlsa:"] == ["none"]
    assert f["in force:"][0] == "not tried:"
    assert "no usable TLSA record" in f["in force:"][1], f
    assert f["result:"] == ["no host would be tried: mail defers"]
    # the probe still tells what the server offers
    assert "banner:" in f


@needs_root
def test_tls_check_tlsa_lookup_failure(dane, mtad_factory, sink_factory):
    dane_sink(sink_factory, dane, 77)
    r, f = check(mtad_factory, dane, "dane", "tlsabogus")
    assert r.returncode == 1, r.stdout
    assert f["in force:"][0] == "not tried:"
    assert "TLSA lookup failed" in f["in force:"][1], f


# ---- MTA-STS (test_mta_sts.py's zone, policy server and CA) ---------------

from test_mta_sts import ZONE as STS_ZONE, mx_sink, sts_world  # noqa: E402,F401
from test_mta_sts import start as sts_start  # noqa: E402


@needs_root
def test_tls_check_mta_sts_enforce(mtad_factory, sink_factory, sts_world):
    mx = "mx1.enf.%s" % STS_ZONE
    mx_sink(sink_factory, 81, sts_world["ca"], [mx])
    m = sts_start(mtad_factory, sts_world)
    r = m.ctl("tls", "check", "enf.%s" % STS_ZONE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ""
    f = check_fields(r.stdout)
    assert f["mta-sts:"][:2] == ["enforce, max_age 86400, 1 mx pattern",
                                 "*.enf.%s" % STS_ZONE], f
    assert f["mta-sts:"][2].startswith("fetched policy id=enf1 "), f
    assert f["mx host:"] == ["%s [127.0.0.81]:25" % mx]
    assert f["in force:"] == ["may + mta-sts enforce (CA-verified name), "
                              "TLS required"], f
    assert re.match(r"tls=TLSv1\.[23] cipher=\S+ verify=sts$", f["tls:"][0])
    assert f["verdict:"] == ["passes"]
    assert sts_world["web"].fetches.get("enf") == 1


@needs_root
def test_tls_check_mta_sts_mx_not_in_policy(mtad_factory, sink_factory,
                                            sts_world):
    mx_sink(sink_factory, 82)
    m = sts_start(mtad_factory, sts_world)
    r = m.ctl("tls", "check", "bad.%s" % STS_ZONE, "--no-probe")
    assert r.returncode == 1, r.stdout
    f = check_fields(r.stdout)
    assert f["mta-sts:"][0].startswith("enforce, "), f
    assert f["mta-sts:"][-1] == "does not match the policy: not tried", f
    assert f["result:"] == ["no host would be tried: mail defers"]


@needs_root
def test_tls_check_a_trickling_server_times_out(dane, mtad_factory):
    """An MX host that sends an endless greeting ("220-" lines, one every
    0.2 s, each within the per-read timeout): the probe gives up after
    its deadline for the whole dialogue (4 x delivery.connect_timeout)
    and says so; before, mtactl read it for ever."""
    import socket
    import threading
    import time
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.76", 25))
    srv.listen(4)
    stop = threading.Event()

    def trickle():
        srv.settimeout(0.2)
        conns = []
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except socket.timeout:
                pass
            for c in conns:
                try:
                    c.sendall(b"220-still greeting\r\n")
                except OSError:
                    pass
        for c in conns:
            c.close()
    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        r, f = check(mtad_factory, dane, "may", "none", "1s")
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join(5)
        srv.close()
    assert f.get("probe:") == ["timed out"], r.stdout + r.stderr
    assert took < 12, took
