"""quotas against a real mtad: messages queued for a recipient domain
whose next hop is down count toward quotas.recipient_domain.messages,
node-wide over both workers; past it RCPT gets 452 4.3.1 naming the
quota, one log line starts the episode; the counts survive a restart;
mtactl quota set raises the limit live and del puts it back; once the
hop is up and the queue drains, mail is accepted again and the episode's
end is logged.  A bytes quota answers DATA (with SIZE= at once); the
metrics show the usage and the rejections."""
import re

from mtadtest import Client, closed_port, free_port, wait_for

Q452 = re.compile(r"^4\.3\.1 Quota exceeded: recipient domain example\.org has "
                  r"(\d+) messages queued \(quota (\d+)\), try again later$")


def start(mtad_factory, quotas, hop_port, **over):
    cfg = {"relay": {"allow_networks": ["127.0.0.8/32"]},
           "routes": {"static": {"example.org":
                                 "smtp:[127.0.0.1]:%d" % hop_port,
                                 "big.test": "smtp:[127.0.0.1]:%d" %
                                 hop_port}},
           "delivery": {"retry": ["1s"], "connect_timeout": "1s"},
           "quotas": quotas}
    cfg.update(over)
    m = mtad_factory(cfg)
    m.start()
    return m


def txn(m, ip, sender, to, body=b"body\r\n", size=None):
    """(RCPT code, text) or, past RCPT, (DATA-or-dot code, text)."""
    with Client(m.port, source=ip, timeout=10) as c:
        c.greet()
        mail = "MAIL FROM:<%s>" % sender
        if size is not None:
            mail += " SIZE=%d" % size
        assert c.cmd(mail).code == 250
        r = c.cmd("RCPT TO:<%s>" % to)
        if r.code != 250:
            return r.code, r.text.decode()
        r = c.cmd("DATA")
        if r.code != 354:
            return r.code, r.text.decode()
        c.send(b"Subject: q\r\n\r\n" + body + b".\r\n")
        r = c.reply()
        c.cmd("QUIT")
        return r.code, r.text.decode()


def quota_lines(m):
    return m.ctl("quota", "list", check=True).stdout.splitlines()


def test_domain_message_quota_live_edit_restart_and_drain(mtad_factory,
                                                           sink_factory):
    port = closed_port()
    mport = free_port()
    m = start(mtad_factory, {"recipient_domain": {"messages": 3}}, port,
              metrics={"listen": "127.0.0.1:%d" % mport})
    for i in range(3):                  # spread over connections/workers
        assert txn(m, "127.0.0.%d" % (20 + i), "a@s.test",
                   "u%d@example.org" % i)[0] == 250
    code, text = txn(m, "127.0.0.30", "a@s.test", "v@example.org")
    assert code == 452 and Q452.match(text), (code, text)
    assert Q452.match(text).groups() == ("3", "3")
    m.wait_log("quota: recipient_domain example.org is over its message "
               "quota (3 queued, quota 3)")
    assert txn(m, "127.0.0.30", "a@s.test", "w@example.org")[0] == 452
    log = m.log_text()
    assert log.count("is over its message quota") == 1, "one per episode"
    lines = quota_lines(m)
    assert "recipient_domain * messages=3 bytes=-" in lines, lines
    assert any(re.fullmatch(r"recipient_domain example\.org messages=3/3 "
                            r"bytes=\d+/- over", x) for x in lines), \
        (lines, [x for x in m.log_text().splitlines() if "quota" in x])
    from test_ops import scrape
    _f, s, _t = scrape(mport)
    assert s["mtad_quota_usage{key=example.org}{kind=recipient_domain}"
             "{unit=messages}"] == 3, s
    assert s["mtad_quota_rejections_total{kind=recipient_domain}"] == 2
    # a live edit, then back
    r = m.ctl("quota", "set", "recipient_domain", "Example.ORG",
              "messages=4", check=True)
    assert "recipient_domain example.org: limit set" in r.stdout
    assert txn(m, "127.0.0.30", "a@s.test", "x@example.org")[0] == 250
    assert txn(m, "127.0.0.30", "a@s.test", "y@example.org")[0] == 452
    m.ctl("quota", "del", "recipient_domain", "example.org", check=True)
    wait_for(lambda: m.log_text().count("via=mtactl: quota") >= 2,
             what="the admin records")
    # a flush (every worker rebuilds its schedule and index) keeps them
    ends = m.log_text().count("under its quotas again")
    assert ends == 1, "the raised limit ended the episode"
    m.ctl("flush", check=True)
    wait_for(lambda: m.log_text().count("kick: ") >= 2, timeout=10,
             what="both workers' rebuilds")
    assert any(x.startswith("recipient_domain example.org messages=4/3 ")
               for x in quota_lines(m)), quota_lines(m)
    assert m.log_text().count("under its quotas again") == ends
    # the counts come back after a restart (rebuilt from the spool)
    m.stop()
    m.start()
    # each worker counts its shard in its recovery, just after it is ready
    wait_for(lambda: any(x.startswith("recipient_domain example.org "
                                      "messages=4/3 ")
                         for x in quota_lines(m)), timeout=10,
             what="the counts rebuilt after the restart")
    assert txn(m, "127.0.0.30", "a@s.test", "z@example.org")[0] == 452
    # the hop comes up: the queue drains, mail is taken again
    sink = sink_factory(port=port)
    sink.wait_for(4, timeout=30)
    wait_for(lambda: not any(x.startswith("recipient_domain example.org ")
                             for x in quota_lines(m)), timeout=20,
             what="the counts to drain")
    m.wait_log("quota: recipient_domain example.org is under its quotas "
               "again")
    assert txn(m, "127.0.0.30", "a@s.test", "z@example.org")[0] == 250


def test_bytes_quota_at_data(mtad_factory):
    """sender_domain.bytes 4K: a first 3K message passes (nothing queued),
    a second one is refused at DATA, SIZE= over the quota at once."""
    port = closed_port()
    m = start(mtad_factory, {"sender_domain": {"bytes": "4K"}}, port)
    body = b"x" * 70 + b"\r\n"
    assert txn(m, "127.0.0.20", "a@big.test", "u@example.org",
               body * 43)[0] == 250
    assert txn(m, "127.0.0.20", "b@BIG.test", "u@example.org",
               body * 20)[0] == 250
    code, text = txn(m, "127.0.0.21", "c@big.test", "u@example.org", body)
    assert code == 452, (code, text)
    assert re.fullmatch(r"4\.3\.1 Quota exceeded: sender domain big\.test has \d+ "
                        r"bytes queued \(quota 4096\), try again later",
                        text), text
    assert txn(m, "127.0.0.21", "c@other.test", "u@example.org", body,
               size=5000)[0] == 452, "SIZE= counts"
    assert txn(m, "127.0.0.21", "c@other.test", "u@example.org", body,
               size=100)[0] == 250
    r = m.ctl("quota", "set", "sender_domain", "*", "bytes=1M", check=True)
    assert "limit set" in r.stdout
    assert txn(m, "127.0.0.21", "d@big.test", "u@example.org", body)[0] \
        == 250
    assert m.ctl("quota", "set", "nonsense", "x", "messages=1").returncode \
        == 1


def test_user_and_network_quotas_survive_a_restart(mtad_factory, workdir):
    """user.messages 1: alice's second message is refused at RCPT, also
    after a restart (the login is in the queue file's envelope);
    network.messages 2 counts 127.0.0.0/24 over both workers."""
    import os
    from test_auth_scale import plain, yescrypt
    pw = os.path.join(workdir, "passwd")
    with open(pw, "w") as f:
        f.write("alice:%s\n" % yescrypt("s3cret pass", cost=5))
    os.chmod(pw, 0o600)
    port = closed_port()
    m = start(mtad_factory, {"user": {"messages": 1},
                             "network": {"messages": 3}}, port,
              auth={"password_file": pw, "allow_plaintext_loopback": True,
                    "failure_delay": "0s"})

    def as_alice():
        with Client(m.port, source="127.0.0.40", timeout=30) as c:
            c.greet()
            assert c.cmd(plain("alice", "s3cret pass")).code == 235
            assert c.cmd("MAIL FROM:<alice@s.test>").code == 250
            r = c.cmd("RCPT TO:<u@example.org>")
            if r.code == 250:
                assert c.cmd("DATA").code == 354
                c.send(b"Subject: a\r\n\r\nx\r\n.\r\n")
                assert c.reply().code == 250
            return r.code, r.text.decode()

    assert as_alice()[0] == 250
    code, text = as_alice()
    assert code == 452 and "Quota exceeded: user alice has 1 messages " \
        "queued (quota 1)" in text, (code, text)
    m.stop()
    m.start()
    wait_for(lambda: any(x.startswith("user alice messages=1/1 ")
                         for x in quota_lines(m)), timeout=10,
             what="alice's count rebuilt after the restart")
    assert as_alice()[0] == 452, "the count came back from the spool"
    assert txn(m, "127.0.0.41", "b@s.test", "v@example.org")[0] == 250
    assert txn(m, "127.0.0.42", "b@s.test", "w@example.org")[0] == 250
    code, text = txn(m, "127.0.0.43", "b@s.test", "x@example.org")
    assert code == 452 and "client network 127.0.0.0/24 has 3 messages" \
        in text, (code, text)
    assert any(x.startswith("network 127.0.0.0/24 messages=3/3 ")
               for x in quota_lines(m))
