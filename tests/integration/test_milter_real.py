"""The milter client against real milters from Debian: rspamd (its proxy
worker in milter mode, self-scanning: the GTUBE message is refused with
rspamd's 5.7.1, clean mail gets rspamd's headers) and opendkim in verify
mode (a message signed here with python3-dkim gets Authentication-Results
dkim=pass; one changed after signing, dkim=fail).  Both on one listener
too: a chain of two milters.

Everything on loopback: rspamd's configuration is written to the test's
directory (Debian's rules and modules, those needing the network or redis
off, a five-entry TLD list so it starts in a second or two), opendkim
reads the public key from a TestPublicKeys file instead of DNS.  Each is
started once for the module.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from mtadtest import Client, Mtad, free_port, wait_for
from sink import Sink

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/bin/rspamd") and
         os.path.exists("/usr/sbin/opendkim")),
    reason="rspamd and opendkim (packaging/deps.sh) are not installed")

GTUBE = b"XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X"

RSPAMD_CONF = """
.include "$CONFDIR/common.conf"
options {
    pidfile = "$RUNDIR/rspamd.pid";
    .include "$CONFDIR/options.inc"
    .include(try=true; priority=1,duplicate=merge) "$LOCAL_CONFDIR/local.d/options.inc"
}
logging { type = "file"; filename = "$LOGDIR/rspamd.log"; level = "info"; }
worker "rspamd_proxy" {
    bind_socket = "127.0.0.1:%(port)d";
    milter = yes;
    timeout = 30s;
    upstream "local" { default = yes; self_scan = yes; }
    count = 1;
    reject_message = "Spam message rejected";
}
lua = "$RULESDIR/rspamd.lua"
.include "$CONFDIR/metrics.conf"
.include "$CONFDIR/actions.conf"
.include "$CONFDIR/groups.conf"
.include "$CONFDIR/composites.conf"
.include "$CONFDIR/modules.conf"
.include "$CONFDIR/settings.conf"
"""
# modules that ask the network (DNS lists, SPF, DKIM keys) or need redis
RSPAMD_OFF = ("rbl surbl fuzzy_check asn emails phishing spf dmarc dkim arc "
              "mx_check neural ratelimit greylist reputation replies "
              "rspamd_update url_redirector dcc history_redis").split()


def start_rspamd(d, port):
    for sub in ("local.d", "db", "run", "log"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    with open(os.path.join(d, "rspamd.conf"), "w") as f:
        f.write(RSPAMD_CONF % {"port": port})
    with open(os.path.join(d, "tld.dat"), "w") as f:
        f.write("com\norg\nnet\ntest\nexample\n")
    with open(os.path.join(d, "local.d", "options.inc"), "w") as f:
        f.write('dns { nameserver = ["127.0.0.1:53"]; timeout = 0.2s; '
                'retransmits = 1; }\nurl_tld = "%s/tld.dat";\n' % d)
    with open(os.path.join(d, "local.d", "milter_headers.conf"), "w") as f:
        f.write('use = ["x-spamd-result", "x-rspamd-queue-id", '
                '"x-spam-status"];\nskip_local = false;\n'
                'skip_authenticated = false;\n')
    for mdl in RSPAMD_OFF:
        with open(os.path.join(d, "local.d", mdl + ".conf"), "w") as f:
            f.write("enabled = false;\n")
    args = ["/usr/bin/rspamd", "-f", "-c", os.path.join(d, "rspamd.conf")]
    if os.geteuid() == 0:
        args += ["-i", "-u", "root", "-g", "root"]
    for var in ("LOCAL_CONFDIR=%s" % d, "DBDIR=%s/db" % d,
                "RUNDIR=%s/run" % d, "LOGDIR=%s/log" % d):
        args.append("--var=" + var)
    out = open(os.path.join(d, "rspamd.out"), "wb")
    return subprocess.Popen(args, stdout=out, stderr=out)


def start_opendkim(d, port):
    key = os.path.join(d, "dkim.key")
    subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True,
                   capture_output=True)
    der = subprocess.run(["openssl", "rsa", "-in", key, "-pubout",
                          "-outform", "DER"], check=True,
                         capture_output=True).stdout
    import base64
    with open(os.path.join(d, "keys.txt"), "w") as f:
        f.write("sel._domainkey.example.org v=DKIM1; k=rsa; p=%s\n"
                % base64.b64encode(der).decode())
    conf = os.path.join(d, "opendkim.conf")
    with open(conf, "w") as f:
        f.write("Mode v\nSocket inet:%d@127.0.0.1\nBackground no\n"
                "Syslog no\nTestPublicKeys %s/keys.txt\n"
                "AuthservID mx.test.example\nPidFile %s/opendkim.pid\n"
                "InternalHosts 192.0.2.1\nAlwaysAddARHeader yes\n"
                "UserID %s\n" % (port, d, d,
                                 "root" if os.geteuid() == 0 else
                                 str(os.getuid())))
    out = open(os.path.join(d, "opendkim.out"), "wb")
    return subprocess.Popen(["/usr/sbin/opendkim", "-f", "-x", conf],
                            stdout=out, stderr=out), key


def listening(port):
    import socket
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def env():
    d = tempfile.mkdtemp(prefix="mtad-milter-real-", dir="/dev/shm")
    os.chmod(d, 0o755)
    rport, dport = free_port(), free_port()
    rsp = start_rspamd(os.path.join(d, "rspamd"), rport)
    os.makedirs(os.path.join(d, "odkim"))
    odk, key = start_opendkim(os.path.join(d, "odkim"), dport)
    sink = Sink().start()
    m = None
    try:
        wait_for(lambda: listening(rport), timeout=40,
                 what="rspamd's proxy worker")
        wait_for(lambda: listening(dport), timeout=10, what="opendkim")
        ports = [free_port() for _ in range(3)]
        rs = {"name": "rspamd", "socket": "inet:127.0.0.1:%d" % rport,
              "timeouts": {"command": "20s", "eom": "30s"}}
        od = {"name": "opendkim", "socket": "inet:127.0.0.1:%d" % dport}
        m = Mtad(os.path.join(d), {
            "relay": {"allow_networks": ["127.0.0.0/8"]},
            "routes": {"default": sink.route}})
        m.port = ports[0]
        m.cfg["server"]["listen"] = [
            {"address": "127.0.0.1:%d" % ports[0], "milters": [rs]},
            {"address": "127.0.0.1:%d" % ports[1], "milters": [od]},
            {"address": "127.0.0.1:%d" % ports[2], "milters": [od, rs]}]
        m.write_config()
        m.start()
        m.ports = ports
        yield m, sink, key
    finally:
        if m is not None:
            m.stop()
        sink.stop()
        for p in (rsp, odk):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        shutil.rmtree(d, ignore_errors=True)


def send(port, msg, rcpt="b@example.net"):
    with Client(port, timeout=40) as c:
        c.greet()
        assert c.cmd("MAIL FROM:<a@example.org>").code == 250
        assert c.cmd("RCPT TO:<%s>" % rcpt).code == 250
        assert c.cmd("DATA").code == 354
        c.send(msg + b".\r\n")
        r = c.reply()
        c.cmd("QUIT")
        return r


def message(subject, text):
    return (b"From: a@example.org\r\nTo: b@example.net\r\n"
            b"Subject: " + subject + b"\r\n"
            b"Message-ID: <" + str(time.time()).encode() + b"@example.org>\r\n"
            b"Date: Fri, 04 Dec 2026 18:00:00 +0000\r\n\r\n" + text)


def test_rspamd_rejects_gtube(env):
    m, sink, _ = env
    r = send(m.ports[0], message(b"test", b"This is spam.\r\n" + GTUBE +
                                 b"\r\n"))
    assert r.code == 554, r
    assert b"5.7.1" in r.lines[0], r
    assert m.wait_log("milter-reject: END-OF-MESSAGE")


def test_rspamd_adds_headers_to_clean_mail(env):
    m, sink, _ = env
    n = len(sink.received())
    r = send(m.ports[0], message(b"lunch", b"See you at noon, as usual.\r\n"
                                 b"Bring the report if it is ready.\r\n"))
    assert r.code == 250, r
    got = sink.wait_for(n + 1)[n]
    head = got.data.split(b"\r\n\r\n", 1)[0]
    assert re.search(rb"\r\nX-Spamd-Result: default: False", head), head
    assert re.search(rb"\r\nX-Rspamd-Queue-Id: [0-9A-F]{16}", head), head
    assert b"noon" in got.data


def dkim_signed(key_path, text=b"Signed text.\r\n"):
    import dkim
    msg = message(b"signed", text)
    with open(key_path, "rb") as f:
        sig = dkim.sign(msg, b"sel", b"example.org", f.read(),
                        canonicalize=(b"relaxed", b"relaxed"),
                        include_headers=[b"from", b"to", b"subject",
                                         b"message-id", b"date"])
    return sig + msg


def test_opendkim_verifies(env):
    m, sink, key = env
    n = len(sink.received())
    assert send(m.ports[1], dkim_signed(key)).code == 250
    got = sink.wait_for(n + 1)[n]
    assert re.search(rb"Authentication-Results: mx\.test\.example;\s+"
                     rb"dkim=pass", got.data), got.data[:1500]
    bad = dkim_signed(key).replace(b"Signed text.", b"Changed text.")
    assert send(m.ports[1], bad).code == 250
    got = sink.wait_for(n + 2)[n + 1]
    assert re.search(rb"Authentication-Results: mx\.test\.example;\s+"
                     rb"dkim=fail", got.data), got.data[:1500]


def test_chain_of_two(env):
    m, sink, key = env
    n = len(sink.received())
    assert send(m.ports[2], dkim_signed(key)).code == 250
    got = sink.wait_for(n + 1)[n]
    head = got.data.split(b"\r\n\r\n", 1)[0]
    assert b"dkim=pass" in head and b"X-Spamd-Result:" in head, head
    r = send(m.ports[2], message(b"x", GTUBE + b"\r\n"))
    assert r.code == 554, r


def test_rspamd_large_message(env):
    """Many body chunks (over 65535 bytes each) through a real milter."""
    m, sink, _ = env
    n = len(sink.received())
    text = b"".join(b"line %06d of a long report about nothing much\r\n" % i
                    for i in range(20000))
    r = send(m.ports[0], message(b"long", text))
    assert r.code == 250, r
    got = sink.wait_for(n + 1)[n]
    assert got.data.endswith(text)
    assert b"\r\nX-Spamd-Result: " in got.data.split(b"\r\n\r\n", 1)[0]
