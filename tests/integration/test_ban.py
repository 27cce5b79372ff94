"""limits.ban against a real mtad: a client address that piles up 5xx
replies (bad commands, refused recipients) is refused at its next connect
(421, before any greeting) on every worker of the node, until the ban
ends; mtactl ban list/add/del change the node's table, as admin records;
relay.allow_networks are never banned.  A second per ban keeps them quick."""
import re

from mtadtest import Client, free_port, wait_for

REFUSED = re.compile(r"mtad\[(\d+)\]: .*refused \[127\.0\.0\.5\]: banned")
BAN_421 = "421 4.7.0 mx.test.example Too many errors from your address"


def first_line(ip, port, timeout=10):
    """The first line the server sends a new connection from ip."""
    c = Client(port, source=ip, timeout=timeout)
    try:
        return c._line().decode()
    except EOFError as e:
        return "closed: %s" % e
    finally:
        c.close()


def start(mtad_factory, ban=None, **over):
    cfg = {"relay": {"allow_networks": ["127.0.0.8/32"]}}
    if ban is not None:
        cfg["limits"] = {"ban": ban, "max_connections_per_ip": 200}
    cfg.update(over)
    m = mtad_factory(cfg)
    m.start()
    return m


def make_errors(m, ip, n):
    """n 5xx replies on one session: bad commands and a refused RCPT."""
    with Client(m.port, source=ip, timeout=10) as c:
        c.greet()
        assert c.cmd("MAIL FROM:<a@example.org>").code == 250
        assert c.cmd("RCPT TO:<x@elsewhere.test>").code == 554
        for _ in range(n - 1):
            assert c.cmd("BOGUS").code == 500
        c.cmd("QUIT")


def test_errors_ban_the_address_on_every_worker(mtad_factory):
    """errors 3 with 2 workers: after three 5xx the address is refused at
    connect with the 421 and closed, on both workers (bursts of
    connections spread over them), other addresses still served."""
    m = start(mtad_factory, ban={"errors": 3, "window": "1m",
                                 "duration": "1h"})
    make_errors(m, "127.0.0.5", 2)
    assert first_line("127.0.0.5", m.port).startswith("220"), \
        "two errors are not yet a ban"
    make_errors(m, "127.0.0.5", 1)
    m.wait_log("ban: [127.0.0.5] banned for 3600s after 3 errors")
    pids = set()
    for _ in range(50):             # a few do; more under load
        burst = [Client(m.port, source="127.0.0.5", timeout=10)
                 for _ in range(24)]
        for c in burst:
            line = c._line().decode()
            assert line.startswith(BAN_421), line
            assert c.closed(), "the refused connection was not closed"
            c.close()
        pids = set(wait_for(lambda: REFUSED.findall(m.log_text()),
                            what="the reject records"))
        if len(pids) == 2:
            break
    assert len(pids) == 2, "refusals seen on one worker only: %r" % pids
    assert first_line("127.0.0.6", m.port).startswith("220")


def test_the_ban_ends_after_its_duration(mtad_factory):
    """duration 2s: refused at once, served again within a few seconds."""
    m = start(mtad_factory, ban={"errors": 2, "window": "1m",
                                 "duration": "2s"})
    make_errors(m, "127.0.0.12", 2)
    assert first_line("127.0.0.12", m.port).startswith(BAN_421)
    wait_for(lambda: first_line("127.0.0.12", m.port).startswith("220"),
             timeout=10, what="the end of the ban")


def test_mtactl_ban_add_list_del_and_metrics(mtad_factory):
    """With limits.ban off, mtactl ban add bans an address node-wide (and
    an IPv6 one by its /64); list shows them; the metrics count them and
    the refusals; del lifts the ban; add and del are admin records."""
    mport = free_port()
    m = start(mtad_factory, metrics={"listen": "127.0.0.1:%d" % mport})
    assert first_line("127.0.0.7", m.port).startswith("220")
    r = m.ctl("ban", "add", "127.0.0.7", "--for", "1h", check=True)
    assert "127.0.0.7: banned for 3600s" in r.stdout, r.stdout
    r = m.ctl("ban", "add", "2001:db8:1:2::99", check=True)
    assert "2001:db8:1:2::/64: banned for 3600s" in r.stdout, r.stdout
    assert first_line("127.0.0.7", m.port).startswith(BAN_421)
    lines = m.ctl("ban", "list", check=True).stdout.splitlines()
    assert len(lines) == 2, lines
    assert any(re.fullmatch(r"127\.0\.0\.7 left=3[56]\d\ds", x)
               for x in lines), lines
    assert any(x.startswith("2001:db8:1:2:: left=") for x in lines), lines
    from test_ops import scrape
    _f, samples, _t = scrape(mport)
    assert samples["mtad_banned_addresses"] == 2
    assert samples['mtad_rejections_total{reason=banned}'] >= 1
    r = m.ctl("ban", "del", "127.0.0.7", check=True)
    assert "127.0.0.7: ban lifted" in r.stdout
    assert first_line("127.0.0.7", m.port).startswith("220")
    r = m.ctl("ban", "del", "127.0.0.7")
    assert r.returncode == 1 and "not banned" in r.stderr, r
    assert m.ctl("ban", "add", "not-an-ip").returncode == 1
    assert m.ctl("ban", "add", "127.0.0.9", "--for", "soon").returncode == 2
    log = m.wait_log("via=mtactl: ban del 127.0.0.7")
    assert "via=mtactl: ban add 127.0.0.7 3600" in log
    assert "via=mtactl: ban list" not in log, "list is read-only"


def test_allow_networks_are_never_banned(mtad_factory):
    """A relay.allow_networks client that makes errors is not banned, nor
    refused when an admin bans it; the same errors ban another address."""
    m = start(mtad_factory, ban={"errors": 2, "window": "1m",
                                 "duration": "1h"})
    with Client(m.port, source="127.0.0.8", timeout=10) as c:
        c.greet()
        for _ in range(4):
            assert c.cmd("BOGUS").code == 500
    assert first_line("127.0.0.8", m.port).startswith("220")
    m.ctl("ban", "add", "127.0.0.8", check=True)
    assert first_line("127.0.0.8", m.port).startswith("220")
    make_errors(m, "127.0.0.9", 2)
    assert first_line("127.0.0.9", m.port).startswith(BAN_421)


def test_failed_auths_count_toward_the_ban(mtad_factory, workdir):
    """errors 2: two wrong AUTH PLAINs (535, auth.max_failures far off)
    ban the address; the right password from elsewhere still works."""
    import os
    from test_auth_scale import plain, yescrypt
    pw = os.path.join(workdir, "passwd")
    with open(pw, "w") as f:
        f.write("alice:%s\n" % yescrypt("s3cret pass", cost=5))
    os.chmod(pw, 0o600)
    m = start(mtad_factory, ban={"errors": 2, "window": "1m",
                                 "duration": "1h"},
              auth={"password_file": pw, "allow_plaintext_loopback": True,
                    "failure_delay": "0s", "max_failures": 50})
    with Client(m.port, source="127.0.0.10", timeout=30) as c:
        c.greet()
        assert c.cmd(plain("alice", "wrong 1")).code == 535
        assert c.cmd(plain("alice", "wrong 2")).code == 535
    assert first_line("127.0.0.10", m.port).startswith(BAN_421)
    with Client(m.port, source="127.0.0.11", timeout=30) as c:
        c.greet()
        assert c.cmd(plain("alice", "s3cret pass")).code == 235
