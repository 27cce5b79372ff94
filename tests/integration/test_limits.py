"""LIMITS (RFC 9422): mtad announces the limits it enforces in its EHLO
reply (RCPTMAX, MAILMAX), and honours a next hop's (RCPTMAX, MAILMAX,
RCPTDOMAINMAX): a message's recipients are split over transactions, and
connections, in the same delivery attempt.  Loopback only; every wait is
bounded."""
import smtplib
import time

import pytest

from mtadtest import make_message, send, strip_received
from sink import DEFAULT_CAPS


def start(mtad_factory, route, **over):
    cfg = {"routes": {"default": route}}
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    return mtad_factory(cfg).start()


def limits_line(s):
    """The LIMITS keyword's arguments from smtplib's EHLO, or None."""
    code, text = s.ehlo("client.test")
    assert code == 250
    for line in text.decode().splitlines():
        if line.upper().startswith("LIMITS"):
            return line.split()[1:]
    return None


# ---- inbound ----

def test_ehlo_announces_rcptmax_and_no_mailmax_by_default(mtad_factory,
                                                          sink):
    m = start(mtad_factory, sink.route)
    s = m.smtp()
    try:
        assert limits_line(s) == ["RCPTMAX=1000"]
        # HELO is no ESMTP: no keywords at all
        code, text = s.helo("client.test")
        assert code == 250 and b"LIMITS" not in text
    finally:
        s.close()


def test_announced_limits_are_the_enforced_ones(mtad_factory, sink):
    m = start(mtad_factory, sink.route,
              limits={"max_recipients": "2", "max_transactions": "2"})
    s = m.smtp()
    try:
        assert limits_line(s) == ["RCPTMAX=2", "MAILMAX=2"]
        for n in range(2):
            assert s.mail("a@example.org")[0] == 250
            assert s.rcpt("x@example.net")[0] == 250
            assert s.rcpt("y@example.net")[0] == 250
            code, text = s.rcpt("z@example.net")    # past RCPTMAX
            assert (code, text[:5]) == (452, b"4.5.3"), text
            assert s.data(make_message(n))[0] == 250
        code, text = s.mail("a@example.org")         # past MAILMAX
        assert code == 421 and b"4.7.0" in text, text
        with pytest.raises(smtplib.SMTPServerDisconnected):
            s.noop()
    finally:
        s.close()
    assert len(sink.wait_for(2, timeout=20)) == 2


def test_rset_and_refused_mail_do_not_count_as_transactions(mtad_factory,
                                                            sink):
    m = start(mtad_factory, sink.route, limits={"max_transactions": "1"})
    s = m.smtp()
    try:
        assert limits_line(s) == ["RCPTMAX=1000", "MAILMAX=1"]
        assert s.docmd("MAIL", "FROM:<bad")[0] == 501   # not begun
        assert s.mail("a@example.org")[0] == 250
        s.rset()                                     # begun: it counts
        code, _ = s.mail("a@example.org")
        assert code == 421
    finally:
        s.close()


# ---- outbound ----

def limited_sink(sink_factory, caps, rcptmax, mailmax, extra=""):
    """A next hop that announces LIMITS and refuses past them (452 at
    RCPT, 421 at MAIL), as a real one may."""
    line = "LIMITS RCPTMAX=%d MAILMAX=%d%s" % (rcptmax, mailmax, extra)
    s = sink_factory(caps=tuple(caps) + (line,))
    s.rcpt_max, s.mail_max = rcptmax, mailmax
    return s


def assert_each_once(got, rcpts, msg):
    seen = sorted(r for g in got for r in g.rcpt_tos)
    assert seen == sorted(rcpts), seen
    for g in got:
        _, rest = strip_received(g.data)
        assert rest == msg


def five_in_slices_of_two(mtad_factory, hop, serial):
    """Send one message to 5 recipients through hop (one worker): it must
    arrive in 3 transactions of 2, 2 and 1 recipients, each once, in one
    delivery attempt (nothing deferred).  Returns (qid, log text)."""
    m = start(mtad_factory, hop.route, server={"workers": 1})
    rcpts = ["r%d@example.net" % i for i in range(5)]
    msg = make_message(serial)
    qid = send(m, "a@example.org", rcpts, msg)
    text = m.wait_log("%s: removed" % qid)
    time.sleep(0.3)                     # a surplus transaction shows up
    got = hop.received()
    assert [len(g.rcpt_tos) for g in got] == [2, 2, 1], got
    assert_each_once(got, rcpts, msg)
    assert text.count("%s: to=<" % qid) == 5
    assert "status=deferred" not in text
    assert text.count("status=sent") == 5
    return qid, text


@pytest.mark.parametrize("caps", [DEFAULT_CAPS,
                                  DEFAULT_CAPS + ("CHUNKING",), ()],
                         ids=["pipelining", "bdat-pipelined", "plain"])
def test_rcptmax_and_mailmax_split_a_message_over_connections(
        mtad_factory, sink_factory, caps):
    hop = limited_sink(sink_factory, caps, rcptmax=2, mailmax=1)
    five_in_slices_of_two(mtad_factory, hop, 1)
    # MAILMAX=1: one transaction per connection, none refused
    assert len({g.conn_id for g in hop.received()}) == 3
    verbs = [v for _, v in hop.commands]
    assert verbs.count("MAIL") == 3 and verbs.count("RSET") == 0


def test_rcptmax_alone_reuses_the_connection(mtad_factory, sink_factory):
    hop = sink_factory(caps=DEFAULT_CAPS + ("LIMITS RCPTMAX=2",))
    hop.rcpt_max = 2
    five_in_slices_of_two(mtad_factory, hop, 2)
    assert hop.connections == 1
    verbs = [v for _, v in hop.commands]
    assert verbs.count("MAIL") == 3 and verbs.count("RSET") == 2


def test_mailmax_closes_a_connection_for_the_next_message(mtad_factory,
                                                          sink_factory):
    hop = limited_sink(sink_factory, DEFAULT_CAPS, rcptmax=100, mailmax=1)
    m = start(mtad_factory, hop.route, server={"workers": 1})
    for i in range(3):
        qid = send(m, "a@example.org", ["b%d@example.net" % i],
                   make_message(i))
        hop.wait_for(i + 1, timeout=20)
        m.wait_log("%s: removed" % qid)
    got = hop.received()
    assert len({g.conn_id for g in got}) == 3
    assert "status=deferred" not in m.log_text()


def test_rcptdomainmax_splits_a_smarthost_transaction_by_domain(
        mtad_factory, sink_factory):
    hop = sink_factory(caps=DEFAULT_CAPS + ("LIMITS RCPTDOMAINMAX=2",))
    m = start(mtad_factory, hop.route, server={"workers": 1})
    rcpts = ["a1@one.test", "b1@two.test", "a2@one.test", "c1@three.test",
             "b2@TWO.test"]
    msg = make_message(3)
    qid = send(m, "a@example.org", rcpts, msg)
    text = m.wait_log("%s: removed" % qid)
    got = hop.received()
    assert_each_once(got, rcpts, msg)
    assert len(got) >= 2
    for g in got:
        assert len({r.split("@")[1].lower() for r in g.rcpt_tos}) <= 2, g
    assert "status=deferred" not in text


def test_452_too_many_recipients_tail_goes_in_the_next_transaction(
        mtad_factory, sink_factory):
    """A next hop without LIMITS that refuses past 2 RCPTs with 452
    4.5.3 (RFC 5321 4.5.3.1.10): the rest go in the next transaction of
    the same attempt, not deferred to a retry."""
    hop = sink_factory()
    hop.rcpt_max = 2
    five_in_slices_of_two(mtad_factory, hop, 4)


def test_452_for_a_full_mailbox_is_a_plain_deferral(mtad_factory,
                                                    sink_factory):
    hop = sink_factory()
    hop.rcpt_replies = {"full@example.net": "452 4.2.2 mailbox full"}
    m = start(mtad_factory, hop.route, server={"workers": 1},
              delivery={"retry": ["1h"]})
    qid = send(m, "a@example.org", ["ok@example.net", "full@example.net"],
               make_message(5))
    text = m.wait_log("%s: to=<full@example.net>" % qid)
    assert "status=deferred" in text and "4.2.2 mailbox full" in text
    assert [v for _, v in hop.commands].count("MAIL") == 1
    assert [g.rcpt_tos for g in hop.received()] == [["ok@example.net"]]
