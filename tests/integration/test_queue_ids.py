"""Queue ids across a reload (issue 16): while an old and a new generation
of shard 0 both accept mail (a session that began before the reload stays
with its old worker), their ids differ in the writer number (the master
slot in the id's last three digits), so no id can repeat although neither
looks into queue/ before creating a message.  Loopback only; every wait is
bounded."""
import re

from mtadtest import make_message, send, wait_for


def writer_of(qid):
    return int(qid[13:16], 16) >> 5


def test_two_generations_of_a_shard_make_distinct_ids(mtad_factory, sink):
    m = mtad_factory({"server": {"workers": 1, "shutdown_timeout": "60s"},
                      "routes": {"default": sink.route}}).start()
    old = m.smtp()
    ids = {"old": [], "new": []}
    ids["old"].append(send(m, "a@example.org", ["b@example.net"],
                           make_message(0), conn=old))
    r = m.ctl("reload")
    assert r.returncode == 0, r.stderr
    assert "reloaded: generation 2" in r.stdout
    # each generation's worker and its master slot, which its ids carry
    slots = {}
    for line in m.ctl("status", check=True).stdout.splitlines():
        f = dict(re.findall(r"(\w+)=(\S+)", line))
        if line.startswith("worker ") and "slot" in f:
            slots[f["gen"]] = int(f["slot"])
    assert set(slots) == {"1", "2"}, slots
    new = m.smtp()
    for i in range(1, 11):
        # in turn: the old generation's session, then the new one's
        ids["old"].append(send(m, "a@example.org", ["b@example.net"],
                               make_message(2 * i), conn=old))
        ids["new"].append(send(m, "a@example.org", ["b@example.net"],
                               make_message(2 * i + 1), conn=new))
    for c in (old, new):
        c.quit()
    every = ids["old"] + ids["new"]
    assert len(set(every)) == len(every), every
    # one shard, two writers: one per generation
    assert {q[11:13] for q in every} == {"00"}, every
    assert len({writer_of(q) for q in ids["old"]}) == 1, ids["old"]
    assert len({writer_of(q) for q in ids["new"]}) == 1, ids["new"]
    assert writer_of(ids["old"][0]) == slots["1"], (ids, slots)
    assert writer_of(ids["new"][0]) == slots["2"], (ids, slots)
    assert slots["1"] != slots["2"]
    got = sink.wait_for(len(every), timeout=30)
    assert sorted(int(g.data.split(b"X-Serial: ")[1].split(b"\r\n")[0])
                  for g in got) == sorted(list(range(0, 22, 2)) +
                                          list(range(3, 22, 2)))
    wait_for(lambda: m.queue_ids() == [], 30, what="an empty queue")
