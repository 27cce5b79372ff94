"""Bounce classes (bclass/, relay.yaml delivery.bounce_classes): a real
mtad relays to a sink (sink.py) that answers scripted replies per
recipient; every failed recipient's class shows in the log line, in
`mtactl show`, in `mtactl queue --json` and in /metrics
(mtad_delivery_attempts_total{class,site}); an operator's rules file
changes a class (also on reload; a bad file on reload keeps the rules in
force), and `mtactl class` gives the same answer offline; mtad's own
reasons (connection refused) are classed; a bad rules file is refused by
`mtad -t` with its file:line:column."""
import json
import os
import re
import subprocess
import urllib.request

from mtadtest import (MTAD, closed_port, free_port, make_message, send,
                      wait_for)
from shapesim import Provider, Sim

# recipient -> (the sink's RCPT reply, the class mtad must give it)
SCRIPT = {
    "nouser@gmail.test": (
        "550 5.1.1 <nouser@gmail.test>: Recipient address rejected: User "
        "unknown in virtual mailbox table", "invalid_recipient"),
    "full@gmail.test": (
        "452 4.2.2 The recipient's inbox is out of storage space.",
        "mailbox_full"),
    "rate@gmail.test": (
        "421 4.7.28 Our system has detected an unusual rate of unsolicited "
        "mail originating from your IP address.", "rate_limited"),
    "tss@yahoo.test": (
        "421 4.7.0 [TSS04] Messages from 127.0.0.1 temporarily deferred due "
        "to unexpected volume or user complaints", "rate_limited"),
    "listed@outlook.test": (
        "550 5.7.1 Service unavailable; Client host [127.0.0.1] blocked "
        "using zen.spamhaus.org", "spam_block"),
    "pol@yahoo.test": (
        "554 5.7.9 Message not accepted for policy reasons", "policy"),
    "big@outlook.test": (
        "552 5.3.4 Message size exceeds fixed limit", "content"),
    "syntax@outlook.test": ("501 5.5.4 Invalid arguments", "protocol"),
    "odd@other.test": ("450 4.0.0 something else entirely", "other"),
}
OK = "ok@gmail.test"


def start(mtad_factory, route, rules=None, **over):
    cfg = {"routes": {"default": route},
           "server": {"workers": 1},
           "delivery": {"retry": ["1h"]},
           "metrics": {"listen": "127.0.0.1:%d" % free_port()}}
    if rules is not None:
        cfg["delivery"]["bounce_classes"] = rules
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    m = mtad_factory(cfg)
    m.mport = int(cfg["metrics"]["listen"].rsplit(":", 1)[1])
    return m.start()


def metrics(m):
    """{(class, site): count} of mtad_delivery_attempts_total, read by the
    reference parser (python3-prometheus-client) when it is there, and
    the same as a plain reading of the lines."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % m.mport,
                                timeout=10) as r:
        text = r.read().decode()
    got = {}
    for cls, site, v in re.findall(
            r'^mtad_delivery_attempts_total\{class="([a-z_]+)",'
            r'site="([^"]+)"\} (\d+)$', text, re.M):
        assert (cls, site) not in got, "two series of %s %s" % (cls, site)
        got[(cls, site)] = int(v)
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return got
    ref = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "mtad_delivery_attempts_total":
                ref[(smp.labels["class"], smp.labels["site"])] = \
                    int(smp.value)
    assert ref == got, (ref, got)
    return got


def result_lines(m, qid):
    """{recipient: its delivery log line} for qid, once all are there."""
    def lines():
        found = {}
        for ln in m.log_text().splitlines():
            mt = re.search(r"%s: to=<([^>]+)>" % qid, ln)
            if mt:
                found[mt.group(1)] = ln
        return found if len(found) == len(SCRIPT) + 1 else None
    return wait_for(lines, 20, what="a result line per recipient")


def rules_file(d, name, text):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_every_scripted_reply_gets_its_class_everywhere(mtad_factory,
                                                        sink_factory):
    hop = sink_factory()
    hop.rcpt_replies = {a: r for a, (r, _) in SCRIPT.items()}
    m = start(mtad_factory, hop.route)
    qid = send(m, "a@example.org", [OK] + list(SCRIPT), make_message(3))
    lines = result_lines(m, qid)
    assert "class=" not in lines[OK], lines[OK]
    for addr, (reply, cls) in SCRIPT.items():
        word = "bounced" if reply[0] == "5" else "deferred"
        assert "status=%s (%s), class=%s" % (word, reply, cls) in lines[addr], \
            lines[addr]
    # the good recipient delivered (and the bounce of the 5xx ones went to
    # the sender: DSNs are as they were)
    wait_for(lambda: [g.rcpt_tos for g in hop.received()
                      if g.mail_from == "a@example.org"] == [[OK]], 10,
             what="the one good recipient delivered")

    # mtactl show: the class on each failed recipient's line
    def shown():
        r = m.ctl("show", qid)
        return r.stdout if r.returncode == 0 and "class=" in r.stdout \
            else None
    text = wait_for(shown, 10, what="mtactl show with classes")
    for addr, (_, cls) in SCRIPT.items():
        ln = [x for x in text.splitlines() if "<%s>" % addr in x]
        assert ln and ln[0].endswith(" class=%s" % cls), (addr, text)
    assert "class=" not in [x for x in text.splitlines()
                            if "<%s>" % OK in x][0]

    # mtactl queue --json: "class" per recipient, null for the delivered one
    r = m.ctl("queue", "--json", check=True)
    msg = [x for x in json.loads(r.stdout)["messages"] if x["id"] == qid][0]
    got = {x["address"]: x["class"] for x in msg["recipients"]}
    assert got == dict({a: c for a, (_, c) in SCRIPT.items()}, **{OK: None}), \
        got

    # /metrics: one failed attempt per class x site (the recipient domain)
    want = {}
    for addr, (_, cls) in SCRIPT.items():
        key = (cls, addr.split("@")[1])
        want[key] = want.get(key, 0) + 1
    got = wait_for(lambda: metrics(m) or None, 10, what="class metrics")
    assert got == want, (got, want)


def test_operator_rules_come_first_and_reload_keeps_good_rules(
        mtad_factory, sink_factory, workdir):
    hop = sink_factory()
    listed, pol = "listed@outlook.test", "pol@yahoo.test"
    hop.rcpt_replies = {listed: SCRIPT[listed][0], pol: SCRIPT[pol][0]}
    path = rules_file(workdir, "ours.conf",
                      "# a provider's Spamhaus 550 is its policy to us\n"
                      'policy code=550 enh=5.7.1 text="spamhaus"\n')
    m = start(mtad_factory, hop.route, rules=path, log={"format": "json"})
    qid = send(m, "a@example.org", [listed, pol], make_message(1))

    def classes(qid, n):
        """{recipient: class} of qid's JSON delivery records, once n."""
        out = {}
        for ln in m.log_text().splitlines():
            rec = json.loads(ln) if ln.startswith("{") else {}
            if rec.get("event") == "delivery" and rec.get("queue_id") == qid:
                out[rec["to"]] = rec.get("class")
        return out if len(out) == n else None
    assert wait_for(lambda: classes(qid, 2), 20, what="json records") == \
        {listed: "policy", pol: "policy"}
    # mtactl class: the same rules, offline
    r = m.ctl("class", *SCRIPT[listed][0].split(), check=True)
    assert r.stdout == "policy\n", r.stdout
    r = m.ctl("class", "552 5.3.4 too big", check=True)
    assert r.stdout == "content\n", r.stdout

    # a bad file on reload: refused with its position, the rules stay
    rules_file(workdir, "ours.conf", 'policy code=550\nspam_block enh=5.7\n')
    r = m.ctl("reload")
    assert r.returncode != 0
    assert "ours.conf:2:12: enh=" in r.stdout + r.stderr, (r.stdout, r.stderr)
    q2 = send(m, "a@example.org", [listed], make_message(2))
    assert wait_for(lambda: classes(q2, 1), 20, what="q2's record") == \
        {listed: "policy"}

    # a good file on reload: its rules apply to the next attempt
    rules_file(workdir, "ours.conf", 'content code=550 text="spamhaus"\n')
    r = m.ctl("reload")
    assert r.returncode == 0, (r.stdout, r.stderr)
    m.wait_log("reload done", timeout=20)
    q3 = send(m, "a@example.org", [listed], make_message(3))
    assert wait_for(lambda: classes(q3, 1), 20, what="q3's record") == \
        {listed: "content"}


# the simulator's scripted replies (shapesim.DEFAULT_REPLIES, by local
# part) and dead modes -> the class each must get
SIM_RCPT = {"nouser1": "invalid_recipient", "full1": "mailbox_full",
            "spam1": "spam_block", "policy1": "policy", "defer1": "other",
            "baddomain1": "bad_domain", "protocol1": "protocol"}
SIM_DATA = {"content1": "content", "toobig1": "content"}
SIM_MODES = {"refuse": "no_answer", "busy": "rate_limited",
             "silent": "no_answer"}


def test_a_class_for_every_scripted_reply_of_the_simulator(mtad_factory):
    """tests/integration/shapesim.py: its scripted recipient replies (at
    RCPT and at the end of data) and its dead modes (connection refused,
    a 421 greeting, a silent host timing out) each get their class."""
    port = free_port()          # one port on each provider's address
    provs = [Provider("gmail", ["127.0.1.1"], port=port)] + [
        Provider(mode, ["127.0.%d.1" % (2 + i)], port=port, mode=mode)
        for i, mode in enumerate(SIM_MODES)]
    with Sim(provs) as sim:
        static = {"%s.test" % p.name: "smtp:[%s]:%d" % (p.addrs[0], p.port)
                  for p in provs}
        m = start(mtad_factory, static["gmail.test"],
                  routes={"static": static},
                  delivery={"retry": ["1h"], "timeouts": {"greeting": "1s"}})
        want, qids = {}, []
        rcpts = ["%s@gmail.test" % lp for lp in SIM_RCPT] + ["ok1@gmail.test"]
        qids.append(send(m, "a@example.org", rcpts, make_message(1)))
        want.update({"%s@gmail.test" % lp: c for lp, c in SIM_RCPT.items()})
        for lp, c in SIM_DATA.items():
            qids.append(send(m, "a@example.org", ["%s@gmail.test" % lp],
                             make_message(2)))
            want["%s@gmail.test" % lp] = c
        for mode, c in SIM_MODES.items():
            qids.append(send(m, "a@example.org", ["x@%s.test" % mode],
                             make_message(3)))
            want["x@%s.test" % mode] = c

        def classes():
            got = {}
            for ln in m.log_text().splitlines():
                mt = re.search(r": to=<([^>]+)>.*, status=(deferred|bounced) "
                               r"\(.*\), class=([a-z_]+)$", ln)
                if mt:
                    got[mt.group(1)] = mt.group(3)
            return got if len(got) == len(want) else None
        got = wait_for(classes, 20, what="a class for every failed recipient")
        assert got == want, (got, want)
        # the dead modes failed as meant (mtad's own wording for two)
        text = m.log_text()
        for rcpt, why in (("x@refuse.test", "Connection refused)"),
                          ("x@busy.test", "421 4.3.2"),
                          ("x@silent.test", "timed out while receiving the "
                                            "initial server greeting")):
            ln = [x for x in text.splitlines() if "to=<%s>" % rcpt in x]
            assert ln and why in ln[0], (rcpt, ln)
        # the simulator did give each scripted reply (none passed by chance)
        given = {e["reply"].split(" ", 2)[1] for e in sim.events()
                 if e["stage"] in ("rcpt", "data")}
        assert {"5.1.1", "4.2.2", "5.7.1", "4.3.0", "5.1.2", "5.5.4",
                "5.6.0", "5.3.4"} <= given, given
        # (the bounces of the 5xx ones went to the sender: null sender)
        assert [r["rcpts"] for r in sim.records("gmail")
                if r["mail_from"] == "a@example.org"] == [["ok1@gmail.test"]]
        # /metrics: by class x site
        counts = wait_for(lambda: metrics(m) or None, 10, what="metrics")
        per = {}
        for addr, c in want.items():
            k = (c, addr.split("@")[1])
            per[k] = per.get(k, 0) + 1
        assert counts == per, (counts, per)


def test_mtads_own_reasons_are_classed(mtad_factory):
    """A next hop that refuses the connection: no_answer, by mtad's own
    wording ("connect to ...: Connection refused")."""
    m = start(mtad_factory, "smtp:[127.0.0.1]:%d" % closed_port())
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    text = m.wait_log("%s: to=<b@example.net>" % qid, timeout=20)
    ln = [x for x in text.splitlines() if "%s: to=<" % qid in x][0]
    assert "Connection refused), class=no_answer" in ln, ln
    got = wait_for(lambda: metrics(m) or None, 10, what="class metrics")
    assert got == {("no_answer", "example.net"): 1}, got


def test_bad_rules_file_refused_by_t_with_its_position(mtad_factory,
                                                       workdir):
    path = rules_file(workdir, "bad.conf",
                      "# ours\npolicy code=550\n  rate_limited text=\"a(\"\n")
    m = mtad_factory({"delivery": {"bounce_classes": path}})
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "delivery.bounce_classes: %s:3:16: text=: bad regular " \
        "expression" % path in out, out
    # and a file that is not there
    m.cfg["delivery"]["bounce_classes"] = path + ".missing"
    m.write_config()
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert "%s.missing: cannot read" % path in r.stdout + r.stderr
    # the good one passes
    rules_file(workdir, "bad.conf", 'policy code=550 text="x"\n')
    m.cfg["delivery"]["bounce_classes"] = path
    m.write_config()
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
