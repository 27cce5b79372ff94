"""SMTP AUTH (RFC 4954, PLAIN and LOGIN), listener roles (mx, submission),
implicit TLS (RFC 8314), submission.sender_login_match, the failure
limit, mtactl user and mtad-sendmail, against a real mtad.

The password file is root's and 0600 when the tests run as root: the
workers read it before they drop their privileges.  Relay is allowed to
127.0.0.1 only, so a client bound to 127.0.0.2 relays only once
authenticated."""
import base64
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt
import os
import re
import select
import smtplib
import ssl
import subprocess
import time

import pytest

from mtadtest import (MTACTL, Client, free_port, make_keyed_cert,
                      make_message, read_queue_file, wait_for)

QUEUED = re.compile(r"queued as ([0-9A-F]{16})")
HERE = os.path.dirname(os.path.abspath(__file__))
SENDMAIL = os.path.join(os.path.dirname(MTACTL), "mtad-sendmail")


def b64(s):
    return base64.b64encode(s.encode()).decode()


def tls_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def write_pwfile(path, users):
    with open(path, "w") as f:
        f.write("# test users\n")
        for u, p in users.items():
            f.write("%s:%s\n" % (u, crypt.crypt(
                p, crypt.mksalt(crypt.METHOD_SHA512))))
    os.chmod(path, 0o600)



class Sub:
    """An mtad with an mx listener (m.port), a submission listener with
    STARTTLS (sub) and one with implicit TLS (smtps)."""

    def __init__(self, m, sub, smtps):
        self.m, self.sub, self.smtps = m, sub, smtps


def start(mtad_factory, workdir, hole, auth=None, extra=None, users=None):
    cert, key = make_keyed_cert(workdir, "server", "ec")
    pw = os.path.join(workdir, "passwd")
    write_pwfile(pw, users or {"alice": "s3cret pass",
                               "bob@example.org": "hunter2"})
    m = mtad_factory()
    sub, smtps = free_port(), free_port()
    m.cfg["server"]["listen"] = [
        "127.0.0.1:%d" % m.port,
        {"address": "127.0.0.1:%d" % sub, "role": "submission"},
        {"address": "127.0.0.1:%d" % smtps, "role": "submission",
         "tls": "implicit"}]
    m.cfg["server"]["workers"] = 1
    m.cfg["tls"] = {"cert_file": cert, "key_file": key}
    m.cfg["relay"] = {"allow_networks": ["127.0.0.1/32"]}
    m.cfg["routes"]["default"] = hole.route()
    # failed attempts answered after 10 ms, doubling (tests that are not
    # about the delay stay quick; test_failure_delay_* set their own)
    m.cfg["auth"] = {"password_file": pw, "failure_delay": "10ms",
                     "failure_delay_max": "40ms"}
    m.cfg["auth"].update(auth or {})
    for k, v in (extra or {}).items():
        m.cfg.setdefault(k, {}).update(v)
    m.write_config()
    m.start()
    return Sub(m, sub, smtps)


def smtp_starttls(port, source="127.0.0.2"):
    s = smtplib.SMTP("127.0.0.1", port, timeout=10,
                     source_address=(source, 0))
    s.ehlo("client.test")
    s.starttls(context=tls_ctx())
    s.ehlo("client.test")
    return s


def queued_body(m, resp):
    qid = QUEUED.search(resp.decode()).group(1)
    path = os.path.join(m.spool, "queue", qid)
    wait_for(lambda: os.path.exists(path), what="queue file " + qid)
    return read_queue_file(path)


def login_plain(s, user, password):
    """One AUTH PLAIN (smtplib's login() would try LOGIN after a 535,
    a second failure)."""
    s.user, s.password = user, password
    return s.auth("PLAIN", s.auth_plain)


def send_msg(s, sender="alice@example.org", rcpt="rcpt@remote.test"):
    code, resp = s.mail(sender)
    assert code == 250, (code, resp)
    code, resp = s.rcpt(rcpt)
    assert code == 250, (code, resp)
    code, resp = s.data(make_message(1))
    assert code == 250, (code, resp)
    return resp


# --- AUTH over STARTTLS and implicit TLS ----------------------------------

def test_plain_over_starttls_relays_from_any_address(mtad_factory, workdir,
                                                      hole):
    t = start(mtad_factory, workdir, hole)
    s = smtplib.SMTP("127.0.0.1", t.sub, timeout=10,
                     source_address=("127.0.0.2", 0))
    s.ehlo("client.test")
    assert s.has_extn("starttls")
    assert not s.has_extn("auth"), "AUTH offered before TLS"
    s.starttls(context=tls_ctx())
    s.ehlo("client.test")
    assert s.esmtp_features["auth"].split() == ["PLAIN", "LOGIN"]
    code, _ = s.login("alice", "s3cret pass")
    assert code == 235
    resp = send_msg(s)
    s.quit()
    env, body = queued_body(t.m, resp)
    assert len(env["rcpt"]) == 1 and b" rcpt@remote.test " in env["rcpt"][0]
    # auth.received_header is off by default: the login is not written
    assert b"alice" not in body.split(b"\r\n\r\n")[0].split(b"From:")[0]
    log = t.m.wait_log("authenticated as alice (PLAIN)")
    assert "s3cret" not in log


def test_login_mechanism(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole)
    with Client(t.sub, source="127.0.0.2") as c:
        c.greet()
        assert c.cmd("STARTTLS").code == 220
        c.sock = tls_ctx().wrap_socket(c.sock)
        assert c.cmd("EHLO client.test").code == 250
        r = c.cmd("AUTH LOGIN")
        assert (r.code, r.text) == (334, b"VXNlcm5hbWU6"), r
        r = c.cmd(b64("bob@example.org"))
        assert (r.code, r.text) == (334, b"UGFzc3dvcmQ6"), r
        assert c.cmd(b64("hunter2")).code == 235
        assert c.cmd("AUTH PLAIN " + b64("\0bob@example.org\0hunter2")) \
            .code == 503
        assert c.cmd("MAIL FROM:<bob@example.org>").code == 250
        assert c.cmd("RCPT TO:<x@remote.test>").code == 250


def test_implicit_tls(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole)
    s = smtplib.SMTP_SSL("127.0.0.1", t.smtps, timeout=10,
                         source_address=("127.0.0.2", 0), context=tls_ctx())
    s.ehlo("client.test")
    assert not s.has_extn("starttls")
    assert "PLAIN" in s.esmtp_features["auth"]
    assert s.login("bob@example.org", "hunter2")[0] == 235
    send_msg(s, sender="bob@example.org")
    s.quit()


def test_swaks_starttls_and_implicit(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole)
    for port, tlsopt in ((t.sub, "--tls"), (t.smtps, "--tls-on-connect")):
        r = subprocess.run(
            ["swaks", "--server", "127.0.0.1:%d" % port, tlsopt,
             "--local-interface", "127.0.0.2", "--auth", "LOGIN",
             "--auth-user", "alice", "--auth-password", "s3cret pass",
             "--from", "alice@example.org", "--to", "z@remote.test",
             "--helo", "client.test"],
            capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "235 2.7.0 Authentication successful" in r.stdout
        assert QUEUED.search(r.stdout), r.stdout


def test_wrong_password_and_unknown_user(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole)
    s = smtp_starttls(t.sub)
    for user, pw in (("alice", "wrong"), ("nobody", "s3cret pass"),
                     ("alice", "")):
        with pytest.raises(smtplib.SMTPAuthenticationError) as e:
            login_plain(s, user, pw)
        assert e.value.smtp_code == 535
    # and still not allowed to send
    assert s.mail("alice@example.org")[0] == 530
    s.close()
    log = t.m.wait_log("failed for user nobody (PLAIN)")
    assert "wrong" not in log and "s3cret" not in log


def test_malformed_auth(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole)
    with Client(t.sub) as c:
        c.greet()
        assert c.cmd("STARTTLS").code == 220
        c.sock = tls_ctx().wrap_socket(c.sock)
        assert c.cmd("EHLO client.test").code == 250
        assert c.cmd("AUTH CRAM-MD5").code == 504
        assert c.cmd("AUTH PLAIN !!!!").code == 501
        assert c.cmd("AUTH PLAIN").code == 334
        assert c.cmd("*").code == 501            # cancelled
        # authzid different from the authcid: refused
        assert c.cmd("AUTH PLAIN " + b64("bob\0alice\0s3cret pass")) \
            .code == 501
        assert c.cmd("NOOP").code == 250


def test_auth_before_tls_refused(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole)
    for port in (t.sub, t.m.port):
        with Client(port) as c:
            c.greet()
            r = c.cmd("AUTH PLAIN " + b64("\0alice\0s3cret pass"))
            assert r.code == 538, r
    with Client(t.sub) as c:
        c.greet()
        r = c.cmd("MAIL FROM:<alice@example.org>")
        assert r.code == 530 and b"STARTTLS" in r.text, r


def test_submission_requires_auth(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole)
    # even from 127.0.0.1, which may relay on the mx listener
    s = smtp_starttls(t.sub, source="127.0.0.1")
    code, resp = s.mail("alice@example.org")
    assert (code, resp) == (530, b"5.7.0 Authentication required")
    s.close()
    # the mx listener keeps its rules: 127.0.0.2 may not relay ...
    with Client(t.m.port, source="127.0.0.2") as c:
        c.greet()
        assert c.cmd("MAIL FROM:<a@example.org>").code == 250
        assert c.cmd("RCPT TO:<x@remote.test>").code == 554
    # ... unless it authenticates there (AUTH is offered after STARTTLS)
    s = smtp_starttls(t.m.port)
    assert s.login("alice", "s3cret pass")[0] == 235
    send_msg(s)
    s.quit()


def test_sender_login_match(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole,
              extra={"submission": {"sender_login_match": True}})
    s = smtp_starttls(t.sub)
    s.login("alice", "s3cret pass")
    for sender, ok in (("alice@example.org", True), ("alice@other.test", True),
                       ("ALICE@example.org", False), ("bob@example.org", False),
                       ("alicex@example.org", False), ("", True)):
        code, resp = s.mail(sender)
        assert (code == 250) == ok, (sender, code, resp)
        if code == 553:
            assert b"not owned by user alice" in resp
        s.rset()
    s.quit()
    s = smtp_starttls(t.sub)
    s.login("bob@example.org", "hunter2")
    assert s.mail("Bob@Example.org")[0] == 250
    s.rset()
    assert s.mail("bob@other.test")[0] == 553
    s.quit()


def test_failure_limit_421(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole, auth={"max_failures": 3})
    s = smtp_starttls(t.sub)
    for _ in range(2):
        with pytest.raises(smtplib.SMTPAuthenticationError):
            login_plain(s, "alice", "bad")
    with pytest.raises(smtplib.SMTPAuthenticationError) as e:
        login_plain(s, "alice", "bad")
    assert e.value.smtp_code == 421
    s.close()
    # a new connection from the same address is refused at once, even
    # with the right password; another address is not affected
    s = smtp_starttls(t.sub)
    with pytest.raises(smtplib.SMTPAuthenticationError) as e:
        login_plain(s, "alice", "s3cret pass")
    assert e.value.smtp_code == 421
    s.close()
    s = smtp_starttls(t.sub, source="127.0.0.3")
    assert s.login("alice", "s3cret pass")[0] == 235
    s.quit()


def test_failure_limit_holds_for_exchanges_opened_before_it(
        mtad_factory, workdir, hole):
    """Exchanges parked at the password prompt before the limit was
    reached get no check once it is: 421, even for the right password
    (else an address had a guess per open connection, not max_failures)."""
    t = start(mtad_factory, workdir, hole, auth={"max_failures": 2})
    parked = []
    for _ in range(4):
        c = starttls_client(t.sub, "127.0.0.4")
        assert c.cmd("AUTH LOGIN").code == 334
        assert c.cmd(b64("alice")).code == 334
        parked.append(c)
    codes = [parked[i].cmd(b64("wrong %d" % i)).code for i in range(3)]
    assert codes == [535, 421, 421], codes
    assert parked[3].cmd(b64("s3cret pass")).code == 421
    for c in parked:
        c.close()
    # the log process writes in batches: wait for the four disconnects,
    # which one worker logs after anything those sessions did
    text = wait_for(lambda: (lambda t: t if t.count(
        "disconnect from [127.0.0.4]") >= 4 else None)(t.m.log_text()),
        what="the four sessions' disconnects in the log")
    assert "failure 2 of 2" in text and "failure 3 of 2" not in text, text
    assert "authenticated as alice" not in text, text


def starttls_client(port, source):
    """A raw Client after STARTTLS and EHLO (for pipelining by hand)."""
    c = Client(port, source=source, timeout=30)
    c.greet()
    assert c.cmd("STARTTLS").code == 220
    c.sock = tls_ctx().wrap_socket(c.sock)
    assert c.cmd("EHLO client.test").code == 250
    return c


def readable_now(c):
    """Has c anything to read at this instant (a poll that does not
    wait)?"""
    if c.buf or (hasattr(c.sock, "pending") and c.sock.pending()):
        return True
    return bool(select.select([c.sock], [], [], 0)[0])


def test_failure_delay_holds_reply_and_pipelined_commands(
        mtad_factory, workdir, hole):
    """The 535 comes after auth.failure_delay, not before; the commands
    pipelined behind the AUTH are answered after it, in order; the worker
    (there is one) serves another client meanwhile, so the delay is a
    timer, not a sleep.  Only lower bounds on time are asserted (a loaded
    machine makes the reply later, never earlier), plus one poll made
    right after the send, well inside the 3 s delay."""
    delay = 3.0
    t = start(mtad_factory, workdir, hole, auth={
        "failure_delay": "3s", "failure_delay_max": "3s"})
    c = starttls_client(t.sub, "127.0.0.4")
    t0 = time.monotonic()
    c.send("AUTH PLAIN " + b64("\0alice\0wrong pass 1") +
           "\r\nNOOP\r\nMAIL FROM:<alice@example.org>\r\n")
    assert not readable_now(c), "a reply before the delay"
    # the same worker answers someone else while c's reply is held
    with Client(t.m.port, source="127.0.0.5") as other:
        other.greet()
        assert other.cmd("NOOP").code == 250
        t_other = time.monotonic()
    r = c.reply()
    t_535 = time.monotonic()
    assert r.code == 535 and b"5.7.8" in r.text, r
    assert t_535 - t0 >= delay - 0.01, t_535 - t0
    assert t_other < t_535
    # then the pipelined commands, in order: NOOP, and MAIL refused on
    # the submission port (not authenticated)
    assert c.reply().code == 250
    r = c.reply()
    assert r.code == 530, r
    # the session goes on as usual: the right password now works
    assert c.cmd("AUTH PLAIN " + b64("\0alice\0s3cret pass")).code == 235
    assert c.cmd("MAIL FROM:<alice@example.org>").code == 250
    c.close()
    log = t.m.wait_log("failed for user alice (PLAIN), failure 1 of 5, "
                       "answered in 3000 ms")
    assert "wrong pass" not in log and "s3cret" not in log
    assert b64("\0alice\0wrong pass 1") not in log


def auth_fail_timed(c, password, user="alice"):
    """One failing AUTH PLAIN on c: (reply, seconds until it came)."""
    t0 = time.monotonic()
    c.send("AUTH PLAIN " + b64("\0%s\0%s" % (user, password)) + "\r\n")
    r = c.reply()
    return r, time.monotonic() - t0


def test_failure_delay_grows_per_address_across_reconnects(
        mtad_factory, workdir, hole):
    """The failure count belongs to the client address, not the session:
    a reconnect (or hanging up during the delay) does not reset it, the
    delay doubles with it, and at auth.max_failures the held reply is 421
    and the connection closes; another address starts from zero."""
    t = start(mtad_factory, workdir, hole, auth={
        "failure_delay": "400ms", "failure_delay_max": "800ms",
        "max_failures": 4})
    src = "127.0.0.6"
    # 1st failure: 400 ms
    c = starttls_client(t.sub, src)
    r, took = auth_fail_timed(c, "guess one")
    assert r.code == 535 and took >= 0.39, (r, took)
    assert c.cmd("QUIT").code == 221
    c.close()
    t.m.wait_log("failure 1 of 4, answered in 400 ms")
    # 2nd, on a new connection: 800 ms (doubled, so the count carried
    # over); the client hangs up without waiting for the reply
    c = starttls_client(t.sub, src)
    c.send("AUTH PLAIN " + b64("\0alice\0guess two") + "\r\n")
    t.m.wait_log("failure 2 of 4, answered in 800 ms")
    c.close()
    # 3rd: still counted (the hang-up gained nothing); capped at 800 ms
    c = starttls_client(t.sub, src)
    r, took = auth_fail_timed(c, "guess three", user="nobody")
    assert r.code == 535 and took >= 0.79, (r, took)
    t.m.wait_log("failed for user nobody (PLAIN), failure 3 of 4, "
                 "answered in 800 ms")
    # 4th (LOGIN this time): the limit; 421 after the delay, then closed
    c.send("AUTH LOGIN\r\n")
    assert c.reply().code == 334
    c.send(b64("alice") + "\r\n")
    assert c.reply().code == 334
    t0 = time.monotonic()
    c.send(b64("guess four") + "\r\n")
    r = c.reply()
    assert r.code == 421 and b"too many failed" in r.text, r
    assert time.monotonic() - t0 >= 0.79
    with pytest.raises(EOFError):
        c.reply()
    c.close()
    t.m.wait_log("failed for user alice (LOGIN), failure 4 of 4")
    # a new connection from that address: 421 at once, right password
    # or not
    c = starttls_client(t.sub, src)
    r = c.cmd("AUTH PLAIN " + b64("\0alice\0s3cret pass"))
    assert r.code == 421, r
    c.close()
    # another address is not affected: no delay owed, logs in
    c = starttls_client(t.sub, "127.0.0.7")
    assert c.cmd("AUTH PLAIN " + b64("\0alice\0s3cret pass")).code == 235
    c.close()
    log = t.m.log_text()
    for secret in ("guess", "s3cret", b64("guess four"),
                   b64("\0alice\0guess one")):
        assert secret not in log, secret


def test_received_header(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole, auth={"received_header": True})
    s = smtp_starttls(t.sub)
    s.login("alice", "s3cret pass")
    resp = send_msg(s)
    s.quit()
    _, body = queued_body(t.m, resp)
    received = body.split(b"\r\n\tby ")[0]
    assert received.startswith(b"Received: from client.test")
    assert b"\r\n\t(Authenticated sender: alice)" in received, body[:400]


def test_plaintext_loopback(mtad_factory, workdir, hole):
    t = start(mtad_factory, workdir, hole,
              auth={"allow_plaintext_loopback": True})
    s = smtplib.SMTP("127.0.0.1", t.sub, timeout=10)
    s.ehlo("client.test")
    assert "PLAIN" in s.esmtp_features["auth"]
    assert s.login("alice", "s3cret pass")[0] == 235
    send_msg(s)
    s.quit()


# --- configuration --------------------------------------------------------

def test_config_errors(mtad_factory, workdir):
    m = mtad_factory()
    m.cfg["server"]["listen"] = [
        {"address": "127.0.0.1:%d" % m.port, "role": "relay"}]
    m.write_config()
    r = subprocess.run([os.path.join(os.path.dirname(MTACTL), "mtad"), "-t",
                        "-c", m.cfg_path], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
    assert "server.listen[0].role: expected mx or submission" in r.stderr, \
        r.stderr
    m.cfg["server"]["listen"] = [
        {"address": "127.0.0.1:%d" % m.port, "role": "submission",
         "tls": "implicit"}]
    m.write_config()
    r = subprocess.run([os.path.join(os.path.dirname(MTACTL), "mtad"), "-t",
                        "-c", m.cfg_path], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
    assert "tls: implicit needs tls.cert_file" in r.stderr, r.stderr
    assert "role: submission needs auth.password_file" in r.stderr, r.stderr


def test_bad_password_file_line(mtad_factory, workdir):
    pw = os.path.join(workdir, "passwd")
    with open(pw, "w") as f:
        f.write("alice:$6$x$y\nbroken line\n")
    m = mtad_factory({"auth": {"password_file": pw}})
    m.start(wait=False)
    assert m.proc.wait(timeout=30) != 0
    assert "auth.password_file: %s:2: expected user:hash" % pw in \
        m.stderr_text()


# --- DKIM signing of authenticated mail (SF_SIGN) --------------------------

def test_authenticated_mail_is_dkim_signed(mtad_factory, workdir, hole):
    from test_dkim import Keys, signatures, verify
    keys = Keys(workdir)
    t = start(mtad_factory, workdir, hole, extra={"dkim": {
        "sign": [keys.make("example.org", "s1", "ed25519-sha256")],
        "sign_networks": ["10.255.0.0/16"]}})
    # 127.0.0.1 may relay (relay.allow_networks) but is not in
    # dkim.sign_networks: not signed
    with smtplib.SMTP("127.0.0.1", t.m.port, timeout=10) as s:
        s.ehlo("client.test")
        _, body = queued_body(t.m, send_msg(s))
    assert signatures(body) == []
    # authenticated from 127.0.0.2: signed, and the signature verifies
    s = smtp_starttls(t.sub)
    login_plain(s, "alice", "s3cret pass")
    msg = (b"From: Alice <alice@example.org>\r\nTo: r@remote.test\r\n"
           b"Subject: signed\r\n\r\nhello\r\n")
    assert s.sendmail("alice@example.org", ["r@remote.test"], msg) == {}
    s.quit()
    t.m.wait_log("dkim=example.org")
    bodies = [read_queue_file(os.path.join(t.m.spool, "queue", q))[1]
              for q in t.m.queue_ids()]
    signed = [b for b in bodies if b.endswith(msg)]
    assert len(signed) == 1
    assert len(signatures(signed[0])) == 1
    assert verify(keys, signed[0])


# --- mtactl user ------------------------------------------------------------

def user_cmd(path, *args, password=None):
    return subprocess.run([MTACTL, "user", "-f", path, *args],
                          input=password, capture_output=True, text=True,
                          timeout=60)


def test_mtactl_user_add_del_list(mtad_factory, workdir, hole):
    pw = os.path.join(workdir, "users")
    r = user_cmd(pw, "add", "carol", password="first pass\n")
    assert r.returncode == 0, r.stderr
    assert "carol added" in r.stdout
    assert user_cmd(pw, "add", "dave@example.org",
                    password="dave pw\n").returncode == 0
    r = user_cmd(pw, "add", "carol", password="second pass\n")
    assert r.returncode == 0 and "carol updated" in r.stdout, r
    r = user_cmd(pw, "list")
    assert r.stdout.splitlines() == ["carol", "dave@example.org"]
    st = os.stat(pw)
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()
    with open(pw) as f:
        lines = f.read().splitlines()
    assert all(re.match(r"^[^:]+:\$y\$", l) for l in lines), lines
    assert "second pass" not in open(pw).read()
    # bad names, empty password, unknown user
    assert user_cmd(pw, "add", "a:b", password="x\n").returncode == 2
    assert user_cmd(pw, "add", "e", password="\n").returncode == 1
    r = user_cmd(pw, "del", "nobody")
    assert r.returncode == 1 and "no user nobody" in r.stderr
    # never through a symbolic link
    link = os.path.join(workdir, "link")
    os.symlink(pw, link)
    r = user_cmd(link, "add", "x", password="y\n")
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    # mtad uses the yescrypt hashes; del + reload takes the user away
    m = mtad_factory()
    cert, key = make_keyed_cert(workdir, "server", "ec")
    m.cfg["tls"] = {"cert_file": cert, "key_file": key}
    m.cfg["auth"] = {"password_file": pw}
    m.cfg["routes"]["default"] = hole.route()
    m.write_config()
    m.start()
    s = smtp_starttls(m.port)
    assert login_plain(s, "carol", "second pass")[0] == 235
    s.quit()
    s = smtp_starttls(m.port)
    with pytest.raises(smtplib.SMTPAuthenticationError):
        login_plain(s, "carol", "first pass")
    s.close()
    r = subprocess.run([MTACTL, "-c", m.cfg_path, "user", "del", "carol"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m.ctl("reload", check=True)
    m.wait_log("auth.password_file %s: 1 users" % pw)

    def refused():
        s = smtp_starttls(m.port)
        try:
            login_plain(s, "carol", "second pass")
            s.quit()
            return False
        except smtplib.SMTPAuthenticationError as e:
            s.close()
            return e.smtp_code == 535
    # old workers finish their sessions; a new session meets a new worker
    wait_for(refused, what="carol refused after reload")


# --- mtad-sendmail ----------------------------------------------------------

def test_sendmail_from_a_cron_script(mtad_factory, workdir, hole):
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    script = os.path.join(workdir, "job.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\n"
                "printf 'To: Ops <ops@remote.test>, dev@remote.test\\n"
                "Cc: \"Smith, J\" <js@remote.test>\\nBcc: hidden@remote.test\\n"
                "Subject: cron\\n\\nline one\\n.\\n..dots\\nlast\\n' | "
                "%s -C %s -t -i -F 'Cron Daemon'\n" % (SENDMAIL, m.cfg_path))
    os.chmod(script, 0o755)
    r = subprocess.run([script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: len(m.queue_ids()) == 1, what="one queued message")
    env, body = read_queue_file(os.path.join(m.spool, "queue",
                                             m.queue_ids()[0]))
    rcpts = sorted(x.split(b" ")[1] for x in env["rcpt"])
    assert rcpts == [b"dev@remote.test", b"hidden@remote.test",
                     b"js@remote.test", b"ops@remote.test"], env["rcpt"]
    assert env["sender"] == b"root@mx.test.example" or \
        env["sender"].endswith(b"@mx.test.example"), env
    assert b"Bcc:" not in body and b"hidden" not in body
    assert b"\r\nFrom: Cron Daemon <" in body
    assert body.endswith(b"\r\n\r\nline one\r\n.\r\n..dots\r\nlast\r\n"), body


def test_sendmail_dot_ends_without_i_and_arguments(mtad_factory, hole):
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-f", "app@example.org",
                        "--", "a@remote.test", "b@remote.test"],
                       input=b"Subject: x\n\nbody\n.\nnot sent\n",
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: len(m.queue_ids()) == 1, what="one queued message")
    env, body = read_queue_file(os.path.join(m.spool, "queue",
                                             m.queue_ids()[0]))
    assert env["sender"] == b"app@example.org"
    assert len(env["rcpt"]) == 2
    assert body.endswith(b"From: app@example.org\r\nSubject: x\r\n\r\n"
                         b"body\r\n"), body


def test_sendmail_mtad_down(mtad_factory, workdir):
    m = mtad_factory()          # configured, never started
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-t"],
                       input="To: a@remote.test\n\nhi\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 75, (r.returncode, r.stderr)
    assert "cannot connect to mtad at [127.0.0.1]:%d" % m.port in r.stderr
    assert "is mtad running?" in r.stderr
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path],
                       input="To: a@remote.test\n\nhi\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 64 and "no recipients" in r.stderr


def test_sendmail_t_refuses_an_address_that_would_change_rcpt(mtad_factory):
    """-t: an address from the header with a control byte, a blank, '<' or
    '>' (which would add parameters to RCPT TO:<...>), a NUL, or one too
    long for the command is refused before mtad is reached (65), never
    sent, cut or passed on (mtad is not even started: the old scan got
    as far as connecting, 75)."""
    m = mtad_factory()          # configured, never started
    for to in (b"<a@remote.test> NOTIFY=NEVER ORCPT=rfc822;x@y>",
               b"a@remote.test\x0b@x", b"a\tb@remote.test",
               b"a@remote.test\x00@evil.test", b"\x1b[2Ja@remote.test",
               b"a" * 1100 + b"@remote.test"):
        r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-t"],
                           input=b"To: ok@remote.test, " + to + b"\n\nhi\n",
                           capture_output=True, timeout=60)
        assert r.returncode == 65, (to, r.returncode, r.stderr)
        assert b"-t: an address in To:, Cc: or Bcc:" in r.stderr, r.stderr


def test_sendmail_t_quoted_local_part_with_a_blank_is_refused(mtad_factory):
    """A quoted local part is kept whole and refused for its blank (65),
    never cut to the bare @domain."""
    m = mtad_factory()          # configured, never started
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-t"],
                       input=b'To: a@remote.test, "b c"@remote.test\n\nhi\n',
                       capture_output=True, timeout=60)
    assert r.returncode == 65, (r.returncode, r.stderr)


def test_sendmail_f_cannot_add_mail_parameters(mtad_factory, hole):
    """-f goes into MAIL FROM:<...>: a blank or '>' in it is refused (64);
    "<>" and "" are the null sender, "<a@b>" loses its brackets."""
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    for bad in ("a@example.test> SMTPUTF8 ENVID=y",
                "a@example.test> RET=HDRS ENVID=x", "a b@example.test",
                "<a@example.test>>"):
        r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-f", bad,
                            "x@remote.test"], input=b"Subject: s\n\nhi\n",
                           capture_output=True, timeout=60)
        assert r.returncode == 64, (bad, r.returncode, r.stderr)
        assert b"-f: bad sender address" in r.stderr, r.stderr
    assert m.queue_ids() == []
    for given, sender in (("<app@example.org>", b"app@example.org"),
                          ("<>", b""), ("", b"")):
        r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-f", given,
                            "x@remote.test"], input=b"Subject: s\n\nhi\n",
                           capture_output=True, timeout=60)
        assert r.returncode == 0, (given, r.stderr)
    wait_for(lambda: len(m.queue_ids()) == 3, what="three queued messages")
    got = []
    for q in m.queue_ids():
        env, body = read_queue_file(os.path.join(m.spool, "queue", q))
        got.append(env["sender"])
        assert env.get("smtputf8") in (None, b"0", 0), env
        if env["sender"] == b"":
            assert b"\r\nFrom: MAILER-DAEMON@" in body, body
    assert sorted(got) == [b"", b"", b"app@example.org"], got


def test_sendmail_t_obsolete_blank_before_colon(mtad_factory, hole):
    """'Bcc :' (RFC 5322's obsolete syntax) is a Bcc: field like any: its
    address gets the message, the field does not; a "." line followed by
    a NUL does not end the message."""
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-t"],
                       input=b"To : a@remote.test\nBcc : secret@remote.test\n"
                             b"Subject: s\n\nline\n.\x00 more\nafter\n",
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: len(m.queue_ids()) == 1, what="one queued message")
    env, body = read_queue_file(os.path.join(m.spool, "queue",
                                             m.queue_ids()[0]))
    rcpts = sorted(x.split(b" ")[1] for x in env["rcpt"])
    assert rcpts == [b"a@remote.test", b"secret@remote.test"], env["rcpt"]
    assert b"secret" not in body and b"Bcc" not in body, body
    assert body.endswith(b"after\r\n"), body


def test_sendmail_refused_recipient(mtad_factory, hole):
    m = mtad_factory({"routes": {"default": hole.route()},
                      "relay": {"allow_networks": ["10.9.9.0/24"]}})
    m.start()
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "x@remote.test"],
                       input="Subject: x\n\nhi\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 67, (r.returncode, r.stderr)
    assert "RCPT refused: 554 5.7.1" in r.stderr


def test_sendmail_with_S_reads_no_configuration(mtad_factory, hole):
    """-S: usable by a user who may not read relay.yaml (run as the
    unprivileged 'mtad' user, with a -C-less default that is not read)."""
    import pwd
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    pw = pwd.getpwnam("mtad")

    def drop():
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    r = subprocess.run([SENDMAIL, "-S", "127.0.0.1:%d" % m.port,
                        "x@remote.test"], input="Subject: s\n\nhi\n",
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=drop if os.geteuid() == 0 else None,
                       cwd="/")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: len(m.queue_ids()) == 1, what="one queued message")
    env, _ = read_queue_file(os.path.join(m.spool, "queue",
                                          m.queue_ids()[0]))
    if os.geteuid() == 0:
        assert env["sender"].startswith(b"mtad@"), env["sender"]
