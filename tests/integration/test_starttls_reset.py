"""RFC 3207 4.2: after STARTTLS the server forgets everything the client
told it in clear, an AUTH included.  Otherwise plaintext injected ahead of
the client's STARTTLS (the CVE-2011-0411 class) could log the TLS session
in as someone else, and it would relay and be signed as that user.  AUTH
in clear exists only with auth.allow_plaintext_loopback.  Failed before
its fix."""
import smtplib

from test_auth import b64, start, tls_ctx


def test_auth_in_clear_is_forgotten_after_starttls(mtad_factory, workdir,
                                                   hole):
    t = start(mtad_factory, workdir, hole,
              auth={"allow_plaintext_loopback": True})
    # 127.0.0.2 may not relay by address (relay.allow_networks is
    # 127.0.0.1/32): only an AUTH lets it
    s = smtplib.SMTP("127.0.0.1", t.m.port, timeout=10,
                     source_address=("127.0.0.2", 0))
    s.ehlo("client.test")
    code, _ = s.docmd("AUTH", "PLAIN " + b64("\0alice\0s3cret pass"))
    assert code == 235
    s.starttls(context=tls_ctx())
    s.ehlo("client.test")
    assert s.mail("alice@example.org")[0] == 250
    code, resp = s.rcpt("rcpt@remote.test")
    assert code == 554, (code, resp)            # relay denied: not logged in
    s.rset()
    # and it may log in again, now under TLS
    code, resp = s.docmd("AUTH", "PLAIN " + b64("\0alice\0s3cret pass"))
    assert code == 235, (code, resp)
    assert s.mail("alice@example.org")[0] == 250
    assert s.rcpt("rcpt@remote.test")[0] == 250
    s.quit()


def test_submission_needs_auth_again_after_starttls(mtad_factory, workdir,
                                                    hole):
    t = start(mtad_factory, workdir, hole,
              auth={"allow_plaintext_loopback": True})
    s = smtplib.SMTP("127.0.0.1", t.sub, timeout=10,
                     source_address=("127.0.0.1", 0))
    s.ehlo("client.test")
    code, _ = s.docmd("AUTH", "PLAIN " + b64("\0alice\0s3cret pass"))
    assert code == 235
    s.starttls(context=tls_ctx())
    s.ehlo("client.test")
    code, resp = s.mail("alice@example.org")
    assert (code, resp) == (530, b"5.7.0 Authentication required")
    s.close()
