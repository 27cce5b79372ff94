"""DSNs that senders ask for (RFC 3461 NOTIFY=SUCCESS, NOTIFY=DELAY): a
"delivered" report for a local delivery, "relayed" for a next hop without
DSN, NOTIFY and ORCPT passed on to one with DSN (and no report of ours),
one delay warning per recipient (kept across a restart), none for the
null sender.  Loopback only; every wait is bounded."""
import os
import time

from mtadtest import (closed_port, maildir_files, make_message, wait_for,
                      worker_dir)
from sink import DEFAULT_CAPS

ID_MARK = b"queued as "


def start(mtad_factory, default_route, static, delivery=None):
    cfg = {"routes": {"default": default_route, "static": static}}
    if delivery:
        cfg["delivery"] = delivery
    return mtad_factory(cfg).start()


def submit(m, sender, rcpts, msg, mail_params=()):
    """rcpts: [(address, [params])]; returns the queue id."""
    s = m.smtp()
    try:
        s.ehlo("client.test")
        code, _ = s.mail(sender, list(mail_params))
        assert code == 250, code
        for addr, params in rcpts:
            code, resp = s.rcpt(addr, params)
            assert code == 250, (code, resp)
        code, resp = s.data(msg)
        assert code == 250, (code, resp)
        i = resp.index(ID_MARK) + len(ID_MARK)
        return resp[i:i + 16].decode()
    finally:
        s.quit()


def status_part(dsn):
    body = dsn.data.decode("utf-8", "replace")
    return body.split("message/delivery-status")[1].split("\r\n--")[0]


def test_success_for_a_maildir_route_and_none_by_default(mtad_factory,
                                                         sink_factory,
                                                         workdir):
    home = sink_factory()
    md = worker_dir(os.path.join(workdir, "Maildir"))
    m = start(mtad_factory, "smtp:[127.0.0.1]:%d" % closed_port(),
              {"home.test": home.route, "local.test": "maildir:" + md})
    msg = make_message(1, b"the secret body\r\n")
    qid = submit(m, "alice@home.test",
                 [("bob@local.test", ["NOTIFY=SUCCESS,FAILURE",
                                      "ORCPT=rfc822;Bob@Local.TEST"]),
                  ("carol@local.test", [])],
                 msg, ["RET=FULL", "ENVID=e1"])
    assert wait_for(lambda: len(maildir_files(md)) == 2, 20)
    dsn = home.wait_for(1, timeout=20)[0]
    assert dsn.mail_from == ""
    assert dsn.rcpt_tos == ["alice@home.test"]
    body = dsn.data.decode("utf-8", "replace")
    assert "Subject: Successful Mail Delivery Report\r\n" in body
    st = status_part(dsn)
    assert "Final-Recipient: rfc822; bob@local.test\r\n" \
           "Original-Recipient: rfc822;Bob@Local.TEST\r\n" \
           "Action: delivered\r\nStatus: 2.0.0\r\n" in st, st
    assert "Original-Envelope-Id: e1\r\n" in st
    # carol gave no NOTIFY: failure only (RFC 3461 4.1)
    assert "carol@local.test" not in st
    # the maildir path is ours, not the sender's business
    assert md not in body
    # RET=FULL is for failures: a success returns the headers only
    assert "text/rfc822-headers" in body
    assert "the secret body" not in body
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()
    # the log process writes in batches: wait for the line, do not read once
    m.wait_log("%s: sender success notification" % qid)
    time.sleep(0.3)
    assert len(home.received()) == 1


def test_relayed_when_the_next_hop_has_no_dsn(mtad_factory, sink_factory):
    remote = sink_factory(caps=[c for c in DEFAULT_CAPS if c != "DSN"])
    remote.reply_text = b"2.0.0 Ok: queued \x1b[31mred\x1b[0m"
    home = sink_factory()
    m = start(mtad_factory, remote.route, {"home.test": home.route})
    submit(m, "alice@home.test",
           [("bob@remote.test", ["NOTIFY=SUCCESS",
                                 "ORCPT=rfc822;bob@remote.test"])],
           make_message(2))
    got = remote.wait_for(1, timeout=20)[0]
    assert got.rcpt_params == [[]], got.rcpt_params  # not offered: not sent
    dsn = home.wait_for(1, timeout=20)[0]
    raw = dsn.data
    assert b"\x1b" not in raw                   # the hop's reply, escaped
    st = status_part(dsn)
    assert "Final-Recipient: rfc822; bob@remote.test\r\n" in st
    assert "Action: relayed\r\nStatus: 2.0.0\r\n" in st, st
    assert "Remote-MTA: dns; 127.0.0.1\r\n" in st, st
    assert "Diagnostic-Code: smtp; 250 2.0.0 Ok: queued \\x1b[31mred" in st, st
    assert b"which does not send delivery notifications" in raw
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()


def test_passed_on_to_a_next_hop_with_dsn_and_no_report_here(
        mtad_factory, sink_factory, workdir):
    remote = sink_factory()                     # offers DSN
    home = sink_factory()
    md = worker_dir(os.path.join(workdir, "Maildir"))
    m = start(mtad_factory, remote.route,
              {"home.test": home.route, "local.test": "maildir:" + md})
    qid = submit(m, "alice@home.test",
                 [("bob@remote.test", ["NOTIFY=SUCCESS,DELAY",
                                       "ORCPT=rfc822;Bob@Remote.TEST"]),
                  ("carol@local.test", ["NOTIFY=SUCCESS"])],
                 make_message(3))
    got = remote.wait_for(1, timeout=20)[0]
    assert got.rcpt_params == [["NOTIFY=SUCCESS,DELAY",
                                "ORCPT=rfc822;Bob@Remote.TEST"]], \
        got.rcpt_params
    # the report of ours is for the local delivery only: the next hop
    # reports bob@'s (RFC 3461 5.2)
    dsn = home.wait_for(1, timeout=20)[0]
    st = status_part(dsn)
    assert "Final-Recipient: rfc822; carol@local.test\r\n" in st, st
    assert "bob@remote.test" not in st, st
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()
    m.wait_log("%s: removed" % qid)
    time.sleep(0.5)
    assert len(home.received()) == 1
    assert m.log_text().count("%s: sender success notification" % qid) == 1


def test_one_delay_warning_even_across_a_restart(mtad_factory, sink_factory):
    remote = sink_factory()
    home = sink_factory()
    remote.defer = {"later@remote.test"}
    m = start(mtad_factory, remote.route, {"home.test": home.route},
              {"retry": ["1s"], "delay_warning": "2s"})
    qid = submit(m, "alice@home.test",
                 [("later@remote.test", ["NOTIFY=DELAY,FAILURE"]),
                  ("quiet@remote.test", ["NOTIFY=FAILURE"])],
                 make_message(4))
    # quiet@ is delivered at once and asked for no success report
    assert remote.wait_for(1, timeout=20)[0].rcpt_tos == ["quiet@remote.test"]
    dsn = home.wait_for(1, timeout=20)[0]
    body = dsn.data.decode("utf-8", "replace")
    assert "Subject: Delayed Mail (still being retried)\r\n" in body
    st = status_part(dsn)
    assert "Final-Recipient: rfc822; later@remote.test\r\n" \
           "Action: delayed\r\nStatus: 4.2.0\r\n" in st, st
    assert "Will-Retry-Until: " in st
    assert "quiet@remote.test" not in st
    assert "Diagnostic-Code: smtp; 451 4.2.0" in st
    # the warning is kept in the recipient's state on the spool
    state = open(os.path.join(m.spool, "state", qid)).read()
    # (version 5: 4 and the bounce class of the deferral)
    assert state.startswith("MTAD-STATE 5\n"), state
    assert "\nrcpt DELAYED " in state, state
    # more attempts, a restart, more attempts: still one warning
    n = m.log_text().count("%s: to=<later@remote.test>" % qid)
    assert wait_for(lambda: m.log_text().count(
        "%s: to=<later@remote.test>" % qid) >= n + 1, 15)
    m.stop()
    m.start()
    assert wait_for(lambda: m.log_text().count(
        "%s: to=<later@remote.test>" % qid) >= n + 3, 20)
    assert len(home.received()) == 1, home.received()
    remote.defer = set()
    assert wait_for(lambda: m.queue_ids() == [], 20), m.queue_ids()
    time.sleep(0.3)
    assert len(home.received()) == 1, "no second warning, no success report"
    assert m.log_text().count("%s: sender delay notification" % qid) == 1


def test_no_report_for_the_null_sender(mtad_factory, sink_factory, workdir):
    remote = sink_factory(caps=[c for c in DEFAULT_CAPS if c != "DSN"])
    md = worker_dir(os.path.join(workdir, "Maildir"))
    m = start(mtad_factory, remote.route,
              {"local.test": "maildir:" + md})
    qid = submit(m, "", [("bob@local.test", ["NOTIFY=SUCCESS"]),
                         ("bob@remote.test", ["NOTIFY=SUCCESS"])],
                 make_message(5))
    assert wait_for(lambda: len(maildir_files(md)) == 1, 20)
    remote.wait_for(1, timeout=20)
    assert wait_for(lambda: m.queue_ids() == [], 10), m.queue_ids()
    m.wait_log("%s: success for null sender dropped" % qid)
    time.sleep(0.3)
    assert len(remote.received()) == 1          # no DSN went anywhere
    assert "sender success notification" not in m.log_text()
