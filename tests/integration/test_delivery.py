"""Delivery end to end: mtad accepts, routes and relays to test sinks
(sink.py), retries, bounces, delivers into Maildirs, survives a killed
worker and a restart.  Loopback only; every wait is bounded."""
import os
import re
import signal
import threading
import time

import pytest

from mtadtest import (MTACTL, closed_port, maildir_files, make_message, send,
                      strip_received, wait_for, worker_dir, worker_pid_of)


needs_mtactl = pytest.mark.skipif(
    not (os.path.isfile(MTACTL) and os.access(MTACTL, os.X_OK)),
    reason="no mtactl binary")


def start(mtad_factory, default_route, static=None, **over):
    cfg = {"routes": {"default": default_route}}
    if static:
        cfg["routes"]["static"] = static
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    return mtad_factory(cfg).start()


def test_thousand_messages_arrive_once_each_byte_identical(mtad_factory,
                                                           sink):
    m = start(mtad_factory, sink.route)
    n_conn, per_conn = 4, 250
    sent = {}
    errors = []

    def client(c):
        try:
            s = m.smtp(timeout=30)
            s.ehlo("client.test")
            for k in range(per_conn):
                n = c * per_conn + k
                extra = b""
                if n % 7 == 0:
                    extra += b".leading dot\r\n..two dots\r\n.\r\nend\r\n"
                if n % 11 == 0:
                    extra += "8-bit caf\u00e9\r\n".encode()
                msg = make_message(n, extra)
                sent[n] = msg
                s.sendmail("sender@example.org", ["rcpt%d@example.net" % n],
                           msg)
            s.quit()
        except Exception as e:      # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,))
               for c in range(n_conn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    total = n_conn * per_conn
    got = sink.wait_for(total, timeout=120)
    # let stragglers (duplicates) show up, then count exactly
    time.sleep(0.5)
    got = sink.received()
    seen = {}
    for msg in got:
        assert len(msg.rcpt_tos) == 1
        n = int(msg.rcpt_tos[0][len("rcpt"):].split("@")[0])
        seen[n] = seen.get(n, 0) + 1
        received, rest = strip_received(msg.data)
        assert rest == sent[n], "message %d differs" % n
        assert msg.mail_from == "sender@example.org"
    assert sorted(seen) == list(range(total))
    assert all(v == 1 for v in seen.values()), \
        [n for n, v in seen.items() if v != 1]
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()
    # connections were reused: far fewer than one per message
    assert sink.connections < total / 4, sink.connections


def test_temporary_failure_then_delivered_on_retry(mtad_factory, sink):
    sink.fail_first = 1
    m = start(mtad_factory, sink.route)
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    got = sink.wait_for(1, timeout=30)
    assert len(got) == 1
    text = m.wait_log("%s: to=<b@example.net>" % qid)
    m.wait_log("status=sent")
    text = m.log_text()
    assert "%s: to=<b@example.net>, relay=127.0.0.1[127.0.0.1]:%d" % (
        qid, sink.port) in text
    assert "status=deferred (451 4.3.0 try again later)" in text
    assert sink.transactions == 2
    assert wait_for(lambda: m.queue_ids() == [], 10)


def test_permanent_failure_sends_a_dsn_to_the_sender(mtad_factory,
                                                     sink_factory):
    remote = sink_factory()
    home = sink_factory()
    remote.reject = {"bad@remote.test"}
    m = start(mtad_factory, remote.route, static={"home.test": home.route})
    msg = make_message(7, b"the body text\r\n")
    qid = send(m, "alice@home.test", ["bad@remote.test", "ok@remote.test"],
               msg)
    ok = remote.wait_for(1, timeout=20)
    assert ok[0].rcpt_tos == ["ok@remote.test"]
    dsn = home.wait_for(1, timeout=20)[0]
    assert dsn.mail_from == ""
    assert dsn.rcpt_tos == ["alice@home.test"]
    body = dsn.data.decode("utf-8", "replace")
    assert "multipart/report; report-type=delivery-status" in body
    assert "Final-Recipient: rfc822; bad@remote.test\r\n" in body
    assert "Action: failed\r\n" in body
    assert "Status: 5.1.1\r\n" in body
    assert "Diagnostic-Code: smtp; 550 5.1.1" in body
    assert "ok@remote.test" not in body.split("message/delivery-status")[1] \
        .split("text/rfc822-headers")[0]
    # default RET: headers only
    assert "X-Serial: 7" in body
    assert "the body text" not in body
    m.wait_log("%s: to=<bad@remote.test>" % qid)
    assert "status=bounced (550 5.1.1" in m.log_text()
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()


def test_null_sender_failure_is_not_bounced(mtad_factory, sink_factory):
    remote = sink_factory()
    home = sink_factory()
    remote.reject = {"bad@remote.test"}
    m = start(mtad_factory, remote.route, static={"home.test": home.route})
    qid = send(m, "", ["bad@remote.test"], make_message(8))
    m.wait_log("%s: bounce for null sender dropped" % qid)
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()
    time.sleep(0.5)
    assert home.received() == []
    assert remote.received() == []


def test_maildir_delivery(mtad_factory, workdir):
    md = worker_dir(os.path.join(workdir, "Maildir"))
    m = start(mtad_factory, "smtp:[127.0.0.1]:%d" % closed_port(),
              static={"local.test": "maildir:" + md})
    msg = make_message(9, b".dotted\r\nline\r\n")
    qid = send(m, "alice@example.org", ["bob@local.test"], msg)
    files = wait_for(lambda: maildir_files(md), 20)
    assert len(files) == 1, files
    data = open(files[0], "rb").read()
    head = b"Return-Path: <alice@example.org>\nDelivered-To: bob@local.test\n"
    assert data.startswith(head)
    received, rest = strip_received(data[len(head):].replace(b"\n", b"\r\n"))
    assert rest == msg
    assert os.listdir(os.path.join(md, "tmp")) == []
    assert os.path.isdir(os.path.join(md, "cur"))
    m.wait_log("%s: to=<bob@local.test>, relay=local" % qid)
    assert wait_for(lambda: m.queue_ids() == [], 10)


@needs_mtactl
def test_route_change_with_mtactl_takes_effect_without_reload(
        mtad_factory, sink_factory):
    a = sink_factory()
    b = sink_factory()
    m = start(mtad_factory, "smtp:[127.0.0.1]:%d" % closed_port(),
              static={"dyn.test": a.route})
    send(m, "x@example.org", ["u@dyn.test"], make_message(1))
    assert a.wait_for(1, timeout=20)[0].rcpt_tos == ["u@dyn.test"]
    r = m.ctl("route", "add", "dyn.test", b.route)
    assert r.returncode == 0, (r.stdout, r.stderr)
    send(m, "x@example.org", ["u@dyn.test"], make_message(2))
    got = b.wait_for(1, timeout=20)
    assert b"X-Serial: 2" in got[0].data
    assert len(a.received()) == 1


def test_failover_to_second_host_when_first_refuses(mtad_factory, sink):
    dead = closed_port()
    route = "smtp:[127.0.0.1]:%d,smtp:[127.0.0.1]:%d" % (dead, sink.port)
    m = start(mtad_factory, route)
    qid = send(m, "a@example.org", ["b@example.net"], make_message(3))
    got = sink.wait_for(1, timeout=20)
    assert b"X-Serial: 3" in got[0].data
    text = m.wait_log("%s: to=<b@example.net>" % qid)
    assert "status=sent" in text
    assert "127.0.0.1[127.0.0.1]:%d: Connection refused" % dead in text
    # delivered on the first attempt: never deferred
    assert "%s: to=<b@example.net>, relay=none" % qid not in text
    assert "status=deferred" not in text


def test_outbound_phases_are_traced_at_debug_level(mtad_factory, sink):
    """Every phase change of an outbound connection goes through one
    function, which logs it at debug level: the moves chain (each starts
    where the last ended) from connecting to idle."""
    m = start(mtad_factory, "smtp:[127.0.0.1]:%d" % sink.port,
              server={"workers": 1}, log={"level": "debug"})
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    sink.wait_for(1, timeout=20)
    assert "status=sent" in m.wait_log("%s: to=<b@example.net>" % qid)
    text = m.wait_log(" -> idle\n")
    name = re.escape("127.0.0.1[127.0.0.1]:%d" % sink.port)
    moves = re.findall(r"mta %s: (\w+) -> (\w+)\n" % name, text)
    to = [b for _, b in moves]
    assert to[0] == "connect", moves
    for (_, b), (a, _) in zip(moves, moves[1:]):
        assert a == b, moves            # no phase changed untraced
    it = iter(to)
    assert all(p in it for p in ("greeting", "ehlo", "txn", "dot",
                                 "idle")), moves


def test_kill_worker_during_delivery_then_delivered(mtad_factory, sink):
    sink.data_delay = 3.0
    m = start(mtad_factory, sink.route)
    qid = send(m, "a@example.org", ["b@example.net"], make_message(4))
    sink.wait_event("data_started", timeout=20)
    pid = worker_pid_of(m, qid)
    assert pid in m.children()
    os.kill(pid, signal.SIGKILL)
    sink.data_delay = 0
    got = sink.wait_for(1, timeout=30)
    assert any(b"X-Serial: 4" in g.data for g in got)
    assert wait_for(lambda: m.queue_ids() == [], 15), m.queue_ids()
    assert m.proc.poll() is None


def test_restart_with_queued_messages_delivers_them(mtad_factory, sink):
    m = start(mtad_factory, "smtp:[127.0.0.1]:%d" % closed_port())
    ids = [send(m, "a@example.org", ["r%d@example.net" % i],
                make_message(i)) for i in range(3)]
    for qid in ids:
        m.wait_log("%s: to=<r" % qid)
    assert "status=deferred" in m.log_text()
    m.stop()
    assert m.proc.returncode is not None
    assert sorted(m.queue_ids()) == sorted(ids)
    m.cfg["routes"]["default"] = sink.route
    m.write_config()
    m.start()
    got = sink.wait_for(3, timeout=30)
    assert sorted(g.rcpt_tos[0] for g in got) == [
        "r%d@example.net" % i for i in range(3)]
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()


def test_bdat_when_chunking_is_offered(mtad_factory, sink_factory):
    from sink import DEFAULT_CAPS
    s = sink_factory(caps=DEFAULT_CAPS + ("CHUNKING",))
    m = start(mtad_factory, s.route)
    msg = make_message(5, b".a dot line\r\n\r\n.\r\nno final newline")
    send(m, "a@example.org", ["b@example.net"], msg)
    got = s.wait_for(1, timeout=20)
    _, rest = strip_received(got[0].data)
    # smtplib appends the CRLF the DATA end needs
    assert rest == msg + b"\r\n"


def test_smtputf8_needed_but_not_offered_bounces_5_6_7(mtad_factory,
                                                      sink_factory):
    remote = sink_factory(caps=("PIPELINING", "8BITMIME"))
    home = sink_factory()
    m = start(mtad_factory, remote.route, static={"home.test": home.route})
    s = m.smtp()
    s.ehlo("client.test")
    code, _ = s.mail("alice@home.test", ["SMTPUTF8", "BODY=8BITMIME"])
    assert code == 250
    code, _ = s.rcpt("j\u00f6rg@remote.test")
    assert code == 250
    code, _ = s.data(make_message(6))
    assert code == 250
    s.quit()
    dsn = home.wait_for(1, timeout=20)[0]
    assert "Status: 5.6.7" in dsn.data.decode("utf-8", "replace")
    assert remote.received() == []


def test_helo_fallback_without_pipelining_one_transaction_per_route(
        mtad_factory, sink_factory):
    remote = sink_factory(caps=())
    remote.ehlo_ok = False
    home = sink_factory()
    remote.reject = {"no@remote.test"}
    m = start(mtad_factory, remote.route, static={"home.test": home.route})
    msg = make_message(10, b".x\r\n")
    qid = send(m, "alice@home.test",
               ["a@remote.test", "no@remote.test", "b@remote.test"], msg)
    got = remote.wait_for(1, timeout=20)
    assert len(got) == 1
    # one transaction for the route, the rejected recipient left out
    assert got[0].rcpt_tos == ["a@remote.test", "b@remote.test"]
    _, rest = strip_received(got[0].data)
    assert rest == msg
    dsn = home.wait_for(1, timeout=20)[0]
    assert "Final-Recipient: rfc822; no@remote.test" in dsn.data.decode()
    text = m.wait_log("%s: removed" % qid)
    assert text.count("%s: to=<" % qid) == 3


def test_failover_on_4xx_greeting(mtad_factory, sink_factory):
    busy = sink_factory()
    busy.greeting = "421 4.3.2 busy, try another"
    good = sink_factory()
    m = start(mtad_factory, "%s,%s" % (busy.route, good.route))
    qid = send(m, "a@example.org", ["b@example.net"], make_message(11))
    assert good.wait_for(1, timeout=20)
    text = m.wait_log("%s: to=<b@example.net>" % qid)
    assert "status=sent" in text
    assert "421 4.3.2 busy" in text         # the fail-over is logged
    assert busy.received() == []


def test_max_queue_time_bounces_with_the_last_error(mtad_factory, sink):
    dead = closed_port()
    m = start(mtad_factory, "smtp:[127.0.0.1]:%d" % dead,
              static={"home.test": sink.route},
              delivery={"retry": ["1s"], "max_queue_time": "2s",
                        "connect_timeout": "2s"})
    qid = send(m, "alice@home.test", ["r@remote.test"], make_message(12))
    dsn = sink.wait_for(1, timeout=30)[0]
    body = dsn.data.decode()
    assert dsn.rcpt_tos == ["alice@home.test"]
    assert "Final-Recipient: rfc822; r@remote.test" in body
    assert "Status: 4.4.7" in body
    assert "Connection refused" in body
    text = m.wait_log("%s: removed" % qid)
    assert "status=bounced (4.4.7 message expired" in text


@pytest.mark.parametrize("caps", [("PIPELINING",), ()],
                         ids=["pipelining", "plain"])
def test_connection_reused_with_rset(mtad_factory, sink_factory, caps):
    s = sink_factory(caps=caps)
    m = start(mtad_factory, s.route, server={"workers": 1})
    for i in range(3):
        send(m, "a@example.org", ["b%d@example.net" % i], make_message(i))
        s.wait_for(i + 1, timeout=20)
    assert s.connections == 1
    verbs = [v for _, v in s.commands]
    assert verbs.count("RSET") == 2
    # each RSET comes right before a MAIL
    for k, v in enumerate(verbs):
        if v == "RSET":
            assert verbs[k + 1] == "MAIL"


@pytest.mark.parametrize("caps", [("PIPELINING",), ("PIPELINING", "CHUNKING"),
                                  ()],
                         ids=["pipelining", "bdat-pipelined", "plain"])
def test_dead_reused_connection_restarts_on_a_fresh_one(mtad_factory,
                                                        sink_factory, caps):
    s = sink_factory(caps=caps)
    m = start(mtad_factory, s.route, server={"workers": 1})
    send(m, "a@example.org", ["b@example.net"], make_message(1))
    s.wait_for(1, timeout=20)
    s.rset_reply = "421 4.4.2 idle too long, closing"
    qid = send(m, "a@example.org", ["c@example.net"], make_message(2))
    got = s.wait_for(2, timeout=20)
    assert b"X-Serial: 2" in got[1].data
    assert s.connections == 2
    text = m.wait_log("%s: to=<c@example.net>" % qid)
    assert "status=deferred" not in text


def test_ret_full_returns_the_whole_message_and_notify_never_none(
        mtad_factory, sink_factory):
    remote = sink_factory()
    home = sink_factory()
    remote.reject = {"bad@remote.test", "quiet@remote.test"}
    m = start(mtad_factory, remote.route, static={"home.test": home.route})
    big = b"".join(b"line %06d of the body\r\n" % i for i in range(20000))
    msg = make_message(13, big + b".dot at the end\r\n")
    s = m.smtp()
    s.ehlo("client.test")
    assert s.mail("alice@home.test", ["RET=FULL", "ENVID=env13"])[0] == 250
    assert s.rcpt("bad@remote.test",
                  ["NOTIFY=FAILURE", "ORCPT=rfc822;Bad@Remote.TEST"])[0] == 250
    assert s.rcpt("quiet@remote.test", ["NOTIFY=NEVER"])[0] == 250
    code, resp = s.data(msg)
    assert code == 250
    s.quit()
    dsn = home.wait_for(1, timeout=20)[0]
    body = dsn.data
    assert b"Content-Type: message/rfc822\r\n" in body
    assert msg in body                      # whole, byte for byte
    assert b"Final-Recipient: rfc822; bad@remote.test" in body
    assert b"Original-Recipient: rfc822;Bad@Remote.TEST" in body
    assert b"Original-Envelope-Id: env13" in body
    assert b"quiet@remote.test" not in body
    time.sleep(0.5)
    assert len(home.received()) == 1


@needs_mtactl
def test_kick_one_then_all_delivers_deferred_messages_now(mtad_factory,
                                                         sink):
    m = start(mtad_factory, "smtp:[127.0.0.1]:%d" % closed_port(),
              static={"kick.test": "smtp:[127.0.0.1]:%d" % closed_port()},
              delivery={"retry": ["1h"]})
    ids = [send(m, "a@example.org", ["u%d@kick.test" % i], make_message(i))
           for i in range(3)]
    for qid in ids:
        m.wait_log("%s: to=<u" % qid)
    r = m.ctl("route", "add", "kick.test", sink.route)
    assert r.returncode == 0, (r.stdout, r.stderr)
    time.sleep(0.3)
    assert sink.received() == []            # next retry is an hour away
    r = m.ctl("kick", ids[1])
    assert r.returncode == 0, (r.stdout, r.stderr)
    got = sink.wait_for(1, timeout=15)
    assert got[0].rcpt_tos == ["u1@kick.test"]
    r = m.ctl("kick", "*")
    assert r.returncode == 0, (r.stdout, r.stderr)
    got = sink.wait_for(3, timeout=15)
    assert sorted(g.rcpt_tos[0] for g in got) == [
        "u%d@kick.test" % i for i in range(3)]
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()


@pytest.mark.parametrize("chunking", [False, True], ids=["data", "bdat"])
def test_big_message_streams_byte_identical(mtad_factory, sink_factory,
                                            chunking):
    from sink import DEFAULT_CAPS
    caps = DEFAULT_CAPS + (("CHUNKING",) if chunking else ())
    s = sink_factory(caps=caps)
    m = start(mtad_factory, s.route)
    # 6 MB over many 128 KiB reads; dot lines land at every offset mod 3
    lines = []
    for i in range(120000):
        lines.append(b"." * (i % 3) + b"line %07d\r\n" % i)
    msg = make_message(14, b"".join(lines))
    send(m, "a@example.org", ["b@example.net"], msg)
    got = s.wait_for(1, timeout=60)
    _, rest = strip_received(got[0].data)
    assert rest == msg


def test_bounce_goes_out_at_once_while_another_is_deferred_and_once(
        mtad_factory, sink_factory):
    remote = sink_factory()
    home = sink_factory()
    remote.reject = {"bad@remote.test"}
    remote.defer = {"later@remote.test"}
    m = start(mtad_factory, remote.route, static={"home.test": home.route},
              delivery={"retry": ["1s"]})
    qid = send(m, "alice@home.test", ["bad@remote.test", "later@remote.test"],
               make_message(9))
    dsn = home.wait_for(1, timeout=20)[0]
    body = dsn.data.decode("utf-8", "replace")
    assert "Final-Recipient: rfc822; bad@remote.test\r\n" in body
    assert "later@remote.test" not in body
    # the other recipient is still deferred: the message is still queued
    assert qid in m.queue_ids()
    assert remote.received() == []
    m.wait_log("%s: to=<later@remote.test>" % qid)
    assert "status=deferred (451 4.2.0" in m.log_text()
    # let a retry or two pass while it is deferred: still no second DSN
    assert wait_for(lambda: m.log_text().count(
        "%s: to=<later@remote.test>" % qid) >= 2, 15)
    remote.defer = set()
    got = remote.wait_for(1, timeout=20)
    assert got[0].rcpt_tos == ["later@remote.test"]
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()
    time.sleep(0.5)
    assert len(home.received()) == 1, "no second DSN for bad@remote.test"
    assert m.log_text().count("%s: sender non-delivery notification" %
                              qid) == 1


@needs_mtactl
def test_reload_with_other_worker_count_hands_deferred_messages_over(
        mtad_factory, sink):
    dead = "smtp:[127.0.0.1]:%d" % closed_port()
    m = start(mtad_factory, dead, static={"later.test": dead},
              delivery={"retry": ["1h"]},
              server={"workers": 3, "shutdown_timeout": "20s"})
    ids = [send(m, "a@example.org", ["u%d@later.test" % i], make_message(i))
           for i in range(6)]
    for qid in ids:
        m.wait_log("%s: to=<u" % qid)
    # a transaction open in an old worker keeps it running after the
    # reload: what it queues then is in no new worker's schedule
    old = m.smtp()
    old.ehlo("old.test")
    assert old.mail("a@example.org")[0] == 250
    assert old.rcpt("late@later.test")[0] == 250
    m.cfg["server"]["workers"] = 2
    m.write_config()
    r = m.ctl("reload")
    assert r.returncode == 0, (r.stdout, r.stderr)
    m.wait_log("reload done", timeout=20)
    code, _ = old.data(make_message(99))
    assert code == 250
    m.wait_log("to=<late@later.test>", timeout=10)
    assert "status=deferred" in m.log_text()
    r = m.ctl("route", "add", "later.test", sink.route)
    assert r.returncode == 0, (r.stdout, r.stderr)
    time.sleep(0.3)
    assert sink.received() == []        # retries are an hour away
    old.quit()                          # the old generation can go now
    m.wait_log("told to rescan the queue", timeout=20)
    # the rescan ("kick *") makes every deferred message due once, so the
    # u* messages may come first: wait for the one the old worker queued
    wait_for(lambda: "late@later.test" in [g.rcpt_tos[0]
                                           for g in sink.received()],
             20, what="late@later.test delivered by the new generation")
    r = m.ctl("flush")
    assert r.returncode == 0, (r.stdout, r.stderr)
    want = sorted(["late@later.test"] + ["u%d@later.test" % i
                                         for i in range(6)])
    sink.wait_for(len(want), timeout=30)
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()
    time.sleep(1.0)
    assert sorted(g.rcpt_tos[0] for g in sink.received()) == want, \
        "each delivered exactly once"
