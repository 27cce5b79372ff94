"""Outbound STARTTLS (issue 12): mtad as a TLS client toward the test sink,
under each policy level, with certificates from a test CA made at set-up.

Levels (relay.yaml delivery.tls, or the policy table edited live with
`mtactl tls policy ...`): none never STARTTLS; may uses it when offered and
retries the same host in plaintext when the handshake fails; encrypt needs
TLS (any certificate); verify needs a certificate that verifies against
tls.ca_file for the MX host's name; dane-only defers while no usable TLSA
exists.  Each delivery's log line says tls=... cipher=... verify=...

Sinks listen on 127.0.0.x with random ports; name checks use the nsd test
zone (mtadtest.ZONE): mx1.multi -> 127.0.0.11, mx2.multi -> 127.0.0.12.
"""
import json
import os
import re

import pytest

from mtadtest import (ZONE, make_message, make_test_ca, send, strip_received,
                      tls_server_context, wait_for)
from sink import DEFAULT_CAPS

MX1 = "mx1.multi.%s" % ZONE         # 127.0.0.11
MX2 = "mx2.multi.%s" % ZONE         # 127.0.0.12


@pytest.fixture
def ca(workdir):
    d = os.path.join(workdir, "ca")
    os.makedirs(d)
    os.chmod(d, 0o755)
    return make_test_ca(d)


def tls_sink(sink_factory, ca, names, host="127.0.0.1", **kw):
    """A sink offering STARTTLS with a leaf for names from ca."""
    s = sink_factory(host=host, **kw)
    chain, key = ca.issue(names)
    s.tls_context = tls_server_context(chain, key)
    return s


def start(mtad_factory, ca, route, level=None, dns=None, **over):
    cfg = {"routes": {"default": route},
           "tls": {"ca_file": ca.cert},
           "delivery": {"retry": ["1s", "2s"], "connect_timeout": "2s"}}
    if level is not None:
        cfg["delivery"]["tls"] = level
    if dns is not None:
        cfg["dns"] = {"servers": [dns], "timeout": "1s", "attempts": 1}
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    return mtad_factory(cfg).start()


def line_of(m, qid, rcpt, status=None, timeout=20):
    """The delivery log line of qid to rcpt (with status=... when given)."""
    needle = "%s: to=<%s>" % (qid, rcpt)

    def find():
        for line in m.log_text().splitlines():
            if needle in line and (status is None or
                                   "status=%s" % status in line):
                return line
        return None
    return wait_for(find, timeout, what="log line %s %s" % (needle, status))


def test_may_uses_starttls_when_offered(mtad_factory, sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route)
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    msg = s.wait_for(1)[0]
    assert msg.tls is not None and msg.tls["version"] in ("TLSv1.2",
                                                          "TLSv1.3")
    line = line_of(m, qid, "x@dst.test", "sent")
    assert re.search(r"tls=TLSv1\.[23] cipher=\S+ verify=ca", line), line
    # an address literal: no SNI (RFC 6066 3)
    assert msg.tls["sni"] is None


def test_may_without_starttls_goes_plain(mtad_factory, sink_factory, ca):
    s = sink_factory()
    m = start(mtad_factory, ca, s.route)
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert s.wait_for(1)[0].tls is None
    line = line_of(m, qid, "x@dst.test", "sent")
    assert "tls=none" in line, line


def test_none_never_starttls(mtad_factory, sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route, level="none")
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert s.wait_for(1)[0].tls is None
    assert "STARTTLS" not in [v for _, v in s.commands]
    assert "tls=none" in line_of(m, qid, "x@dst.test", "sent")


def test_may_broken_handshake_retries_plaintext(mtad_factory, sink_factory,
                                                ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    s.tls_break = True
    m = start(mtad_factory, ca, s.route)
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    msg = s.wait_for(1)[0]
    assert msg.tls is None
    s.wait_event("tls_broken")
    # the same host, a second connection, without STARTTLS
    assert s.connections == 2
    assert [v for c, v in s.commands if v == "STARTTLS"] == ["STARTTLS"]
    m.wait_log("%s: TLS handshake with 127.0.0.1[127.0.0.1]:%d failed"
               % (qid, s.port))
    m.wait_log("trying again without TLS")
    assert "tls=none" in line_of(m, qid, "x@dst.test", "sent")


def test_data_after_the_starttls_reply_is_a_failed_handshake(
        mtad_factory, sink_factory, ca):
    """Bytes behind the 220 (a plaintext injection) are never read as part
    of the TLS stream: may retries in plaintext, encrypt defers."""
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    s.tls_break = "with-reply"
    m = start(mtad_factory, ca, s.route)
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert s.wait_for(1)[0].tls is None and s.connections == 2
    m.wait_log("the server sent data after its STARTTLS reply; trying "
               "again without TLS")
    assert "tls=none" in line_of(m, qid, "x@dst.test", "sent")
    m.ctl("tls", "policy", "set", "dst.test", "encrypt", check=True)
    qid = send(m, "a@src.test", ["y@dst.test"], make_message(2))
    line = line_of(m, qid, "y@dst.test", "deferred")
    assert "4.7.5" in line and "data after its STARTTLS reply" in line, line


def test_refused_starttls(mtad_factory, sink_factory, ca):
    """454 to STARTTLS: may goes on in plaintext on the same connection;
    encrypt defers."""
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    s.starttls_reply = "454 4.7.0 TLS not available due to temporary reason"
    m = start(mtad_factory, ca, s.route)
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert s.wait_for(1)[0].tls is None and s.connections == 1
    assert "tls=none" in line_of(m, qid, "x@dst.test", "sent")
    m.ctl("tls", "policy", "set", "dst.test", "encrypt", check=True)
    qid = send(m, "a@src.test", ["y@dst.test"], make_message(2))
    line = line_of(m, qid, "y@dst.test", "deferred")
    assert "STARTTLS was refused" in line and "454 4.7.0" in line, line
    assert "tls_failure=starttls-not-supported" in line, line
    assert len(s.received()) == 1


def test_encrypt_defers_without_starttls_then_sends(mtad_factory,
                                                    sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    s.starttls = False
    m = start(mtad_factory, ca, s.route, level="encrypt")
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    line = line_of(m, qid, "x@dst.test", "deferred")
    assert "451 4.7.4" in line and "STARTTLS was not offered" in line, line
    assert s.received() == []
    s.starttls = True
    msg = s.wait_for(1, timeout=30)[0]
    assert msg.tls is not None
    assert "tls=TLSv1." in line_of(m, qid, "x@dst.test", "sent", timeout=30)


def test_encrypt_broken_handshake_defers(mtad_factory, sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    s.tls_break = True
    m = start(mtad_factory, ca, s.route, level="encrypt")
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    line = line_of(m, qid, "x@dst.test", "deferred")
    assert "451 4.7.5" in line and "TLS handshake failed" in line, line
    assert s.received() == []
    assert "MAIL" not in [v for _, v in s.commands]


def test_encrypt_accepts_an_untrusted_certificate(mtad_factory,
                                                  sink_factory, ca,
                                                  workdir):
    d = os.path.join(workdir, "other")
    os.makedirs(d)
    other = make_test_ca(d, "Other CA")
    s = tls_sink(sink_factory, other, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route, level="encrypt")
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert s.wait_for(1)[0].tls is not None
    line = line_of(m, qid, "x@dst.test", "sent")
    assert "verify=none" in line, line


def test_verify_right_and_wrong_name(mtad_factory, sink_factory, ca,
                                     dns_servers):
    good = tls_sink(sink_factory, ca, [MX1], host="127.0.0.11")
    bad = tls_sink(sink_factory, ca, ["other.%s" % ZONE], host="127.0.0.12")
    m = start(mtad_factory, ca,
              "smtp:[%s]:%d" % (MX1, good.port), level="verify",
              dns=dns_servers.nsd,
              routes={"static": {"bad.test": "smtp:[%s]:%d" % (MX2,
                                                               bad.port)}})
    qid = send(m, "a@src.test", ["x@good.test"], make_message(1))
    msg = good.wait_for(1)[0]
    assert msg.tls["sni"] == MX1
    line = line_of(m, qid, "x@good.test", "sent")
    assert re.search(r"relay=%s\[127\.0\.0\.11\]:%d, tls=TLSv1\.[23] "
                     r"cipher=\S+ verify=ca" % (re.escape(MX1), good.port),
                     line), line
    qid = send(m, "a@src.test", ["x@bad.test"], make_message(2))
    line = line_of(m, qid, "x@bad.test", "deferred")
    assert "451 4.7.5" in line and "verified TLS is required" in line
    assert "tls_failure=certificate-host-mismatch" in line, line
    assert bad.received() == []
    assert "MAIL" not in [v for _, v in bad.commands]


def test_verify_defers_on_untrusted_ca(mtad_factory, sink_factory, ca,
                                       workdir):
    d = os.path.join(workdir, "other")
    os.makedirs(d)
    other = make_test_ca(d, "Other CA")
    s = tls_sink(sink_factory, other, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route, level="verify")
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    line = line_of(m, qid, "x@dst.test", "deferred")
    assert "tls_failure=certificate-not-trusted" in line, line
    assert s.received() == []


def test_dane_only_without_tlsa_defers(mtad_factory, sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route, level="dane-only")
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    line = line_of(m, qid, "x@dst.test", "deferred")
    assert "451 4.7.5" in line and "no usable TLSA" in line, line
    assert s.received() == []


def test_dane_without_tlsa_is_may(mtad_factory, sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route, level="dane")
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert s.wait_for(1)[0].tls is not None
    assert "tls=TLSv1." in line_of(m, qid, "x@dst.test", "sent")


def test_policy_table_changes_apply_live(mtad_factory, sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    s.starttls = False
    m = start(mtad_factory, ca, s.route)
    # may (relay.yaml): plaintext is fine
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert "tls=none" in line_of(m, qid, "x@dst.test", "sent")
    # encrypt for dst.test from the table: now it defers
    r = m.ctl("tls", "policy", "set", "dst.test", "encrypt", check=True)
    assert "dst.test" in r.stdout and "encrypt" in r.stdout
    r = m.ctl("tls", "policy", "list", check=True)
    assert re.search(r"^dst\.test\s+encrypt$", r.stdout, re.M), r.stdout
    m.wait_log("via=mtactl: tls_policy_set dst.test encrypt")
    qid = send(m, "a@src.test", ["y@dst.test"], make_message(2))
    assert "4.7.4" in line_of(m, qid, "y@dst.test", "deferred")
    # another domain is not affected
    qid2 = send(m, "a@src.test", ["z@other.test"], make_message(3))
    assert "tls=none" in line_of(m, qid2, "z@other.test", "sent")
    # deleted: back to may, the deferred one goes on its next retry
    m.ctl("tls", "policy", "del", "dst.test", check=True)
    m.wait_log("via=mtactl: tls_policy_del dst.test")
    r = m.ctl("tls", "policy", "list", check=True)
    assert "dst.test" not in r.stdout
    assert "tls=none" in line_of(m, qid, "y@dst.test", "sent", timeout=30)


def test_policy_command_errors(mtad_factory, ca):
    m = mtad_factory({"tls": {"ca_file": ca.cert}}).start()
    r = m.ctl("tls", "policy", "set", "dst.test", "sometimes")
    assert r.returncode != 0 and "none, may, encrypt" in r.stderr
    r = m.ctl("tls", "policy", "set", "bad key!", "may")
    assert r.returncode != 0 and "bad key" in r.stderr
    r = m.ctl("tls", "policy", "del", "nothere.test")
    assert r.returncode != 0 and "no TLS policy" in r.stderr


def test_config_errors_name_file_line_field(mtad_factory, ca, workdir):
    m = mtad_factory({"delivery": {"tls": "sometimes"},
                      "tls": {"ca_file": os.path.join(workdir, "nope.pem")}})
    m.start(wait=False)
    assert m.proc.wait(20) != 0
    err = m.stderr_text()
    assert re.search(r"relay\.yaml:\d+:\d+: delivery\.tls: expected none, "
                     r"may, encrypt, verify, dane or dane-only", err), err
    assert re.search(r"relay\.yaml:\d+:\d+: tls\.ca_file: cannot read",
                     err), err


def test_tls_across_connection_reuse(mtad_factory, sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route, server={"workers": 1})
    q1 = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    first = s.wait_for(1)[0]
    q2 = send(m, "a@src.test", ["y@dst.test"], make_message(2))
    second = s.wait_for(2)[1]
    # one connection, one handshake, both messages inside TLS
    assert second.conn_id == first.conn_id and s.connections == 1
    assert first.tls is not None and second.tls is not None
    assert [v for _, v in s.commands].count("STARTTLS") == 1
    for q, r in ((q1, "x@dst.test"), (q2, "y@dst.test")):
        assert "tls=TLSv1." in line_of(m, q, r, "sent")


def test_reuse_never_mixes_policies(mtad_factory, sink_factory, ca):
    """Two domains routed to the same host: an idle connection set up
    under may is not taken by a destination whose level is encrypt."""
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route, server={"workers": 1})
    m.ctl("tls", "policy", "set", "strict.test", "encrypt", check=True)
    send(m, "a@src.test", ["x@loose.test"], make_message(1))
    loose = s.wait_for(1)[0]
    send(m, "a@src.test", ["x@loose.test"], make_message(2))
    assert s.wait_for(2)[1].conn_id == loose.conn_id     # reuse works
    q = send(m, "a@src.test", ["y@strict.test"], make_message(3))
    strict = s.wait_for(3)[2]
    assert strict.conn_id != loose.conn_id
    assert strict.tls is not None
    assert "tls=TLSv1." in line_of(m, q, "y@strict.test", "sent")


def test_session_resumed_on_the_next_connection(mtad_factory, sink_factory,
                                                ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    s.close_after_data = True       # each message needs a new connection
    m = start(mtad_factory, ca, s.route, server={"workers": 1},
              log={"level": "debug"})
    send(m, "a@src.test", ["x@dst.test"], make_message(1))
    first = s.wait_for(1)[0]
    send(m, "a@src.test", ["y@dst.test"], make_message(2))
    second = s.wait_for(2)[1]
    assert second.conn_id != first.conn_id
    assert first.tls["resumed"] is False
    assert second.tls["resumed"] is True, s.tls
    # the client's side says so too (SSL_session_reused)
    text = m.wait_log(" verify=ca resumed\n")
    assert len(re.findall(r"tls attempt: host=127\.0\.0\.1\[127\.0\.0\.1\]"
                          r":%d .* verify=ca( resumed)?\n" % s.port,
                          text)) == 2, text


def test_session_not_resumed_across_levels(mtad_factory, sink_factory, ca):
    """A session made under may (nothing verified) is not offered for a
    verify connection: the cache key holds the level."""
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    s.close_after_data = True
    m = start(mtad_factory, ca, s.route, server={"workers": 1})
    send(m, "a@src.test", ["x@dst.test"], make_message(1))
    s.wait_for(1)
    m.ctl("tls", "policy", "set", "dst.test", "verify", check=True)
    q = send(m, "a@src.test", ["y@dst.test"], make_message(2))
    second = s.wait_for(2)[1]
    assert second.tls["resumed"] is False
    assert "verify=ca" in line_of(m, q, "y@dst.test", "sent")


def test_show_says_the_tls_of_each_recipient(mtad_factory, sink_factory,
                                             ca):
    good = tls_sink(sink_factory, ca, ["127.0.0.1"])
    plain = sink_factory()
    m = start(mtad_factory, ca, good.route,
              routes={"static": {"strict.test": plain.route}})
    m.ctl("tls", "policy", "set", "strict.test", "encrypt", check=True)
    qid = send(m, "a@src.test", ["x@ok.test", "y@strict.test"],
               make_message(1))
    good.wait_for(1)
    line_of(m, qid, "y@strict.test", "deferred")

    def shown():
        r = m.ctl("show", qid)
        return r.stdout if "tls_failure=" in r.stdout else None
    out = wait_for(shown, 20, what="mtactl show with the TLS state")
    rcpt = {l.split("<")[1].split(">")[0]: l for l in out.splitlines()
            if l.startswith("recipient:")}
    assert re.search(r"sent .*relay=127\.0\.0\.1\[127\.0\.0\.1\]:%d "
                     r"tls=TLSv1\.[23] cipher=\S+ verify=ca$" % good.port,
                     rcpt["x@ok.test"]), out
    # every host failed: relay=none, as for any deferral of that kind;
    # its bounce class last
    assert re.search(r"pending .*relay=none tls=none "
                     r"tls_failure=starttls-not-supported class=tls_failure$",
                     rcpt["y@strict.test"]), out
    # JSON: the value without the log's "tls=" key
    js = m.ctl("queue", "--json").stdout
    assert '"tls":"none tls_failure=starttls-not-supported"' in js, js
    tls = {x["address"]: x["tls"] for x in
           json.loads(m.ctl("show", qid, "--json", check=True).stdout)["recipients"]}
    assert re.match(r"TLSv1\.[23] cipher=\S+ verify=ca$", tls["x@ok.test"]), tls
    assert tls["y@strict.test"] == "none tls_failure=starttls-not-supported"


@pytest.mark.parametrize("level", ["verify", "encrypt", "dane-only"])
@pytest.mark.parametrize("sink_mode", ["plain", "broken"])
def test_required_levels_never_send_in_plaintext(mtad_factory, sink_factory,
                                                 ca, level, sink_mode):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    if sink_mode == "plain":
        s.starttls = False
    else:
        s.tls_break = True
    m = start(mtad_factory, ca, s.route, level=level)
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    line = line_of(m, qid, "x@dst.test", "deferred")
    assert re.search(r"\(451 4\.7\.[45] ", line), line
    assert s.received() == []
    assert "MAIL" not in [v for _, v in s.commands]


def test_json_log_has_the_tls_fields(mtad_factory, sink_factory, ca):
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, ca, s.route, log={"format": "json"})
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    s.wait_for(1)

    def rec():
        for line in m.log_text().splitlines():
            if qid in line and '"event":"delivery"' in line:
                return json.loads(line)
        return None
    r = wait_for(rec, 20, what="the delivery record")
    assert r["status"] == "sent"
    assert r["tls"] in ("TLSv1.2", "TLSv1.3") and r["cipher"]
    assert r["verify"] == "ca" and r["tls_failure"] == ""


def test_reload_reads_the_new_ca_file(mtad_factory, sink_factory, ca,
                                      workdir):
    """The CA bundle is loaded by each worker before its sandbox; a reload
    forks workers that read tls.ca_file again."""
    d = os.path.join(workdir, "other")
    os.makedirs(d)
    other = make_test_ca(d, "Other CA")
    s = tls_sink(sink_factory, ca, ["127.0.0.1"])
    m = start(mtad_factory, other, s.route, level="verify")
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert "certificate-not-trusted" in line_of(m, qid, "x@dst.test",
                                                "deferred")
    m.cfg["tls"]["ca_file"] = ca.cert
    m.write_config()
    r = m.ctl("reload")
    assert r.returncode == 0, r.stdout + r.stderr
    m.ctl("kick", qid, check=True)
    assert "verify=ca" in line_of(m, qid, "x@dst.test", "sent", timeout=30)
    assert s.wait_for(1)[0].tls is not None


def test_each_tls_attempt_is_reported(mtad_factory, sink_factory, ca,
                                      workdir):
    """The per-attempt hook (TLS-RPT counts from it) sees failures that a
    later host or a plaintext retry hides from the delivery line."""
    d = os.path.join(workdir, "other")
    os.makedirs(d)
    other = make_test_ca(d, "Other CA")
    bad = tls_sink(sink_factory, other, ["127.0.0.1"])
    good = tls_sink(sink_factory, ca, ["127.0.0.1"])
    route = "smtp:[127.0.0.1]:%d,smtp:[127.0.0.1]:%d" % (bad.port, good.port)
    m = start(mtad_factory, ca, route, level="verify",
              log={"level": "debug"})
    qid = send(m, "a@src.test", ["x@dst.test"], make_message(1))
    assert good.wait_for(1)[0].tls is not None and bad.received() == []
    text = m.wait_log("tls attempt: host=127.0.0.1[127.0.0.1]:%d "
                      "policy_domain=dst.test level=verify tls=TLSv1."
                      % good.port)
    assert re.search(r"tls attempt: host=127\.0\.0\.1\[127\.0\.0\.1\]:%d "
                     r"policy_domain=dst\.test level=verify tls=TLSv1\.[23] "
                     r"cipher=\S+ verify=none "
                     r"tls_failure=certificate-not-trusted" % bad.port,
                     text), text
    assert "verify=ca" in line_of(m, qid, "x@dst.test", "sent")


@pytest.mark.parametrize("chunking", [False, True])
def test_large_body_over_tls_arrives_exactly(mtad_factory, sink_factory, ca,
                                             chunking):
    """DATA (stuffed) and BDAT (read and written through TLS instead of
    sendfile) bodies of several chunks, byte for byte."""
    caps = list(DEFAULT_CAPS) + (["CHUNKING"] if chunking else [])
    s = tls_sink(sink_factory, ca, ["127.0.0.1"], caps=caps)
    m = start(mtad_factory, ca, s.route)
    body = b"".join(b"%06d .line with a leading dot and some text\r\n" % i
                    for i in range(12000))       # ~550 KiB: several chunks
    msg = make_message(1, extra=b".\r\n" + body)
    qid = send(m, "a@src.test", ["x@dst.test"], msg)
    got = s.wait_for(1, timeout=60)[0]
    assert got.tls is not None
    assert ("BDAT" in [v for _, v in s.commands]) == chunking
    assert strip_received(got.data)[1] == msg
    assert "tls=TLSv1." in line_of(m, qid, "x@dst.test", "sent")


# ---- mtactl tls check ----------------------------------------------------

def check_fields(out):
    """mtactl tls check's output -> {label: [values]} (labels as printed,
    stripped: "level:", "tls:", "verdict:" ...)."""
    fields, last = {}, None
    for line in out.splitlines():
        mo = re.match(r"^\s*([a-z][a-z -]*?:)\s+(.*)$", line)
        label, value = (mo.group(1), mo.group(2)) if mo else \
            (last, line.strip())
        fields.setdefault(label, []).append(value.strip())
        last = label
    return fields


def test_tls_check_probes_like_the_delivery(mtad_factory, sink_factory, ca,
                                            dns_servers):
    good = tls_sink(sink_factory, ca, [MX1], host="127.0.0.11")
    bad = tls_sink(sink_factory, ca, ["other.%s" % ZONE], host="127.0.0.12")
    plain = sink_factory(host="127.0.0.13")
    m = start(mtad_factory, ca,
              "smtp:[%s]:%d" % (MX1, good.port), level="verify",
              dns=dns_servers.nsd,
              routes={"static": {"bad.test": "smtp:[%s]:%d" % (MX2, bad.port),
                                 "plain.test": plain.route}})
    r = m.ctl("tls", "check", "Good.Test")
    assert r.returncode == 0, r.stdout + r.stderr
    f = check_fields(r.stdout)
    assert f["domain:"] == ["good.test"]
    assert f["level:"] == ["verify (delivery.tls)"]
    assert f["mx host:"] == ["%s [127.0.0.11]:%d" % (MX1, good.port)]
    assert f["in force:"] == ["verify, TLS required"]
    assert re.match(r"tls=TLSv1\.[23] cipher=\S+ verify=ca$", f["tls:"][0]), f
    assert "DNS:%s" % MX1 in f["name:"], f
    assert f["verdict:"] == ["passes"]
    assert f["result:"] == ["1 host would be tried, every probe passed"]
    # the probe was a real STARTTLS with the MX name as SNI, then QUIT
    assert wait_for(lambda: good.tls, 5, what="the sink's TLS record")
    assert good.received() == []
    # a certificate for another name: what the delivery defers on
    r = m.ctl("tls", "check", "bad.test")
    assert r.returncode == 1, r.stdout
    f = check_fields(r.stdout)
    assert f["verdict:"][0].startswith("fails verify: "), f
    assert "tls_failure=certificate-host-mismatch" in f["tls:"][0], f
    assert f["result:"] == ["1 of 1 host mtad would try failed the probe"]
    # the policy table wins over delivery.tls, and may takes any server
    m.ctl("tls", "policy", "set", "bad.test", "may", check=True)
    r = m.ctl("tls", "check", "bad.test")
    assert r.returncode == 0, r.stdout
    f = check_fields(r.stdout)
    assert f["level:"] == ["may (policy table: bad.test)"]
    assert f["in force:"] == ["may, TLS when offered"]
    # no STARTTLS offered: under verify mtad defers
    r = m.ctl("tls", "check", "plain.test")
    assert r.returncode == 1
    assert check_fields(r.stdout)["starttls:"] == ["not offered: mtad defers"]
    # --no-probe: the policy only
    r = m.ctl("tls", "check", "good.test", "--no-probe")
    assert r.returncode == 0 and "banner:" not in r.stdout
    for bad_args in ([], ["good.test", "--now"], ["-x"]):
        assert m.ctl("tls", "check", *bad_args).returncode == 2
