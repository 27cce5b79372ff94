"""greylist against a real mtad: an unauthenticated client's first RCPT
of a new triplet (its /24, sender, recipient) is answered 450 4.7.1, and
so is a retry within greylist.delay (2 s here); after the delay the retry
is accepted and the triplet then passes at once, from another address of
the same /24 too, and after a restart (greylist.mdb in the spool).
relay.allow_networks, authenticated clients and greylist.allow_* are
exempt; a listener with greylist: false is not greylisted; mtactl
greylist list|del|flush and mtad_greylist_total."""
import os
import time

from mtadtest import Client, free_port, wait_for

GREY = "450 4.7.1 Greylisted, try again later"


def start(mtad_factory, grey=None, prep=None, **over):
    cfg = {"relay": {"allow_networks": ["127.0.0.8/32"]},
           "routes": {"static": {"example.org": "discard",
                                 "allowed.test": "discard"}},
           "greylist": {"enabled": True, "delay": "2s"}}
    if grey:
        cfg["greylist"].update(grey)
    cfg.update(over)
    m = mtad_factory(cfg)
    if prep is not None:
        prep(m)
        m.write_config()
    m.start()
    return m


def rcpt(m, ip, sender, to, port=None):
    """The reply code and text to RCPT TO:<to> after MAIL FROM:<sender>;
    a message is sent when it is accepted (so a pass is a whole one)."""
    with Client(port or m.port, source=ip, timeout=10) as c:
        c.greet()
        assert c.cmd("MAIL FROM:<%s>" % sender).code == 250
        r = c.cmd("RCPT TO:<%s>" % to)
        if r.code == 250:
            assert c.cmd("DATA").code == 354
            c.send(b"Subject: t\r\n\r\nbody\r\n.\r\n")
            assert c.reply().code == 250
        c.cmd("QUIT")
        return r.code, r.text


def test_first_retry_pass_and_restart(mtad_factory):
    """450 at first and within the delay, 250 after it, then at once (and
    from 127.0.0.20, same /24); a new sender is greylisted again; the
    state survives a restart."""
    m = start(mtad_factory)
    t0 = time.monotonic()
    code, text = rcpt(m, "127.0.0.5", "a@sender.test", "u@example.org")
    assert (code, text.decode()) == (450, GREY[4:]), (code, text)
    m.wait_log("greylist: RCPT from [127.0.0.5]")
    code, _ = rcpt(m, "127.0.0.5", "a@sender.test", "u@example.org")
    if time.monotonic() - t0 < 1.8:     # the retry came within the delay
        assert code == 450
    wait_for(lambda: time.monotonic() - t0 > 2.1, timeout=5,
             what="the delay")
    assert rcpt(m, "127.0.0.5", "a@sender.test", "u@example.org")[0] == 250
    assert rcpt(m, "127.0.0.20", "a@sender.test", "u@example.org")[0] == 250
    assert rcpt(m, "127.0.0.5", "b@sender.test", "u@example.org")[0] == 450
    lines = m.ctl("greylist", "list", check=True).stdout.splitlines()
    assert any(x.startswith("127.0.0.0/24 a@sender.test u@example.org "
                            "state=passed") for x in lines), lines
    assert any(x.startswith("127.0.0.0/24 b@sender.test u@example.org "
                            "state=waiting") for x in lines), lines
    m.stop()
    assert os.path.exists(os.path.join(m.spool, "greylist.mdb"))
    m.start()
    assert rcpt(m, "127.0.0.6", "a@sender.test", "u@example.org")[0] == 250
    assert rcpt(m, "127.0.0.6", "c@sender.test", "u@example.org")[0] == 450


def test_exempt_clients(mtad_factory, workdir):
    """relay.allow_networks, an authenticated client, greylist's allow
    lists (networks, sender and recipient domains), and a listener with
    greylist: false: all accepted at once."""
    from test_auth_scale import plain, yescrypt
    pw = os.path.join(workdir, "passwd")
    with open(pw, "w") as f:
        f.write("alice:%s\n" % yescrypt("s3cret pass", cost=5))
    os.chmod(pw, 0o600)
    port2 = free_port()

    def two_listeners(m):
        m.cfg["server"]["listen"] = [
            "127.0.0.1:%d" % m.port,
            {"address": "127.0.0.1:%d" % port2, "greylist": False}]
    m = start(mtad_factory, prep=two_listeners,
              grey={"allow_networks": ["127.0.0.30/32"],
                    "allow_sender_domains": ["friend.test"],
                    "allow_recipient_domains": ["allowed.test"]},
              auth={"password_file": pw, "allow_plaintext_loopback": True,
                    "failure_delay": "0s"})
    assert rcpt(m, "127.0.0.8", "a@x.test", "u@example.org")[0] == 250
    assert rcpt(m, "127.0.0.30", "a@x.test", "u@example.org")[0] == 250
    assert rcpt(m, "127.0.0.9", "a@mx.friend.test", "u@example.org")[0] \
        == 250
    assert rcpt(m, "127.0.0.9", "a@x.test", "u@allowed.test")[0] == 250
    assert rcpt(m, "127.0.0.9", "a@x.test", "u@example.org",
                port=port2)[0] == 250
    assert rcpt(m, "127.0.0.9", "a@x.test", "u@example.org")[0] == 450
    with Client(m.port, source="127.0.0.9", timeout=30) as c:
        c.greet()
        assert c.cmd(plain("alice", "s3cret pass")).code == 235
        assert c.cmd("MAIL FROM:<z@x.test>").code == 250
        assert c.cmd("RCPT TO:<u@example.org>").code == 250


def test_mtactl_and_metrics(mtad_factory):
    """list by network, del of one client's triplets (greylisted again),
    flush; the counters; del and flush are admin records."""
    from test_ops import scrape
    mport = free_port()
    m = start(mtad_factory, grey={"delay": "1h"},
              metrics={"listen": "127.0.0.1:%d" % mport})
    assert rcpt(m, "127.0.0.5", "a@s.test", "u@example.org")[0] == 450
    assert rcpt(m, "127.0.1.5", "a@s.test", "u@example.org")[0] == 450
    assert rcpt(m, "127.0.0.8", "a@s.test", "u@example.org")[0] == 250
    out = m.ctl("greylist", "list", "127.0.1.77", check=True).stdout
    assert out.splitlines() == [x for x in out.splitlines()
                                if x.startswith("127.0.1.0/24 ")], out
    assert len(out.splitlines()) == 1, out
    r = m.ctl("greylist", "del", "127.0.0.0/24", check=True)
    assert "1 triplets removed" in r.stdout, r.stdout
    lines = m.ctl("greylist", "list", check=True).stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("127.0.1.0/24"), lines
    _f, s, _t = scrape(mport)
    assert s["mtad_greylist_total{result=deferred}"] == 2, s
    assert s["mtad_greylist_total{result=allowlisted}"] == 1, s
    assert s["mtad_greylist_total{result=passed}"] == 0, s
    r = m.ctl("greylist", "flush", check=True)
    assert "1 triplets removed" in r.stdout, r.stdout
    assert m.ctl("greylist", "list", check=True).stdout.strip() == ""
    assert m.ctl("greylist", "del", "not-a-net").returncode == 1
    log = m.wait_log("via=mtactl: greylist flush")
    assert "via=mtactl: greylist del 127.0.0.0/24" in log
    assert "via=mtactl: greylist list" not in log, "list is read-only"


WL_ZONE = """$ORIGIN wl.test.
$TTL 300
@                 IN SOA ns.wl.test. hostmaster.wl.test. 1 3600 600 86400 60
@                 IN NS  ns
ns                IN A   127.0.0.1
2.0.0.127.white   IN A   127.0.0.5
"""


def test_dnswl_scored_clients_are_exempt(mtad_factory):
    """screen.dnsbl with an allowlist (weight -5): 127.0.0.2, listed,
    scores below 0 and is not greylisted; 127.0.0.3 is; with
    dnswl_exempt false 127.0.0.2 is greylisted too."""
    import shutil
    import tempfile
    from mtadtest import Nsd
    d = tempfile.mkdtemp(prefix="mtad-grey-", dir="/dev/shm")
    nsd = Nsd(d, zone_text=WL_ZONE, zone="wl.test").start()
    try:
        screen = {"dnsbl": [{"zone": "white.wl.test", "weight": -5}]}
        dns = {"servers": [nsd.addr], "timeout": "2s", "attempts": 1}
        m = start(mtad_factory, screen=screen, dns=dns)
        assert rcpt(m, "127.0.0.2", "a@x.test", "u@example.org")[0] == 250
        assert rcpt(m, "127.0.0.3", "a@x.test", "u@example.org")[0] == 450
        m2 = mtad_factory({"relay": {"allow_networks": ["127.0.0.8/32"]},
                           "routes": {"static": {"example.org": "discard"}},
                           "greylist": {"enabled": True, "delay": "2s",
                                        "dnswl_exempt": False},
                           "screen": screen, "dns": dns}, subdir="m2")
        m2.start()
        assert rcpt(m2, "127.0.0.2", "a@x.test", "u@example.org")[0] == 450
    finally:
        nsd.stop()
        shutil.rmtree(d, ignore_errors=True)
