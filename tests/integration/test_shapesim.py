"""The receiver simulator itself (shapesim.py), driven with smtplib from
the egress sources' addresses (127.0.0.2..): each limit answers as
documented and counts exactly the violations it should, per source IP;
scripted replies per class; dead modes switched at run time; records;
the CLI with its control socket and stats file.  Loopback only; ports
picked free (one test uses the standard providers on port 25, as root)."""
import json
import os
import smtplib
import socket
import struct
import subprocess
import sys
import tempfile
import time

import pytest

import shapesim
from shapesim import Provider, Sim

HERE = os.path.dirname(os.path.abspath(__file__))
MSG = "Message-ID: <%s@sim.test>\r\nX-Sim-Tag: %s\r\nSubject: t\r\n\r\nbody\r\n"


@pytest.fixture
def sim_factory():
    made = []

    def make(*providers):
        s = Sim(list(providers)).start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


def prov(name="gmail", addrs=("127.0.1.1", "127.0.1.2"), **kw):
    return Provider(name, list(addrs), port=0, **kw)


def client(p, src="127.0.0.2", addr=None, ehlo="out.sim.test"):
    c = smtplib.SMTP(addr or p.addrs[0], p.port, source_address=(src, 0),
                     timeout=10)
    c.ehlo(ehlo)
    return c


def send(c, i, rcpts=("u@gmail.mtad.test",)):
    return c.sendmail("s@home.test", list(rcpts), MSG % (i, "t%d" % i))


def refused_at_greeting(p, src, addr=None):
    with pytest.raises(smtplib.SMTPConnectError) as e:
        smtplib.SMTP(addr or p.addrs[0], p.port, source_address=(src, 0),
                     timeout=10)
    return e.value


def test_concurrency_per_source_across_addresses(sim_factory):
    p = prov(max_conns=2)
    sim = sim_factory(p)
    a = client(p)
    b = client(p, addr=p.addrs[1])      # the limit spans both addresses
    e = refused_at_greeting(p, "127.0.0.2")
    assert e.smtp_code == 421
    assert b"4.7.0 too many connections from your IP" in e.smtp_error
    e = refused_at_greeting(p, "127.0.0.2", addr=p.addrs[1])
    assert e.smtp_code == 421
    other = client(p, src="127.0.0.3")  # another source has its own count
    assert sim.violations("gmail", "127.0.0.2", "conns") == 2
    assert sim.violations("gmail", "127.0.0.3") == 0
    a.quit()
    c = client(p)                       # room again: no violation
    send(c, 1)
    assert sim.violations() == 2
    st = sim.source("gmail", "127.0.0.2")
    assert st["max_open"] == 2 and st["refused"] == 2
    assert st["connections"] == 3 and st["open"] == 2
    for x in (b, c, other):
        x.quit()
    sim.wait(lambda s: s.source("gmail", "127.0.0.2")["open"] == 0,
             timeout=10, what="connections closed")


def test_close_without_quit_then_reconnect_is_no_violation(sim_factory):
    p = prov(max_conns=1)
    sim = sim_factory(p)
    for i in range(20):
        c = client(p)
        send(c, i)
        c.close()                       # no QUIT: the server sees EOF
    assert len(sim.records()) == 20
    assert sim.violations() == 0


def test_messages_per_connection_close(sim_factory):
    p = prov(max_msgs=2)
    sim = sim_factory(p)
    c = client(p)
    send(c, 1)
    send(c, 2)
    with pytest.raises(smtplib.SMTPSenderRefused) as e:
        send(c, 3)
    assert e.value.smtp_code == 421
    assert b"4.7.0" in e.value.smtp_error
    with pytest.raises(smtplib.SMTPServerDisconnected):
        c.noop()
    recs = sim.records()
    assert [r["n"] for r in recs] == [1, 2]
    assert recs[0]["conn"] == recs[1]["conn"]
    assert sim.violations("gmail", kind="msgs") == 1
    c = client(p)                       # a new connection starts over
    send(c, 4)
    c.quit()
    assert sim.violations() == 1


def test_messages_per_connection_reply(sim_factory):
    p = prov(max_msgs=1, msgs_action="reply")
    sim = sim_factory(p)
    c = client(p)
    send(c, 1)
    for i in (2, 3):
        with pytest.raises(smtplib.SMTPSenderRefused) as e:
            send(c, i)
        assert e.value.smtp_code == 451
        c.rset()
    assert c.noop()[0] == 250           # the connection stays
    c.quit()
    assert sim.violations(kind="msgs") == 2
    assert len(sim.records()) == 1


def test_rate_per_minute_gmail_style(sim_factory):
    p = prov(per_minute=3)
    sim = sim_factory(p)
    c = client(p)
    for i in range(3):
        send(c, i)
    with pytest.raises(smtplib.SMTPSenderRefused) as e:
        send(c, 3)
    assert e.value.smtp_code == 421
    assert b"4.7.28 [127.0.0.2]" in e.value.smtp_error
    assert b"rate limited" in e.value.smtp_error
    o = client(p, src="127.0.0.3")      # per source: the other one goes on
    for i in range(3):
        send(o, 10 + i)
    o.quit()
    c = client(p)                       # no penalty: only over-rate mail
    with pytest.raises(smtplib.SMTPSenderRefused):
        send(c, 4)
    assert sim.violations("gmail", "127.0.0.2", "rate") == 2
    assert sim.violations("gmail", "127.0.0.3") == 0
    st = sim.stats()["providers"]["gmail"]
    assert st["sources"]["127.0.0.2"]["episodes"] == 1
    assert st["sources"]["127.0.0.2"]["messages"] == 3
    assert st["deliveries"] == 6 and st["violations"] == 2


def test_rate_windows_and_live_change(sim_factory):
    p = prov(rates=[(2, 3600)])
    sim = sim_factory(p)
    c = client(p)
    send(c, 1)
    send(c, 2)
    with pytest.raises(smtplib.SMTPSenderRefused):
        send(c, 3)
    sim.set("gmail", rates=[])          # lifted at run time
    c = client(p)
    send(c, 4)
    sim.set("gmail", per_hour=1)        # a new window starts empty
    send(c, 5)
    with pytest.raises(smtplib.SMTPSenderRefused):
        send(c, 6)
    assert sim.violations(kind="rate") == 2
    assert len(sim.records()) == 4


def test_penalty_episode_refuses_greeting_and_mail(sim_factory):
    p = prov(per_minute=2, penalty=300)
    sim = sim_factory(p)
    c = client(p)
    c2 = client(p)                      # opened before the episode
    send(c, 1)
    send(c, 2)
    with pytest.raises(smtplib.SMTPSenderRefused):
        send(c, 3)
    e = refused_at_greeting(p, "127.0.0.2")
    assert e.smtp_code == 421 and b"4.7.28" in e.smtp_error
    with pytest.raises(smtplib.SMTPSenderRefused):
        send(c2, 4)
    st = sim.source("gmail", "127.0.0.2")
    assert st["episodes"] == 1
    assert st["violations"] == {"rate": 1, "penalty": 2}
    assert st["penalty_until"] > 0
    o = client(p, src="127.0.0.4")
    send(o, 5)
    o.quit()
    assert sim.violations(src="127.0.0.4") == 0


def test_rate_checked_at_end_of_data(sim_factory):
    p = prov(per_minute=1, rate_at="data")
    sim = sim_factory(p)
    c = client(p)
    send(c, 1)
    with pytest.raises(smtplib.SMTPDataError) as e:
        send(c, 2)
    assert e.value.smtp_code == 421
    assert len(sim.records()) == 1
    assert sim.violations(kind="rate") == 1


def test_new_connections_per_minute(sim_factory):
    p = prov(conn_per_minute=2)
    sim = sim_factory(p)
    for _ in range(2):
        client(p).quit()
    e = refused_at_greeting(p, "127.0.0.2")
    assert e.smtp_code == 421
    client(p, src="127.0.0.3").quit()
    assert sim.violations("gmail", "127.0.0.2", "conn_rate") == 1
    assert sim.violations() == 1


def test_recipients_per_transaction(sim_factory):
    p = prov(max_rcpts=2)
    sim = sim_factory(p)
    c = client(p)
    bad = send(c, 1, rcpts=["a@g.test", "b@g.test", "c@g.test"])
    assert bad == {"c@g.test": (452, b"4.5.3 Too many recipients")}
    c.quit()
    assert sim.records()[0]["rcpts"] == ["a@g.test", "b@g.test"]
    assert sim.violations(kind="rcpts") == 1


@pytest.mark.parametrize("local,code,enh", [
    ("nouser1", 550, b"5.1.1"),
    ("full.box", 452, b"4.2.2"),
    ("spammy", 550, b"5.7.1"),
    ("policy", 554, b"5.7.1"),
    ("defer-me", 451, b"4.3.0"),
    ("baddomain", 550, b"5.1.2"),
    ("Protocol9", 501, b"5.5.4"),
])
def test_scripted_rcpt_replies(sim_factory, local, code, enh):
    p = prov()
    sim = sim_factory(p)
    c = client(p)
    with pytest.raises(smtplib.SMTPRecipientsRefused) as e:
        send(c, 1, rcpts=["%s@gmail.mtad.test" % local])
    got = e.value.recipients["%s@gmail.mtad.test" % local]
    assert got[0] == code and got[1].startswith(enh), got
    c.quit()
    ev = [x for x in sim.events() if x["stage"] == "rcpt"]
    assert len(ev) == 1 and ev[0]["reply"].startswith("%d " % code)
    assert sim.records() == [] and sim.violations() == 0


@pytest.mark.parametrize("local,enh", [("content1", b"5.6.0"),
                                       ("toobig", b"5.3.4")])
def test_scripted_data_replies(sim_factory, local, enh):
    p = prov()
    sim = sim_factory(p)
    c = client(p)
    with pytest.raises(smtplib.SMTPDataError) as e:
        send(c, 1, rcpts=["ok@g.test", "%s@g.test" % local])
    assert e.value.smtp_code == 554 and e.value.smtp_error.startswith(enh)
    send(c, 2)                          # the next message is taken
    c.quit()
    assert len(sim.records()) == 1


def test_slow_recipient_and_custom_script(sim_factory):
    p = prov(replies=[("slow*", "rcpt", None, 0.2),
                      ("odd*", "rcpt", "421 4.7.0 [{src}] go away", 0)])
    sim = sim_factory(p)
    c = client(p)
    send(c, 1, rcpts=["slow1@g.test"])
    with pytest.raises(smtplib.SMTPRecipientsRefused) as e:
        send(c, 2, rcpts=["odd@g.test"])
    assert e.value.recipients["odd@g.test"] == (
        421, b"4.7.0 [127.0.0.2] go away")
    assert sim.records()[0]["rcpts"] == ["slow1@g.test"]
    # "nouser" is not scripted any more: taken
    c = client(p)
    send(c, 3, rcpts=["nouser@g.test"])
    c.quit()
    assert len(sim.records()) == 2


def test_dead_modes_switch_at_run_time(sim_factory):
    p = prov(addrs=["127.0.2.1"])
    sim = sim_factory(p)
    sim.set_mode("gmail", "silent")
    s = socket.create_connection((p.addrs[0], p.port), timeout=0.5,
                                 source_address=("127.0.0.2", 0))
    with pytest.raises(socket.timeout):
        s.recv(100)                     # no greeting
    s.close()
    sim.set_mode("gmail", "refuse")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((p.addrs[0], p.port), timeout=5,
                                 source_address=("127.0.0.2", 0))
    sim.set_mode("gmail", "busy")
    e = refused_at_greeting(p, "127.0.0.2")
    assert e.smtp_code == 421
    sim.set_mode("gmail", "reset")
    # the reset may reach the client's connect() already (a loaded box
    # lets the simulator accept and abort before connect returns), or
    # its first recv()
    with pytest.raises((ConnectionResetError, AssertionError)):
        s = socket.create_connection((p.addrs[0], p.port), timeout=5,
                                     source_address=("127.0.0.2", 0))
        try:
            assert s.recv(100) != b""   # reset, or at least closed
        finally:
            s.close()
    sim.set_mode("gmail", "normal")
    c = client(p)
    send(c, 1)
    c.quit()
    assert len(sim.records()) == 1
    assert sim.violations() == 0
    with pytest.raises(ValueError):
        sim.set_mode("gmail", "asleep")


def test_records_have_source_ehlo_and_headers(sim_factory):
    p = prov()
    sim = sim_factory(p)
    c = client(p, src="127.0.0.5", addr=p.addrs[1], ehlo="mx5.out.test")
    send(c, 7, rcpts=["a@gmail.mtad.test", "b@googlemail.mtad.test"])
    port = c.sock.getsockname()[1]
    c.quit()
    r = sim.wait_for(1, timeout=5)[0]
    assert r["provider"] == "gmail" and r["addr"] == "127.0.1.2"
    assert r["src"] == "127.0.0.5" and r["sport"] == port
    assert r["ehlo"] == "mx5.out.test"
    assert r["mail_from"] == "s@home.test"
    assert r["rcpts"] == ["a@gmail.mtad.test", "b@googlemail.mtad.test"]
    assert r["message_id"] == "<7@sim.test>"
    assert r["x"] == {"X-Sim-Tag": "t7"}
    assert sim.stats()["providers"]["gmail"]["sources"]["127.0.0.5"][
        "ehlo"] == {"mx5.out.test": 1}
    sim.reset()
    assert sim.records() == [] and sim.stats()["deliveries"] == 0
    with pytest.raises(AssertionError):
        sim.wait_for(1, timeout=0.1)


@pytest.mark.skipif(os.geteuid() != 0, reason="port 25 needs root")
def test_standard_providers_on_port_25(sim_factory):
    provs = shapesim.standard_providers(yahoo={"max_conns": 1}, open=None)
    assert [p.name for p in provs] == ["gmail", "outlook", "yahoo"]
    sim = sim_factory(*provs)
    y = sim.provider("yahoo")
    assert y.addrs == ["127.0.3.1"] and y.port == 25
    c = client(y)
    e = refused_at_greeting(y, "127.0.0.2")
    assert e.smtp_code == 421
    send(c, 1)
    c.quit()
    g = client(sim.provider("gmail"), addr="127.0.1.2")
    send(g, 2)
    g.quit()
    assert [r["provider"] for r in sim.records()] == ["yahoo", "gmail"]
    assert sim.violations("yahoo") == 1 and sim.violations("gmail") == 0


def test_cli_control_socket_and_stats_file():
    d = tempfile.mkdtemp(prefix="shapesim-", dir="/dev/shm")
    port = shapesim._free_port(["127.0.1.1", "127.0.2.1"])
    conf = os.path.join(d, "sim.json")
    with open(conf, "w") as f:
        json.dump({"port": port, "providers": [
            {"name": "gmail", "addrs": ["127.0.1.1"], "max_conns": 1},
            {"name": "open", "addrs": ["127.0.2.1"]}]}, f)
    ctl, stats, recs = (os.path.join(d, n) for n in
                        ("ctl.sock", "stats.json", "records.jsonl"))
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "shapesim.py"), "serve",
         "--config", conf, "--control", ctl, "--stats", stats,
         "--records", recs, "--stats-every", "0.2"],
        stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        line = ""
        while "ready" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "shapesim exited: %s" % proc.wait(5)
        p = Provider("gmail", ["127.0.1.1"], port=port)
        c = client(p)
        send(c, 1)
        refused_at_greeting(p, "127.0.0.2")
        c.quit()
        st = shapesim.ctl(ctl, {"cmd": "stats"})
        assert st["deliveries"] == 1 and st["violations"] == 1
        assert st["providers"]["gmail"]["limits"]["max_conns"] == 1
        assert shapesim.ctl(ctl, {"cmd": "set", "provider": "gmail",
                                  "limits": {"max_conns": 5}}) == {"ok": True}
        assert shapesim.ctl(ctl, {"cmd": "mode", "provider": "open",
                                  "mode": "refuse"}) == {"ok": True}
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.2.1", port), timeout=5)
        assert "error" in shapesim.ctl(ctl, {"cmd": "mode",
                                             "provider": "nosuch",
                                             "mode": "busy"})
        out = subprocess.run(
            [sys.executable, os.path.join(HERE, "shapesim.py"), "ctl", ctl,
             "records"], capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["records"][0]["x"] == {
            "X-Sim-Tag": "t1"}
    finally:
        proc.terminate()
        rc = proc.wait(20)
    assert rc == 0
    with open(stats) as f:
        st = json.load(f)
    assert st["deliveries"] == 1
    assert st["providers"]["gmail"]["limits"]["max_conns"] == 5
    assert st["providers"]["open"]["mode"] == "refuse"
    with open(recs) as f:
        lines = [json.loads(x) for x in f]
    assert [r["message_id"] for r in lines] == ["<1@sim.test>"]
    assert not os.path.exists(ctl)
    for n in os.listdir(d):
        os.unlink(os.path.join(d, n))
    os.rmdir(d)


@pytest.mark.skipif(os.geteuid() != 0, reason="port 25 needs root")
def test_mtad_reaches_each_provider_through_the_test_zone(
        sim_factory, mtad_factory, dns_servers):
    """The zone's MX records lead mtad (no shaping) to the providers; the
    simulator sees mtad's EHLO and a violation when mtad opens more
    connections from one source than a provider allows."""
    from mtadtest import ZONE, make_message, send
    sim = sim_factory(*shapesim.standard_providers())
    m = mtad_factory({"routes": {"default": "mx"},
                      "dns": {"servers": [dns_servers.nsd],
                              "timeout": "1s", "attempts": 1}}).start()
    want = {"gmail": "gmail", "googlemail": "gmail", "workspace": "gmail",
            "outlook": "outlook", "hotmail": "outlook", "yahoo": "yahoo",
            "open": "open"}
    for i, dom in enumerate(sorted(want)):
        send(m, "a@home.test", ["u%d@%s.%s" % (i, dom, ZONE)],
             make_message(i))
    recs = sim.wait_for(len(want), timeout=30)
    got = {r["rcpts"][0].split("@")[1].split(".")[0]: r for r in recs}
    assert {d: r["provider"] for d, r in got.items()} == want
    assert {r["addr"] for r in recs if r["provider"] == "gmail"} <= {
        "127.0.1.1", "127.0.1.2"}
    assert got["yahoo"]["addr"] == "127.0.3.1"
    assert all(r["ehlo"] and r["src"].startswith("127.") for r in recs)
    assert sim.violations() == 0
    # a provider allowing one connection per source: mtad without shaping
    # opens several at once for a burst, and the simulator counts it
    sim.set("open", max_conns=1)
    sim.set("open", replies=[("slow*", "rcpt", None, 1.0)])
    c = m.smtp()
    for i in range(6):
        send(m, "a@home.test", ["slow%d@open.%s" % (i, ZONE)],
             make_message(100 + i), conn=c)
    c.quit()
    sim.wait(lambda s: s.violations("open", kind="conns") > 0, timeout=30,
             what="a connection over the limit counted")
    sim.wait_for(len(want) + 6, timeout=60)


def test_a_client_that_hangs_up_during_a_delay_is_not_counted_open(
        sim_factory):
    """A RCPT held 30 s (scripted): the client hangs up meanwhile, with a
    FIN or a reset (as a killed sender whose replies came unread),
    and the simulator counts it closed within a second, as a server's read
    sees it: a killed sender's connections must not stay open for the
    whole delay."""
    p = prov(max_conns=2, replies=[("hold*", "rcpt", None, 30)])
    sim = sim_factory(p)
    for reset in (False, True):
        s = socket.create_connection((p.addrs[0], p.port), timeout=10,
                                     source_address=("127.0.0.2", 0))
        s.sendall(b"EHLO out.sim.test\r\nMAIL FROM:<s@home.test>\r\n"
                  b"RCPT TO:<hold1@gmail.mtad.test>\r\n")
        # the MAIL reply came: the simulator took the RCPT (pipelined
        # behind it, no turn of its loop in between) and holds it now
        buf = b""
        while b"250 2.1.0" not in buf:
            chunk = s.recv(4096)
            assert chunk, buf
            buf += chunk
        if reset:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                         struct.pack("ii", 1, 0))
        assert sim.source("gmail", "127.0.0.2")["open"] == 1
        s.close()
        t = time.monotonic()
        sim.wait(lambda x: x.source("gmail", "127.0.0.2")["open"] == 0, 5,
                 "counted closed")
        assert time.monotonic() - t < 1.0
    assert sim.records() == [] and sim.violations() == 0
