"""Delivery by MX, end to end: mtad with `routes.default: mx` resolving
through a real nsd (mtadtest.py's zone mtad.test), sinks listening on the
zone's 127.0.0.x addresses at port 25 (and [::1]:25), so each test sees
which MX host got each message.  RFC 5321 5.1 outcomes: preference order,
fail-over, implicit MX, CNAMEs, IPv6, null MX (5.1.10), NXDOMAIN (5.1.2),
SERVFAIL (4.4.3, then delivered once DNS works), mail that loops back to
this server (5.4.6), and an unanswered lookup that must not hold up
inbound mail.  Port 25 needs root (CI runs as root); loopback only."""
import os
import socket
import time

import pytest

from mtadtest import MTACTL, ZONE, Client, make_message, send, wait_for


pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="sinks on port 25 need root")


def start(mtad_factory, servers, home=None, **over):
    """mtad routing everything by MX through servers ("ip:port"); the
    senders' domain home.test goes to the home sink (for DSNs)."""
    cfg = {"routes": {"default": "mx"},
           "dns": {"servers": [servers], "timeout": "1s", "attempts": 1}}
    if home is not None:
        cfg["routes"]["static"] = {"home.test": home.route}
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    return mtad_factory(cfg).start()


def mx_sink(sink_factory, last_octet, **kw):
    return sink_factory(host="127.0.0.%d" % last_octet, port=25, **kw)


def dsn_of(home):
    msg = home.wait_for(1, timeout=20)[0]
    assert msg.mail_from == ""
    return msg.data.decode("utf-8", "replace")


def test_lowest_preference_first_then_the_next(mtad_factory, sink_factory,
                                               dns_servers):
    s11, s12, s13 = (mx_sink(sink_factory, n) for n in (11, 12, 13))
    m = start(mtad_factory, dns_servers.nsd)
    qid = send(m, "a@home.test", ["x@multi.%s" % ZONE], make_message(1))
    got = wait_for(lambda: s11.received() + s12.received(), 20,
                   what="delivery to a preference-10 MX")
    assert len(got) == 1 and s13.received() == []
    text = m.wait_log("%s: to=<x@multi.%s>, relay=mx" % (qid, ZONE))
    assert ("relay=mx1.multi.%s[127.0.0.11]:25" % ZONE in text or
            "relay=mx2.multi.%s[127.0.0.12]:25" % ZONE in text), text
    # both preference-10 hosts down: the preference-20 one
    s11.stop()
    s12.stop()
    qid = send(m, "a@home.test", ["y@multi.%s" % ZONE], make_message(2))
    got = s13.wait_for(1, timeout=20)
    assert got[0].rcpt_tos == ["y@multi.%s" % ZONE]
    text = m.wait_log("%s: to=<y@multi.%s>, relay=mx3.multi.%s"
                      "[127.0.0.13]:25" % (qid, ZONE, ZONE))
    assert "status=sent" in text.split(qid + ": to=<y@")[1].split("\n")[0]
    assert wait_for(lambda: m.queue_ids() == [], 10)


def test_equal_preferences_spread(mtad_factory, sink_factory, dns_servers):
    s11 = mx_sink(sink_factory, 11)
    s12 = mx_sink(sink_factory, 12)
    s13 = mx_sink(sink_factory, 13)
    for s in (s11, s12, s13):
        s.close_after_data = True       # a fresh connection per message
    m = start(mtad_factory, dns_servers.nsd, server={"workers": 1})
    n = 24
    for i in range(n):
        send(m, "a@home.test", ["r%d@multi.%s" % (i, ZONE)], make_message(i))
        wait_for(lambda: len(s11.received()) + len(s12.received()) > i, 20,
                 what="message %d delivered" % i)
    a, b = len(s11.received()), len(s12.received())
    assert a + b == n and s13.received() == []
    # random order between equal preferences: both got some (the chance
    # that a fair coin gives 24 equal sides is 2**-23)
    assert a > 0 and b > 0, (a, b)


def test_implicit_mx_cnames_and_ipv6(mtad_factory, sink_factory,
                                     dns_servers):
    s41 = mx_sink(sink_factory, 41)         # aonly: A, no MX
    s31 = mx_sink(sink_factory, 31)         # cnamehost: MX host is a CNAME
    s11 = mx_sink(sink_factory, 11)         # alias2 -> alias -> multi
    s12 = mx_sink(sink_factory, 12)
    s6 = sink_factory(host="::1", port=25)  # v6only: AAAA ::1
    m = start(mtad_factory, dns_servers.nsd)
    send(m, "a@home.test", ["i@aonly.%s" % ZONE], make_message(1))
    send(m, "a@home.test", ["c@cnamehost.%s" % ZONE], make_message(2))
    send(m, "a@home.test", ["a@alias2.%s" % ZONE], make_message(3))
    send(m, "a@home.test", ["v@v6only.%s" % ZONE], make_message(4))
    assert s41.wait_for(1)[0].rcpt_tos == ["i@aonly.%s" % ZONE]
    assert s31.wait_for(1)[0].rcpt_tos == ["c@cnamehost.%s" % ZONE]
    wait_for(lambda: s11.received() + s12.received(), 20,
             what="alias2 delivered to multi's MX")
    assert s6.wait_for(1)[0].rcpt_tos == ["v@v6only.%s" % ZONE]
    m.wait_log("relay=aonly.%s[127.0.0.41]:25" % ZONE)
    m.wait_log("relay=mxalias.cnamehost.%s[127.0.0.31]:25" % ZONE)
    m.wait_log("relay=mx.v6only.%s[::1]:25" % ZONE)
    assert wait_for(lambda: m.queue_ids() == [], 10)


def test_null_mx_bounces_5_1_10(mtad_factory, sink_factory, dns_servers):
    home = sink_factory()
    m = start(mtad_factory, dns_servers.nsd, home=home)
    qid = send(m, "alice@home.test", ["n@nullmx.%s" % ZONE], make_message(1))
    body = dsn_of(home)
    assert "Final-Recipient: rfc822; n@nullmx.%s" % ZONE in body
    assert "Status: 5.1.10\r\n" in body
    assert "does not accept mail (null MX)" in body
    text = m.wait_log("%s: to=<n@nullmx.%s>" % (qid, ZONE))
    assert "relay=none" in text and "status=bounced (550 5.1.10" in text
    assert wait_for(lambda: m.queue_ids() == [], 10)


def test_nxdomain_bounces_5_1_2(mtad_factory, sink_factory, dns_servers):
    home = sink_factory()
    m = start(mtad_factory, dns_servers.nsd, home=home)
    qid = send(m, "alice@home.test", ["z@nosuch.%s" % ZONE],
               make_message(1))
    body = dsn_of(home)
    assert "Final-Recipient: rfc822; z@nosuch.%s" % ZONE in body
    assert "Status: 5.1.2\r\n" in body
    m.wait_log("%s: to=<z@nosuch.%s>, relay=none" % (qid, ZONE))
    assert "status=bounced (550 5.1.2 Host or domain name not found" in \
        m.log_text()


def test_servfail_defers_4_4_3_then_delivers_when_dns_works(
        mtad_factory, sink_factory, dns_servers):
    s21 = mx_sink(sink_factory, 21)
    m = start(mtad_factory, dns_servers.servfail)
    qid = send(m, "a@home.test", ["s@one.%s" % ZONE], make_message(1))
    text = m.wait_log("%s: to=<s@one.%s>, relay=none" % (qid, ZONE))
    assert "status=deferred (451 4.4.3 Host or domain name lookup failed" \
        in text, text
    assert m.queue_ids() == [qid]
    assert s21.received() == []
    # DNS fixed: the next generation (reload) resolves and delivers
    m.cfg["dns"]["servers"] = [dns_servers.nsd]
    m.write_config()
    r = m.ctl("reload")
    assert r.returncode == 0, r.stderr
    got = s21.wait_for(1, timeout=30)
    assert got[0].rcpt_tos == ["s@one.%s" % ZONE]
    m.wait_log("%s: to=<s@one.%s>, relay=mx.one.%s[127.0.0.21]:25"
               % (qid, ZONE, ZONE))
    assert wait_for(lambda: m.queue_ids() == [], 10)


def test_mx_that_is_this_server_loops_back_5_4_6(mtad_factory, sink_factory,
                                                 dns_servers):
    """mx.one is 127.0.0.21:25: a listener of this mtad.  And an MX host
    named as our hostname is ourselves too."""
    home = sink_factory()
    m = mtad_factory({"routes": {"default": "mx",
                                 "static": {"home.test": home.route}},
                      "dns": {"servers": [dns_servers.nsd], "timeout": "1s"}})
    m.cfg["server"]["listen"].append("127.0.0.21:25")
    m.write_config()
    m.start()
    qid = send(m, "alice@home.test", ["l@one.%s" % ZONE], make_message(1))
    body = dsn_of(home)
    assert "Status: 5.4.6\r\n" in body
    assert "mail for one.%s loops back to myself" % ZONE in body
    m.wait_log("%s: to=<l@one.%s>, relay=none" % (qid, ZONE))


def test_mx_named_as_our_hostname_loops_back(mtad_factory, sink_factory,
                                            dns_servers):
    home = sink_factory()
    s41 = mx_sink(sink_factory, 41)     # would be reached if no loop check
    m = start(mtad_factory, dns_servers.nsd, home=home,
              server={"hostname": "aonly.%s" % ZONE})
    send(m, "alice@home.test", ["h@aonly.%s" % ZONE], make_message(1))
    body = dsn_of(home)
    assert "Status: 5.4.6\r\n" in body
    assert s41.received() == []


def test_4xx_greeting_and_refused_connect_move_on(mtad_factory, sink_factory,
                                                  dns_servers):
    s11 = mx_sink(sink_factory, 11)
    s11.greeting = "421 4.3.2 busy, try later"
    s13 = mx_sink(sink_factory, 13)
    # nothing on 127.0.0.12:25: refused
    m = start(mtad_factory, dns_servers.nsd)
    qid = send(m, "a@home.test", ["g@multi.%s" % ZONE], make_message(1))
    assert s13.wait_for(1)[0].rcpt_tos == ["g@multi.%s" % ZONE]
    text = m.wait_log("%s: to=<g@multi.%s>, relay=mx3.multi.%s"
                      "[127.0.0.13]:25" % (qid, ZONE, ZONE))
    assert "refused to talk to me: 421 4.3.2 busy" in text
    assert "connect to mx2.multi.%s[127.0.0.12]:25: Connection refused" \
        % ZONE in text
    assert s11.connections >= 1


def test_domains_sharing_an_mx_host_share_its_connection(
        mtad_factory, sink_factory, dns_servers):
    s21 = mx_sink(sink_factory, 21)     # MX of one.* and short.*
    m = start(mtad_factory, dns_servers.nsd, server={"workers": 1})
    send(m, "a@home.test", ["a@one.%s" % ZONE], make_message(1))
    s21.wait_for(1)
    send(m, "a@home.test", ["b@short.%s" % ZONE], make_message(2))
    s21.wait_for(2)
    assert s21.connections == 1, s21.connections
    assert s21.transactions == 2


def test_unanswered_lookup_does_not_hold_up_inbound_mail(
        mtad_factory, sink_factory, dns_servers):
    """One worker; its lookup goes to a server that never answers, with a
    60 s timeout.  While the query provably waits (it sits unread in the
    silent server's socket and no result is logged), a second session on
    the same worker gets its 250 for a whole transaction."""
    sock = dns_servers.silent_server.sock
    while True:                 # queries of earlier tests do not count
        try:
            sock.recv(65535, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
    m = start(mtad_factory, dns_servers.silent, server={"workers": 1},
              dns={"timeout": "60s", "attempts": 1})
    t0 = time.monotonic()
    qid = send(m, "a@home.test", ["w@multi.%s" % ZONE], make_message(1))

    def query_waiting():
        try:
            return len(sock.recv(65535, socket.MSG_PEEK |
                                 socket.MSG_DONTWAIT)) > 0
        except BlockingIOError:
            return False
    wait_for(query_waiting, 20, what="the MX query at the silent server")
    with Client(m.port) as c:
        c.greet()
        assert c.cmd("MAIL FROM:<b@home.test>").code == 250
        assert c.cmd("RCPT TO:<x@home.test>").code == 250
        assert c.cmd("DATA").code == 354
        c.send(b"Subject: t\r\n\r\nhi\r\n.\r\n")
        assert c.reply().code == 250
    # the lookup is still pending: no result for the first message yet,
    # and its timeout (60 s) has not passed
    assert time.monotonic() - t0 < 60
    assert "%s: to=" % qid not in m.log_text()
    assert qid in m.queue_ids()
    # a stop does not wait for the lookup: the attempt, which has sent
    # nothing, is given back at once and the message stays queued
    m.stop(timeout=60)
    text = m.log_text()
    assert "%s: stop: attempt given back to the next generation" % qid \
        in text, text[-3000:]
    assert "stop deadline" not in text and "past its stop" not in text
    assert m.proc.returncode == 0, m.proc.returncode
    assert qid in m.queue_ids()


@pytest.mark.skipif(not os.access(MTACTL, os.X_OK), reason="no mtactl")
def test_route_get_shows_what_delivery_uses(mtad_factory, sink_factory,
                                            dns_servers):
    s21 = mx_sink(sink_factory, 21)
    m = start(mtad_factory, dns_servers.nsd)
    r = m.ctl("route", "get", "q@one.%s" % ZONE)
    assert r.returncode == 0, r.stderr
    assert "mx.one.%s[127.0.0.21]:25" % ZONE in r.stdout, r.stdout
    qid = send(m, "a@home.test", ["q@one.%s" % ZONE], make_message(1))
    s21.wait_for(1)
    m.wait_log("%s: to=<q@one.%s>, relay=mx.one.%s[127.0.0.21]:25"
               % (qid, ZONE, ZONE))


def test_5xx_greeting_moves_on_and_bounces_only_from_the_last(
        mtad_factory, sink_factory, dns_servers):
    home = sink_factory()
    s11 = mx_sink(sink_factory, 11)
    s12 = mx_sink(sink_factory, 12)
    s13 = mx_sink(sink_factory, 13)
    s11.greeting = s12.greeting = "554 5.7.1 no service for you"
    s13.close_after_data = True         # no idle connection to reuse
    m = start(mtad_factory, dns_servers.nsd, home=home)
    send(m, "alice@home.test", ["f@multi.%s" % ZONE], make_message(1))
    assert s13.wait_for(1)[0].rcpt_tos == ["f@multi.%s" % ZONE]
    s13.greeting = "554 5.7.1 no service for you"
    qid = send(m, "alice@home.test", ["b@multi.%s" % ZONE], make_message(2))
    body = dsn_of(home)
    assert "Status: 5.7.1\r\n" in body
    text = m.wait_log("%s: to=<b@multi.%s>" % (qid, ZONE))
    assert "status=bounced (554 5.7.1 no service for you (host mx3.multi.%s"\
        "[127.0.0.13]:25 refused to talk to me)" % ZONE in text, text


def test_smtp_domain_is_an_mx_lookup_and_bracketed_host_is_not(
        mtad_factory, sink_factory, dns_servers):
    """smtp:one.mtad.test: the MX of one (mx.one, 127.0.0.21);
    smtp:[aonly.mtad.test]:25: that name's own address (127.0.0.41),
    whatever the recipient's domain is."""
    s21 = mx_sink(sink_factory, 21)
    s41 = mx_sink(sink_factory, 41)
    m = start(mtad_factory, dns_servers.nsd,
              routes={"static": {"via-mx.test": "smtp:one.%s" % ZONE,
                                 "via-host.test": "smtp:[aonly.%s]:25" % ZONE}})
    q1 = send(m, "a@home.test", ["p@via-mx.test"], make_message(1))
    q2 = send(m, "a@home.test", ["p@via-host.test"], make_message(2))
    assert s21.wait_for(1)[0].rcpt_tos == ["p@via-mx.test"]
    assert s41.wait_for(1)[0].rcpt_tos == ["p@via-host.test"]
    m.wait_log("%s: to=<p@via-mx.test>, relay=mx.one.%s[127.0.0.21]:25"
               % (q1, ZONE))
    m.wait_log("%s: to=<p@via-host.test>, relay=aonly.%s[127.0.0.41]:25"
               % (q2, ZONE))
