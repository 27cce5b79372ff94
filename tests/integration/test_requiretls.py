"""REQUIRETLS (RFC 8689), the inbound side, against a running mtad: the EHLO
keyword on TLS sessions only (STARTTLS and implicit TLS), MAIL ...
REQUIRETLS refused over plaintext with 530 5.7.10 and accepted over TLS,
the flag in the spool envelope, in the log and in mtactl show, kept
through a restart; a "TLS-Required: No" header field noted in the
envelope (DATA and BDAT), ignored when REQUIRETLS was given, and not
looked for in the body.

Messages stay in <spool>/queue: the default route is a listener that never
accepts (Blackhole), so nothing is delivered while the test looks.
"""
import os
import re

import pytest

from mtadtest import (Client, free_port, make_keyed_cert,
                      read_queue_file, wait_for)
from test_tls import caps, client_ctx, queued_id, starttls



@pytest.fixture
def m(mtad_factory, workdir, hole):
    """One worker; m.port: mx with STARTTLS; m.smtps: implicit TLS."""
    cert, key = make_keyed_cert(workdir, "server", "ec")
    mt = mtad_factory()
    mt.smtps = free_port()
    mt.cfg["server"]["workers"] = 1
    mt.cfg["server"]["listen"] = [
        "127.0.0.1:%d" % mt.port,
        {"address": "127.0.0.1:%d" % mt.smtps, "tls": "implicit"}]
    mt.cfg["tls"] = {"cert_file": cert, "key_file": key}
    mt.cfg["routes"]["default"] = hole.route()
    mt.write_config()
    return mt.start()


def implicit(port):
    c = Client(port)
    c.sock = client_ctx().wrap_socket(c.sock)
    return c


def envelope(m, qid):
    env, _ = read_queue_file(os.path.join(m.spool, "queue", qid))
    return env


def show_tls(m, qid):
    """The "tls:" line of mtactl show, or None."""
    r = m.ctl("show", qid)
    assert r.returncode == 0, r.stderr
    found = [l for l in r.stdout.splitlines() if l.startswith("tls:")]
    assert len(found) <= 1, r.stdout
    return found[0][len("tls:"):].strip() if found else None


def send_msg(c, mail, body, bdat=False):
    """MAIL, RCPT, DATA (or one BDAT LAST) on a greeted client; the id."""
    r = c.cmd(mail)
    assert r.code == 250, r
    assert c.cmd("RCPT TO:<rcpt@far.test>").code == 250
    if bdat:
        c.send(b"BDAT %d LAST\r\n" % len(body) + body)
        return queued_id(c.reply())
    assert c.cmd("DATA").code == 354
    c.send(body + b".\r\n")
    return queued_id(c.reply())


# --- the EHLO keyword --------------------------------------------------------

def test_keyword_only_on_tls_sessions(m):
    with Client(m.port) as c:
        r = c.greet()
        assert b"STARTTLS" in caps(r)
        assert b"REQUIRETLS" not in caps(r), r
        assert c.cmd("RSET").code == 250
    with Client(m.port) as c:
        starttls(c)
        r = c.cmd("EHLO client.test")
        assert r.code == 250 and b"REQUIRETLS" in caps(r), r
        # HELO has no extensions at all
        r = c.cmd("HELO client.test")
        assert r.lines == [b"250 mx.test.example"], r
    with implicit(m.smtps) as c:
        r = c.greet()
        assert b"REQUIRETLS" in caps(r), r
        assert b"STARTTLS" not in caps(r), r


# --- the MAIL parameter ------------------------------------------------------

def test_mail_requiretls_refused_over_plaintext(m):
    with Client(m.port) as c:
        c.greet()
        r = c.cmd("MAIL FROM:<a@x.test> REQUIRETLS")
        assert r.code == 530 and r.text.startswith(b"5.7.10 "), r
        # no transaction was started: RCPT needs MAIL first
        assert c.cmd("RCPT TO:<rcpt@far.test>").code == 503
        qid = send_msg(c, "MAIL FROM:<a@x.test>", b"Subject: p\r\n\r\nx\r\n")
    assert "tlsreq" not in envelope(m, qid)
    assert show_tls(m, qid) is None


def test_mail_requiretls_syntax_over_tls(m):
    with Client(m.port) as c:
        starttls(c)
        c.cmd("EHLO client.test")
        r = c.cmd("MAIL FROM:<a@x.test> REQUIRETLS=YES")
        assert r.code == 501 and r.text.startswith(b"5.5.4"), r
        r = c.cmd("MAIL FROM:<a@x.test> REQUIRETLS REQUIRETLS")
        assert r.code == 501, r
        assert c.cmd("MAIL FROM:<a@x.test> requiretls").code == 250


def test_requiretls_stored_shown_logged_and_kept_over_restart(m):
    with Client(m.port) as c:
        starttls(c)
        c.cmd("EHLO client.test")
        qid = send_msg(c, "MAIL FROM:<a@x.test> REQUIRETLS SIZE=30",
                       b"Subject: secret\r\n\r\nbody\r\n")
    with implicit(m.smtps) as c:
        c.greet()
        qid2 = send_msg(c, "MAIL FROM:<b@x.test> REQUIRETLS",
                        b"Subject: s2\r\n\r\nbody\r\n", bdat=True)
        plain = send_msg(c, "MAIL FROM:<c@x.test>",
                         b"Subject: s3\r\n\r\nbody\r\n")
    for q in (qid, qid2):
        assert envelope(m, q)["tlsreq"] == b"REQUIRETLS"
        assert show_tls(m, q) == "REQUIRETLS"
    assert "tlsreq" not in envelope(m, plain)
    assert show_tls(m, plain) is None
    text = m.wait_log("%s: from=<a@x.test>" % qid)
    line = [l for l in text.splitlines() if "%s: from=" % qid in l][0]
    assert "tls_required=requiretls" in line, line
    line = [l for l in text.splitlines() if "%s: from=" % plain in l]
    assert line and "tls_required" not in line[0], line
    m.stop()
    assert show_tls(m, qid) == "REQUIRETLS"      # read from the spool
    m.start()
    assert wait_for(lambda: set(m.queue_ids()) >= {qid, qid2, plain})
    for q in (qid, qid2):
        assert envelope(m, q)["tlsreq"] == b"REQUIRETLS"
        assert show_tls(m, q) == "REQUIRETLS"
    assert show_tls(m, plain) is None


# --- TLS-Required: No --------------------------------------------------------

def test_tls_required_no_is_noted(m):
    body = (b"Subject: not secret\r\nTLS-Required: No\r\n"
            b"Received: from a by b\r\n\r\nhello\r\n")
    with Client(m.port) as c:
        c.greet()
        qid = send_msg(c, "MAIL FROM:<a@x.test>", body)
        qid_bdat = send_msg(c, "MAIL FROM:<a@x.test>", body, bdat=True)
        folded = send_msg(c, "MAIL FROM:<a@x.test>",
                          b"TLS-Required:\r\n\tno\r\n\r\nhi\r\n")
        in_body = send_msg(c, "MAIL FROM:<a@x.test>",
                           b"Subject: x\r\n\r\nTLS-Required: No\r\n")
        other = send_msg(c, "MAIL FROM:<a@x.test>",
                         b"TLS-Required: Yes\r\n\r\nhi\r\n")
    for q in (qid, qid_bdat, folded):
        assert envelope(m, q)["tlsreq"] == b"NO", q
        assert show_tls(m, q) == "TLS-Required: No"
    for q in (in_body, other):
        assert "tlsreq" not in envelope(m, q), q
        assert show_tls(m, q) is None
    # the content is stored as sent: the field stays in the message
    _, data = read_queue_file(os.path.join(m.spool, "queue", qid))
    assert data.endswith(body), data
    text = m.wait_log("%s: from=<a@x.test>" % qid)
    line = [l for l in text.splitlines() if "%s: from=" % qid in l][0]
    assert "tls_required=no" in line, line


def test_requiretls_wins_over_the_header_field(m):
    with Client(m.port) as c:
        starttls(c)
        c.cmd("EHLO client.test")
        qid = send_msg(c, "MAIL FROM:<a@x.test> REQUIRETLS",
                       b"TLS-Required: No\r\n\r\nhi\r\n")
    assert envelope(m, qid)["tlsreq"] == b"REQUIRETLS"
    assert show_tls(m, qid) == "REQUIRETLS"
    text = m.wait_log("%s: from=<a@x.test>" % qid)
    assert re.search(r"%s: from=<a@x\.test>.*tls_required=requiretls" % qid,
                     text), text


# --- with DKIM signing: the envelope line and the signature's room --------

@pytest.mark.parametrize("size", [1, 70000])
def test_tls_required_no_with_dkim_signing(mtad_factory, workdir, hole,
                                           size):
    """The envelope line goes in while the header is in the spool buffer,
    DKIM's room in front of the body after it; with 2 MiB the signature is
    written back with pwrite() past the moved start: it must verify."""
    import test_dkim as td
    keys = td.Keys(workdir)
    mt = td.start(mtad_factory, hole,
                  [keys.make("example.org", "s1", "ed25519-sha256")])
    text = b"".join(b"line %07d of the message\r\n" % i for i in range(size))
    env, body = td.send(mt, td.msg([b"From: a@example.org",
                                    b"TLS-Required: No",
                                    b"Subject: not secret"], text))
    assert env["tlsreq"] == b"NO"
    assert len(td.signatures(body)) == 1
    assert td.verify(keys, body)
    assert body.endswith(text)
