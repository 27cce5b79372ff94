"""DKIM signing (RFC 6376, RFC 8463) by a running mtad, checked by an
independent implementation: Debian's python3-dkim (dkimpy), whose DNS
lookup is replaced by the TXT record `mtactl dkim keygen` printed.

Keys are made with mtactl (mode 0600: when the tests run as root the
workers read them before dropping privileges).  Messages stay in
<spool>/queue (the default route is a listener that never accepts), so the
test verifies the stored message itself: the signature is in the queue
file, in front of the Received: header.  One test delivers to a sink and
verifies what arrived there.
"""
import os
import re
import subprocess

import dkim
import pytest

from mtadtest import (MTACTL, MTAD, Client, Sink, dot_stuff,
                      read_queue_file, wait_for)

QUEUED = re.compile(rb"^2\.0\.0 Ok: queued as ([0-9A-F]{16})$")


def keygen(d, domain, selector, alg):
    """(key file, TXT record value) from mtactl dkim keygen."""
    out = os.path.join(d, "%s.%s.pem" % (domain, selector))
    r = subprocess.run([MTACTL, "dkim", "keygen", domain, selector,
                        "--algorithm", alg, "--out", out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("; private key (%s" % alg), lines
    owner = "%s._domainkey.%s." % (selector, domain)
    assert lines[1].startswith(owner + " IN TXT ("), lines[1]
    txt = "".join(re.findall(r'"([^"]*)"', lines[1]))
    return out, txt.encode()


class Keys:
    """Keys made once per test: {(domain, selector): record}."""

    def __init__(self, d):
        self.d = d
        self.records = {}
        self.asked = []

    def make(self, domain, selector, alg):
        path, txt = keygen(self.d, domain, selector, alg)
        self.records[("%s._domainkey.%s." % (selector, domain)).encode()] = txt
        return {"domain": domain, "selector": selector, "key_file": path,
                "algorithm": alg}

    def dns(self, name, timeout=5):
        self.asked.append(name)
        return self.records.get(name)


@pytest.fixture
def keys(workdir):
    return Keys(workdir)



def start(mtad_factory, hole, sign, dkim_extra=None, route=None):
    cfg = {"server": {"workers": 1},
           "routes": {"default": route or hole.route()},
           "dkim": {"sign": sign}}
    cfg["dkim"].update(dkim_extra or {})
    return mtad_factory(cfg).start()


def send(m, msg, mail="MAIL FROM:<a@example.org> BODY=8BITMIME",
         bdat=False):
    """One transaction; the queued message's (envelope, body)."""
    with Client(m.port) as c:
        c.greet()
        assert c.cmd(mail).code == 250
        assert c.cmd("RCPT TO:<b@dest.test>").code == 250
        if bdat:
            c.send(b"BDAT %d LAST\r\n" % len(msg) + msg)
            r = c.reply()
        else:
            assert c.cmd("DATA").code == 354
            c.send(dot_stuff(msg))
            r = c.reply()
        assert r.code == 250, r
        qid = QUEUED.match(r.text).group(1).decode()
    path = os.path.join(m.spool, "queue", qid)
    assert wait_for(lambda: os.path.exists(path)), path
    return read_queue_file(path)


def signatures(body):
    """The DKIM-Signature fields at the top of a stored body."""
    return re.findall(rb"^DKIM-Signature:.*?\r\n(?=[^ \t])", body,
                      re.S | re.M)


def verify(keys, body, idx=0):
    """dkimpy's verdict on signature idx (a mismatch raises there)."""
    try:
        return dkim.DKIM(body).verify(idx=idx, dnsfunc=keys.dns)
    except dkim.ValidationError:
        return False


def msg(headers, body):
    return b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


FOLDED = msg([b"From: Alice Example <alice@example.org>",
              b"To: Bob <bob@dest.test>,",
              b"\tCarol <carol@dest.test>",
              b"Subject: a subject that is folded",
              b"   over  two\tlines   ",
              b"Date: Tue, 01 Dec 2026 10:00:00 +0000",
              b"Message-ID: <1@example.org>",
              b"X-Not-Signed: whatever"],
             b"Hello  there,\t\r\n  spaced   line   \r\n\r\n\r\n")
EMPTY = msg([b"From: alice@example.org", b"Subject: empty"], b"")
LONG = msg([b"From: <alice@example.org>", b"Subject: long lines",
            b"X-Long: " + b"h" * 3000],
           b"x" * 20000 + b"\r\n" + b"y " * 5000 + b"\r\n")
EIGHTBIT = msg(["From: \"Jörg Ä\" <joerg@example.org>".encode(),
                "Subject: Grüße aus Köln".encode(),
                b"Content-Type: text/plain; charset=utf-8",
                b"Content-Transfer-Encoding: 8bit",
                b"MIME-Version: 1.0"],
               "Fünf Äpfel,  zwölf Bäume\r\n\xa0 é\r\n".encode() +
               bytes(range(0x80, 0x100)) + b"\r\n")
# h= long enough to fold, several instances of a field (signed bottom up)
MANY = msg([b"From: a@example.org"] +
           [b"To: r%d@dest.test" % i for i in range(12)] +
           [b"Cc: c%d@dest.test" % i for i in range(12)] +
           [b"Subject: many", b"Reply-To: r@example.org",
            b"MIME-Version: 1.0", b"Content-Type: text/plain"],
           b"many fields\r\n")
# 90 KiB of header fields: the spool keeps room in front of all of them
BIGHEAD = msg([b"From: a@example.org"] +
              [b"X-Filler-%03d: %s" % (i, b"f" * 140) for i in range(600)],
              b"big header\r\n")
CASES = {"folded": FOLDED, "empty_body": EMPTY, "long_lines": LONG,
         "8bit": EIGHTBIT, "many_fields": MANY, "big_header": BIGHEAD}


@pytest.mark.parametrize("alg", ["rsa-sha256", "ed25519-sha256"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_signature_verifies(mtad_factory, hole, keys, alg, case):
    m = start(mtad_factory, hole, [keys.make("example.org", "s1", alg)])
    env, body = send(m, CASES[case])
    sigs = signatures(body)
    assert len(sigs) == 1, body[:600]
    assert b"a=" + alg.encode() + b";" in sigs[0]
    assert b"d=example.org;" in sigs[0] and b"s=s1;" in sigs[0]
    assert b"l=" not in re.sub(rb"b=[^;]*$", b"", sigs[0])
    # the signature comes first, then our Received:, then the message
    assert body.startswith(b"DKIM-Signature: ")
    assert body[len(sigs[0]):].startswith(b"Received: ")
    assert body.endswith(CASES[case])
    assert int(env["size"]) == len(body)
    assert verify(keys, body), body[:800]
    assert keys.asked == [b"s1._domainkey.example.org."]
    m.wait_log("dkim=example.org")


@pytest.mark.parametrize("alg", ["rsa-sha256", "ed25519-sha256"])
def test_tampered_body_fails(mtad_factory, hole, keys, alg):
    m = start(mtad_factory, hole, [keys.make("example.org", "s1", alg)])
    _, body = send(m, FOLDED)
    assert verify(keys, body)
    bad = body.replace(b"Hello  there", b"Hello  thera")
    assert bad != body
    assert not verify(keys, bad)
    # whitespace changes inside a line survive relaxed canonicalisation
    assert verify(keys, body.replace(b"Hello  there", b"Hello there"))


def test_added_from_breaks_the_signature(mtad_factory, hole, keys):
    """From is over-signed: a second From: added anywhere fails."""
    m = start(mtad_factory, hole,
              [keys.make("example.org", "s1", "ed25519-sha256")])
    _, body = send(m, FOLDED)
    sig = signatures(body)[0]
    assert re.search(rb"h=from:\s*from:", sig), sig
    assert verify(keys, body)
    forged = body.replace(b"\r\nFrom: ", b"\r\nFrom: evil@attacker.test\r\n"
                          b"From: ", 1)
    assert not verify(keys, forged)


def test_dual_signing_rsa_and_ed25519(mtad_factory, hole, keys):
    m = start(mtad_factory, hole,
              [keys.make("example.org", "rsa1", "rsa-sha256"),
               keys.make("example.org", "ed1", "ed25519-sha256")])
    _, body = send(m, FOLDED)
    sigs = signatures(body)
    assert len(sigs) == 2
    assert b"a=rsa-sha256;" in sigs[0] and b"a=ed25519-sha256;" in sigs[1]
    assert verify(keys, body, 0) and verify(keys, body, 1)


def test_subdomain_signs_with_parent_and_exact_wins(mtad_factory, hole, keys):
    m = start(mtad_factory, hole,
              [keys.make("example.org", "p", "ed25519-sha256"),
               keys.make("exact.example.org", "e", "ed25519-sha256")])
    _, body = send(m, msg([b"From: x@Mail.Example.ORG", b"Subject: s"],
                          b"hi\r\n"))
    assert b"d=example.org;" in signatures(body)[0]
    assert verify(keys, body)
    _, body = send(m, msg([b"From: x@exact.example.org", b"Subject: s"],
                          b"hi\r\n"))
    assert b"d=exact.example.org;" in signatures(body)[0]
    assert verify(keys, body)


def test_bdat_is_signed(mtad_factory, hole, keys):
    m = start(mtad_factory, hole,
              [keys.make("example.org", "s1", "ed25519-sha256")])
    _, body = send(m, FOLDED, bdat=True)
    assert len(signatures(body)) == 1
    assert verify(keys, body)


def test_large_body_verifies(mtad_factory, hole, keys):
    """2 MiB: the body leaves the spool buffer long before the end, so the
    signature is written into the room kept at the top with pwrite()."""
    m = start(mtad_factory, hole,
              [keys.make("example.org", "s1", "rsa-sha256")],
              )
    body_text = b"".join(b"line %07d of a long message  \r\n" % i
                         for i in range(70000))
    _, body = send(m, msg([b"From: a@example.org", b"Subject: big"],
                          body_text))
    assert len(body_text) > 2 * 1024 * 1024
    assert verify(keys, body)


def test_not_signed_without_key_or_from(mtad_factory, hole, keys):
    m = start(mtad_factory, hole,
              [keys.make("example.org", "s1", "ed25519-sha256")])
    _, body = send(m, msg([b"From: a@other.test", b"Subject: s"], b"x\r\n"))
    assert signatures(body) == [] and body.startswith(b"Received: ")
    m.wait_log("dkim: not signed: no key for the From: domain")
    _, body = send(m, msg([b"Subject: no from"], b"x\r\n"))
    assert signatures(body) == []
    _, body = send(m, msg([b"From: a@example.org", b"From: b@example.org"],
                          b"x\r\n"))
    assert signatures(body) == []
    # a parent is not the domain's child: example.org.evil.test no match
    _, body = send(m, msg([b"From: a@example.org.evil.test"], b"x\r\n"))
    assert signatures(body) == []
    m.wait_log("dkim: not signed: no single From: domain")


def test_not_signed_outside_sign_networks(mtad_factory, hole, keys):
    m = start(mtad_factory, hole,
              [keys.make("example.org", "s1", "ed25519-sha256")],
              {"sign_networks": ["10.0.0.0/8"]})
    _, body = send(m, FOLDED)
    assert signatures(body) == []


def test_huge_header_section_is_accepted_unsigned(mtad_factory, hole, keys):
    m = start(mtad_factory, hole,
              [keys.make("example.org", "s1", "ed25519-sha256")])
    hdrs = [b"From: a@example.org"] + [b"X-Filler-%05d: %s" % (i, b"f" * 90)
                                       for i in range(1500)]
    original = msg(hdrs, b"body\r\n")
    _, body = send(m, original)
    assert signatures(body) == [] and body.endswith(original)
    m.wait_log("dkim: not signed: header section too large to sign")


def test_delivered_message_verifies_at_the_sink(mtad_factory, keys):
    sink = Sink().start()
    try:
        m = start(mtad_factory, None,
                  [keys.make("example.org", "s1", "rsa-sha256")],
                  route=sink.route)
        with m.smtp() as s:
            s.sendmail("a@example.org", ["b@dest.test"], EIGHTBIT,
                       mail_options=["BODY=8BITMIME"])
        got = sink.wait_for(1)[0]
        data = got.data
        assert data.startswith(b"DKIM-Signature: ")
        assert verify(keys, data)
    finally:
        sink.stop()


# --- configuration --------------------------------------------------------

def check(mtad_factory, sign):
    m = mtad_factory({"dkim": {"sign": sign}})
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    return m, r


def test_config_missing_key_file(mtad_factory, workdir):
    m, r = check(mtad_factory, [{"domain": "example.org", "selector": "s1",
                                 "key_file": os.path.join(workdir, "nope.pem"),
                                 "algorithm": "rsa-sha256"}])
    assert r.returncode != 0
    assert re.search(r"relay\.yaml:\d+:\d+: dkim\.sign\[0\]\.key_file: "
                     r"cannot read '.*nope\.pem': No such file", r.stderr), \
        r.stderr


def test_config_wrong_key_type(mtad_factory, keys):
    k = keys.make("example.org", "s1", "ed25519-sha256")
    k["algorithm"] = "rsa-sha256"
    m, r = check(mtad_factory, [k])
    assert r.returncode != 0
    assert re.search(r"relay\.yaml:\d+:\d+: dkim\.sign\[0\]\.key_file: "
                     r"'.*' is not an RSA key", r.stderr), r.stderr


def test_config_not_a_key_and_bad_fields(mtad_factory, keys, workdir):
    junk = os.path.join(workdir, "junk.pem")
    with open(junk, "w") as f:
        f.write("not a key\n")
    good = keys.make("example.org", "s1", "ed25519-sha256")
    m, r = check(mtad_factory, [
        {"domain": "example.org", "selector": "s2", "key_file": junk,
         "algorithm": "ed25519-sha256"},
        {"domain": "example.org", "selector": "s3", "key_file": junk,
         "algorithm": "rsa-sha512"},
        {"domain": "example.org", "key_file": junk},
        dict(good), dict(good)])
    assert r.returncode != 0
    err = r.stderr
    assert re.search(r"dkim\.sign\[0\]\.key_file: no usable PEM private key",
                     err), err
    assert re.search(r"dkim\.sign\[1\]\.algorithm: expected rsa-sha256 or "
                     r"ed25519-sha256, got 'rsa-sha512'", err), err
    assert "dkim.sign[2].selector: required key is missing" in err
    assert re.search(r"dkim\.sign\[4\]: domain example\.org selector s1 is "
                     r"listed twice", err), err


def test_config_ok(mtad_factory, keys):
    m, r = check(mtad_factory, [keys.make("example.org", "s1", "rsa-sha256")])
    assert r.returncode == 0, r.stderr


# --- mtactl dkim keygen ---------------------------------------------------

def test_keygen_file_mode_and_no_overwrite(workdir):
    out = os.path.join(workdir, "k.pem")
    path, txt = keygen(workdir, "example.org", "sel", "ed25519-sha256")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert re.fullmatch(rb"v=DKIM1; k=ed25519; p=[A-Za-z0-9+/]{43}=", txt)
    r = subprocess.run([MTACTL, "dkim", "keygen", "example.org", "sel",
                        "--algorithm", "ed25519-sha256", "--out", path],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "exists (not replaced)" in r.stderr
    os.symlink(os.path.join(workdir, "target"), out)
    r = subprocess.run([MTACTL, "dkim", "keygen", "example.org", "sel",
                        "--out", out], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert not os.path.exists(os.path.join(workdir, "target"))


def test_keygen_rsa_bits_and_usage(workdir):
    path, txt = keygen(workdir, "example.org", "r1", "rsa-sha256")
    assert txt.startswith(b"v=DKIM1; k=rsa; p=MIIBIjAN")    # 2048-bit SPKI
    for args in (["example.org"], ["example.org", "s", "--bits", "512"],
                 ["example.org", "s", "--algorithm", "dsa"],
                 ["bad domain", "s"], ["example.org", "s/x"],
                 ["example.org", "s", "--algorithm", "ed25519-sha256",
                  "--bits", "2048"]):
        r = subprocess.run([MTACTL, "dkim", "keygen", *args],
                           capture_output=True, text=True, timeout=60,
                           cwd=workdir)
        assert r.returncode == 2, (args, r.stderr)
