"""Inbound STARTTLS (RFC 3207) against a running mtad: the EHLO keyword,
the replies around STARTTLS, a whole transaction over TLS with the
Received: header saying so, the clear-text injection of CVE-2011-0411, the
reset of the SMTP state after the handshake, a handshake that fails, a
large message, and the protocol floor (tls.min_version).

A self-signed certificate is made with the openssl CLI in each test's
directory; the key is mode 0600, so when the tests run as root it is
readable only before the workers drop their privileges.  Messages stay in
<spool>/queue: the default route is a listener that never accepts.
"""
import os
import random
import re
import smtplib
import socket
import ssl
import subprocess
import warnings

import pytest

from mtadtest import (Client, dot_stuff, read_queue_file,
                      strip_received, wait_for)


QUEUED = re.compile(rb"^2\.0\.0 Ok: queued as ([0-9A-F]{16})$")


def make_cert(d, name="server", cn="mx.test.example"):
    """A self-signed P-256 certificate and its key, in d."""
    cert = os.path.join(d, name + ".crt")
    key = os.path.join(d, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=" + cn],
                   check=True, capture_output=True, timeout=60)
    os.chmod(cert, 0o644)
    os.chmod(key, 0o600)
    return cert, key


def client_ctx(minv=None, maxv=None, seclevel0=False):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if seclevel0:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    if minv is not None:
        ctx.minimum_version = minv
    if maxv is not None:
        ctx.maximum_version = maxv
    return ctx


def caps(reply):
    return [l[4:].split(b" ")[0].upper() for l in reply.lines[1:]]


def queued_id(reply):
    assert reply.code == 250, reply
    m = QUEUED.match(reply.text)
    assert m, reply
    return m.group(1).decode()



@pytest.fixture
def mk(mtad_factory, workdir, hole):
    """mk(tls=True, extra_tls={}, limits={}) -> a started one-worker mtad."""
    def make(tls=True, extra_tls=None, limits=None):
        cfg = {"server": {"workers": 1}, "routes": {"default": hole.route()}}
        if tls:
            cert, key = make_cert(workdir)
            cfg["tls"] = {"cert_file": cert, "key_file": key}
            cfg["tls"].update(extra_tls or {})
        if limits:
            cfg["limits"] = limits
        return mtad_factory(cfg).start()
    return make


def starttls(c, ctx=None, ehlo=True):
    """Greet, STARTTLS, handshake on Client c; returns c (now over TLS)."""
    assert c.reply().code == 220
    if ehlo:
        r = c.cmd("EHLO client.test")
        assert r.code == 250 and b"STARTTLS" in caps(r), r
    r = c.cmd("STARTTLS")
    assert r.code == 220 and r.text == b"2.0.0 Ready to start TLS", r
    assert c.buf == b"", c.buf
    c.sock = (ctx or client_ctx()).wrap_socket(c.sock)
    return c


# --- offering STARTTLS -------------------------------------------------------

def test_no_starttls_without_config(mk):
    m = mk(tls=False)
    with Client(m.port) as c:
        r = c.greet()
        assert b"STARTTLS" not in caps(r)
        r = c.cmd("STARTTLS")
        assert r.code == 502 and r.text.startswith(b"5.5.1"), r
        assert c.cmd("NOOP").code == 250      # the session goes on


def test_ehlo_offers_starttls_only_before_tls(mk):
    m = mk()
    with Client(m.port) as c:
        starttls(c)
        r = c.cmd("EHLO client.test")
        assert r.code == 250 and r.lines[0] == b"250-mx.test.example", r
        assert b"STARTTLS" not in caps(r)
        assert b"PIPELINING" in caps(r)
        assert c.cmd("HELO client.test").code == 250


def test_starttls_with_argument_and_twice(mk):
    m = mk()
    with Client(m.port) as c:
        c.greet()
        r = c.cmd("STARTTLS now")
        assert r.code == 501 and r.text.startswith(b"5.5.4"), r
        r = c.cmd("STARTTLS")
        assert r.code == 220
        c.sock = client_ctx().wrap_socket(c.sock)
        assert c.cmd("EHLO client.test").code == 250
        r = c.cmd("STARTTLS")
        assert r.code == 503 and r.text.startswith(b"5.5.1"), r
        assert c.cmd("NOOP").code == 250


# --- transactions over TLS --------------------------------------------------

def test_smtplib_starttls_transaction(mk):
    m = mk()
    body = b"Subject: tls\r\n\r\nover TLS\r\n"
    s = smtplib.SMTP("127.0.0.1", m.port, timeout=10)
    try:
        s.ehlo("client.test")
        assert s.has_extn("starttls")
        s.starttls(context=client_ctx())
        s.ehlo("client.test")
        assert not s.has_extn("starttls")
        s.sendmail("a@x.test", ["b@y.test"], body)
        s.quit()
    finally:
        s.close()
    assert wait_for(lambda: m.queue_ids())
    ids = m.queue_ids()
    assert len(ids) == 1
    _, data = read_queue_file(os.path.join(m.spool, "queue", ids[0]))
    received, rest = strip_received(data)
    assert rest == body
    assert b" with ESMTPS id " + ids[0].encode() in received, received
    assert re.search(rb"\(using TLSv1\.[23] with cipher [A-Z0-9_-]+ "
                     rb"\(\d+/\d+ bits\)\)", received), received
    text = m.wait_log("STARTTLS from [127.0.0.1]:")
    assert re.search(r"STARTTLS from \[127\.0\.0\.1\]:\d+: TLSv1\.3 TLS_", text)


def test_plaintext_injection_is_discarded(mk):
    """CVE-2011-0411: commands pipelined behind STARTTLS in clear must not
    be run inside the TLS session."""
    m = mk()
    with Client(m.port) as c:
        assert c.reply().code == 220
        assert c.cmd("EHLO client.test").code == 250
        c.send(b"STARTTLS\r\nRSET\r\n")
        r = c.reply()
        assert r.code == 220 and r.text == b"2.0.0 Ready to start TLS", r
        assert c.buf == b""
        c.sock = client_ctx().wrap_socket(c.sock)
        r = c.cmd("EHLO client.test")
        # The first reply over TLS is the EHLO's, not "250 2.0.0 Ok".
        assert r.code == 250 and r.lines[0] == b"250-mx.test.example", r
        assert c.cmd("NOOP").lines == [b"250 2.0.0 Ok"]
        c.cmd("QUIT")
    text = m.wait_log("disconnect from [127.0.0.1]:%d" % c.local_port)
    line = [l for l in text.splitlines()
            if "disconnect from [127.0.0.1]:%d " % c.local_port in l][0]
    assert "starttls=1" in line and "rset=" not in line, line


def test_state_is_reset_after_handshake(mk):
    m = mk()
    with Client(m.port) as c:
        assert c.reply().code == 220
        assert c.cmd("EHLO client.test").code == 250
        assert c.cmd("MAIL FROM:<a@x.test>").code == 250
        assert c.cmd("STARTTLS").code == 220
        c.sock = client_ctx().wrap_socket(c.sock)
        r = c.cmd("MAIL FROM:<a@x.test>")
        assert r.code == 503 and r.text.startswith(b"5.5.1"), r
        assert c.cmd("EHLO client.test").code == 250
        assert c.cmd("RCPT TO:<b@y.test>").code == 503   # no transaction
        assert c.cmd("MAIL FROM:<a@x.test>").code == 250
        assert c.cmd("RCPT TO:<b@y.test>").code == 250


def test_five_megabyte_message_over_tls(mk):
    m = mk()
    rnd = random.Random(5)
    lines, size = [], 0
    while size < 5 * 1024 * 1024:
        n = rnd.randrange(0, 998)
        line = bytes(rnd.randrange(33, 127) for _ in range(min(n, 64))) * (n // 64 + 1)
        line = line[:n]
        if rnd.random() < 0.05:
            line = b"." + line[:996]
        lines.append(line)
        size += len(line) + 2
    body = b"Subject: big tls\r\n\r\n" + b"\r\n".join(lines) + b"\r\n"
    with Client(m.port, timeout=60) as c:
        starttls(c)
        assert c.cmd("EHLO client.test").code == 250
        # The whole transaction in one write: records end mid-line and
        # mid-command, and bytes wait inside the server's SSL object.
        c.send(b"MAIL FROM:<big@x.test>\r\nRCPT TO:<r@y.test>\r\nDATA\r\n"
               + dot_stuff(body) + b"NOOP\r\n")
        mail, rcpt, data, end, noop = c.replies(5)
        assert (mail.code, rcpt.code, data.code, noop.code) == (250, 250, 354, 250)
        qid = queued_id(end)
        # BDAT too, with a chunk split over many records.
        assert c.cmd("MAIL FROM:<big@x.test>").code == 250
        assert c.cmd("RCPT TO:<r@y.test>").code == 250
        c.send(b"BDAT %d LAST\r\n" % len(body) + body)
        qid2 = queued_id(c.reply())
    for q in (qid, qid2):
        _, data_ = read_queue_file(os.path.join(m.spool, "queue", q))
        received, rest = strip_received(data_)
        assert b"with ESMTPS" in received
        assert len(rest) == len(body)
        assert rest == body


# --- failures ---------------------------------------------------------------

def read_to_eof(sock, timeout=5.0):
    """True when the peer closes within timeout (TLS alert bytes ignored)."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_garbage_instead_of_client_hello(mk):
    m = mk()
    workers = m.children()
    with Client(m.port) as c:
        assert c.reply().code == 220
        assert c.cmd("STARTTLS").code == 220
        c.send(b"EHLO this is not a ClientHello\r\n" * 4)
        assert read_to_eof(c.sock)
    m.wait_log("STARTTLS from [127.0.0.1]:%d failed: " % c.local_port)
    # The worker lives on and serves the next client over TLS.
    with Client(m.port) as c2:
        starttls(c2)
        assert c2.cmd("EHLO client.test").code == 250
        assert c2.cmd("MAIL FROM:<a@x.test>").code == 250
        assert c2.cmd("RCPT TO:<b@y.test>").code == 250
        assert c2.cmd("DATA").code == 354
        c2.send(dot_stuff(b"Subject: after garbage\r\n\r\nok\r\n"))
        queued_id(c2.reply())
    assert m.children() == workers
    assert m.proc.poll() is None


def test_client_gone_during_handshake(mk):
    m = mk()
    with Client(m.port) as c:
        assert c.reply().code == 220
        assert c.cmd("STARTTLS").code == 220
    m.wait_log("STARTTLS from [127.0.0.1]:%d failed: " % c.local_port)
    with Client(m.port) as c2:
        starttls(c2)
        assert c2.cmd("EHLO client.test").code == 250


def test_tls11_is_refused(mk):
    m = mk()
    try:
        with warnings.catch_warnings():     # TLSVersion.TLSv1_1 is deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx = client_ctx(ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1_1,
                             seclevel0=True)
    except (ValueError, ssl.SSLError) as e:
        pytest.skip("this Python cannot offer TLS 1.1: %s" % e)
    with Client(m.port) as c:
        assert c.reply().code == 220
        assert c.cmd("STARTTLS").code == 220
        try:
            ctx.wrap_socket(c.sock)
        except ssl.SSLError as e:
            if "NO_PROTOCOLS_AVAILABLE" in str(e) or "no protocols" in str(e):
                pytest.skip("the client library refuses TLS 1.1 itself")
            refused = True
        except (ConnectionResetError, BrokenPipeError):
            refused = True
        else:
            refused = False
        assert refused, "TLS 1.1 handshake succeeded"
    m.wait_log("STARTTLS from [127.0.0.1]:%d failed: " % c.local_port)


def test_min_version_tls13(mk):
    m = mk(extra_tls={"min_version": "TLSv1.3",
                      "ciphers": "ECDHE-ECDSA-AES128-GCM-SHA256"})
    with Client(m.port) as c:
        assert c.reply().code == 220
        assert c.cmd("STARTTLS").code == 220
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            client_ctx(maxv=ssl.TLSVersion.TLSv1_2).wrap_socket(c.sock)
    with Client(m.port) as c:
        starttls(c)
        assert c.sock.version() == "TLSv1.3"
        assert c.cmd("EHLO client.test").code == 250


def test_tls12_with_configured_cipher(mk):
    m = mk(extra_tls={"ciphers": "ECDHE-ECDSA-AES128-GCM-SHA256"})
    with Client(m.port) as c:
        starttls(c, client_ctx(maxv=ssl.TLSVersion.TLSv1_2))
        assert c.sock.version() == "TLSv1.2"
        assert c.sock.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
        assert c.cmd("EHLO client.test").code == 250
        assert c.cmd("MAIL FROM:<a@x.test>").code == 250
        assert c.cmd("RCPT TO:<b@y.test>").code == 250
        assert c.cmd("DATA").code == 354
        c.send(dot_stuff(b"Subject: tls12\r\n\r\nok\r\n"))
        qid = queued_id(c.reply())
    _, data = read_queue_file(os.path.join(m.spool, "queue", qid))
    received, _ = strip_received(data)
    assert (b"(using TLSv1.2 with cipher ECDHE-ECDSA-AES128-GCM-SHA256 "
            b"(128/128 bits))") in received, received


def test_bad_key_refuses_to_start(mtad_factory, workdir, hole):
    cert, _ = make_cert(workdir, "a")
    _, other_key = make_cert(workdir, "b")
    m = mtad_factory({"routes": {"default": hole.route()},
                      "tls": {"cert_file": cert, "key_file": other_key}})
    m.start(wait=False)
    try:
        m.proc.wait(15)
    except subprocess.TimeoutExpired:
        pytest.fail("mtad started with a key that does not match")
    assert m.proc.returncode != 0
    assert "tls.key_file: the key in '%s' does not match" % other_key \
        in m.stderr_text()


def test_pipelined_commands_beyond_one_buffer(mk):
    """Commands that fill the server's 128 KiB input buffer in the middle
    of the client's last TLS record: the rest of that record waits
    decrypted inside the server's SSL object while the socket is quiet,
    and must still be read (the loop is level-triggered and cannot see
    it).  A memory-BIO client sends its Finished message and then records
    of 8 KiB + 8 x 16 KiB in one write, so the server's first read after
    the handshake finds them all and its buffer ends 8 KiB into the last
    record.  (NOOP is only the cheapest command: the junk limit is raised.)"""
    m = mk(limits={"max_junk_commands": 100000})
    with Client(m.port, timeout=20) as c:
        assert c.reply().code == 220
        assert c.cmd("STARTTLS").code == 220
        inb, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = client_ctx(minv=ssl.TLSVersion.TLSv1_3).wrap_bio(inb, outb)
        for _ in range(20):
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                c.sock.sendall(outb.read())
                data = c.sock.recv(65536)
                assert data, "closed during the handshake"
                inb.write(data)
        assert tls.version() == "TLSv1.3"
        first = b"NOOP\r\n" * 1365 + b"NO"             # 8 KiB: one record
        rest = b"OP\r\n" + b"NOOP\r\n" * 21843 + b"NOOP abc\r\n"
        assert (len(first), len(rest)) == (8192, 131072)   # + 8 records
        tls.write(first)
        tls.write(rest)
        c.sock.sendall(outb.read())                    # Finished + data
        n = 1365 + 1 + 21843 + 1
        got = bytearray()
        replies = 0
        while replies < n:
            try:
                chunk = tls.read(65536)
                got += chunk
                replies += chunk.count(b"\r\n")
                continue
            except ssl.SSLWantReadError:
                pass
            data = c.sock.recv(65536)
            assert data, "closed after %d replies" % replies
            inb.write(data)
        assert got == b"250 2.0.0 Ok\r\n" * n


def membio_handshake(c):
    """STARTTLS on Client c, then a TLS 1.3 handshake through memory BIOs
    up to the client's Finished, which is left unsent in the returned
    outgoing BIO: (tls object, incoming BIO, outgoing BIO)."""
    assert c.reply().code == 220
    assert c.cmd("STARTTLS").code == 220
    inb, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_ctx(minv=ssl.TLSVersion.TLSv1_3).wrap_bio(inb, outb)
    for _ in range(20):
        try:
            tls.do_handshake()
            return tls, inb, outb
        except ssl.SSLWantReadError:
            c.sock.sendall(outb.read())
            data = c.sock.recv(65536)
            assert data, "closed during the handshake"
            inb.write(data)
    raise AssertionError("no TLS 1.3 handshake in 20 rounds")


def test_command_in_the_segment_of_the_finished_message(mk):
    """The client's Finished message and its first command (a record of
    their own) arrive in one TCP segment: the server reads ahead (one
    read() per flight), so the handshake's last read takes the command's
    record off the socket too, and nothing more will come until it is
    answered.  The record waiting raw in the SSL object must be read
    (net_pending() counts it) - a server that waits for the socket
    instead leaves the client without its reply until the socket timeout
    raises here."""
    m = mk()
    with Client(m.port, timeout=10) as c:
        tls, inb, outb = membio_handshake(c)
        tls.write(b"EHLO client.test\r\n")
        c.sock.sendall(outb.read())                    # Finished + EHLO
        got = bytearray()
        while not re.search(rb"(^|\r\n)250 [^\r\n]*\r\n$", bytes(got)):
            try:
                got += tls.read(65536)
                continue
            except ssl.SSLWantReadError:
                pass
            data = c.sock.recv(65536)                  # raises on timeout
            assert data, "closed before the EHLO reply: %r" % bytes(got)
            inb.write(data)
        assert got.startswith(b"250-"), bytes(got)
        assert b"STARTTLS" not in got, bytes(got)      # RFC 3207 4.2
