"""The cluster sync agent against one real redis-server (the three-node
tests are test_cluster.py): the node registers and `mtactl cluster status`
shows it and Redis's health; a literal route's site limited to a rate and
connections takes its tokens and leases from Redis (keys there); a ban
another node published is copied into this node's table, a local one is
published; AUTH-failure and quota keys; Redis killed gives one fallback
line and the gauge, restarted ends it by itself; bad cluster: config is
refused by mtad -t with file:line:col."""
import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest

from mtadtest import MTAD, free_port, make_message, send, wait_for

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


class Redis:
    def __init__(self, workdir, port=None):
        self.port = port or free_port()
        self.dir = os.path.join(workdir, "redis-%d" % self.port)
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir,
             "--requirepass", "clpw"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(lambda: "PONG" in self.cmd("PING"), 10), \
            "redis-server did not start"
        return self

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def cmd(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port), "-a",
                               "clpw", "--no-auth-warning"] + list(args),
                              capture_output=True, text=True,
                              timeout=10).stdout


@pytest.fixture
def redis(workdir):
    r = Redis(workdir).start()
    try:
        yield r
    finally:
        r.stop()


def cluster_cfg(workdir, redis, **over):
    pw = os.path.join(workdir, "redis.pw")
    with open(pw, "w") as f:
        f.write("clpw\n")
    os.chmod(pw, 0o600)
    c = {"redis": ["127.0.0.1:%d" % redis.port], "password_file": pw,
         "node_id": "node-a", "key_prefix": "t:", "sync_interval": "50ms",
         "timeout": "300ms"}
    c.update(over)
    return c


def status(m):
    r = m.ctl("cluster", "status", "--json", check=True)
    return json.loads(r.stdout)


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=5) as r:
        return r.read().decode()


def test_node_registers_and_status_shows_it(mtad_factory, sink, redis,
                                            workdir):
    mport = free_port()
    m = mtad_factory({"cluster": cluster_cfg(workdir, redis),
                      "metrics": {"listen": "127.0.0.1:%d" % mport},
                      "routes": {"default": "smtp:[127.0.0.1]:%d" %
                                 sink.port}}).start()
    assert wait_for(lambda: status(m)["redis"]["connected"], 10), status(m)
    s = status(m)
    assert s["node"] == "node-a" and s["enabled"] is True
    assert s["redis"]["role"] == "master"
    assert [n["id"] for n in s["nodes"]] == ["node-a"] and s["nodes_live"] == 1
    assert s["fallback"] == {"active": False, "episodes": 0}
    assert "node-a" in redis.cmd("ZRANGE", "t:nodes", "0", "-1")
    # a second node's registration is seen (and counted live)
    redis.cmd("ZADD", "t:nodes", str(int(time.time() * 1000)), "node-b")
    text = m.ctl("cluster", "status", check=True).stdout
    assert "node: node-a" in text and "connected" in text, text
    r1 = status(m)["redis"]["round_trips"]
    assert wait_for(lambda: status(m)["redis"]["round_trips"] > r1 + 5, 5)
    assert wait_for(lambda: "mtad_cluster_nodes 2" in metrics(mport), 5), \
        metrics(mport)
    text = metrics(mport)
    for line in ("mtad_cluster_connected 1", "mtad_cluster_fallback 0",
                 "mtad_cluster_fallback_episodes_total 0"):
        assert line in text, text
    assert "mtad_cluster_round_trips_total " in text


def test_rate_and_connections_come_from_redis(mtad_factory, sink, redis,
                                              workdir):
    m = mtad_factory({
        "cluster": cluster_cfg(workdir, redis),
        "routes": {"default": "smtp:[127.0.0.1]:%d" % sink.port},
        "shaping": {"defaults": {"connections": 2,
                                 "deliveries_per_second": 20,
                                 "burst": 4}}}).start()
    assert wait_for(lambda: status(m)["redis"]["connected"], 10)
    n = 30
    t0 = time.time()
    for i in range(n):
        send(m, "s@home.test", ["r%d@dest.test" % i], make_message(i))
    sink.wait_for(n, timeout=30)
    took = time.time() - t0
    # 20/s with a bucket of 5: 30 take at least (30 - 5) / 20 s
    assert took >= (n - 5) / 20.0 * 0.9, took
    keys = redis.cmd("KEYS", "t:*").split()
    assert any(k.startswith("t:rate:") and k.endswith(":sec") for k in keys), \
        keys
    assert any(k.startswith("t:conn:") for k in keys), keys
    assert wait_for(lambda: status(m)["shaping"][0]["spent"] >= n, 5), \
        status(m)
    s = status(m)
    pair = s["shaping"][0]
    assert pair["connections"]["limit"] == 2, pair
    assert pair["connections"]["fleet"] <= 2, pair
    assert s["redis"]["tokens_taken"] >= n, s


def test_fleet_ban_and_local_ban(mtad_factory, sink, redis, workdir):
    m = mtad_factory({"cluster": cluster_cfg(workdir, redis),
                      "routes": {"default": "smtp:[127.0.0.1]:%d" %
                                 sink.port}}).start()
    assert wait_for(lambda: status(m)["redis"]["connected"], 10)
    # another node's ban: in this node's table within a few cycles
    end = int(time.time() * 1000) + 600000
    redis.cmd("HSET", "t:bans", "192.0.2.7", "1:%d" % end)
    assert wait_for(lambda: "192.0.2.7" in m.ctl("ban", "list").stdout, 5), \
        m.ctl("ban", "list").stdout
    # a local ban goes to the fleet
    m.ctl("ban", "add", "198.51.100.9", "--for", "10m", check=True)
    assert wait_for(lambda: "198.51.100.9" in redis.cmd("HKEYS", "t:bans"),
                    5), redis.cmd("HGETALL", "t:bans")
    assert wait_for(lambda: {b["address"] for b in status(m)["ban_list"]} ==
                    {"192.0.2.7", "198.51.100.9"}, 5), status(m)
    assert "192.0.2.7 for " in m.ctl("cluster", "status").stdout
    # lifted here: lifted in the fleet too, and not copied back
    r = m.ctl("ban", "del", "192.0.2.7", check=True)
    assert "ban lifted" in r.stdout
    assert wait_for(lambda: "192.0.2.7" not in redis.cmd("HKEYS", "t:bans")
                    and "192.0.2.7" in redis.cmd("HKEYS", "t:unbans"), 5), \
        redis.cmd("HGETALL", "t:bans")
    # another node that still has it publishes it: refused, lifted here
    redis.cmd("HSET", "t:bans", "192.0.2.7", "1:%d" % end)
    assert wait_for(lambda: "192.0.2.7" not in redis.cmd("HKEYS", "t:bans"),
                    5)
    assert "192.0.2.7" not in m.ctl("ban", "list").stdout


def test_fallback_episode_and_rejoin(mtad_factory, sink, workdir):
    r = Redis(workdir).start()
    try:
        m = mtad_factory({"cluster": cluster_cfg(workdir, r),
                          "routes": {"default": "smtp:[127.0.0.1]:%d" %
                                     sink.port},
                          "shaping": {"defaults": {"connections": 4,
                                                   "deliveries_per_second":
                                                   50}}}).start()
        assert wait_for(lambda: status(m)["redis"]["connected"], 10)
        r.stop()
        m.wait_log("cluster: redis unreachable", timeout=10)
        assert wait_for(lambda: status(m)["fallback"]["active"], 5)
        # mail still goes, at the node's share
        for i in range(5):
            send(m, "s@home.test", ["f%d@dest.test" % i], make_message(i))
        sink.wait_for(5, timeout=20)
        r.start()
        m.wait_log("answers again after", timeout=15)
        assert wait_for(lambda: status(m)["fallback"] ==
                        {"active": False, "episodes": 1}, 5), status(m)
        assert m.log_text().count("cluster: redis unreachable") == 1
    finally:
        r.stop()


def test_bad_cluster_config_names_its_place(mtad_factory, workdir):
    pw = os.path.join(workdir, "open.pw")
    with open(pw, "w") as f:
        f.write("x\n")
    os.chmod(pw, 0o644)
    m = mtad_factory({"cluster": {"redis": ["127.0.0.1:6379", "nowhere"],
                                  "password_file": pw}})
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode != 0
    for key in ("cluster.redis[1]", "cluster.password_file"):
        line = [ln for ln in r.stderr.splitlines() if key in ln]
        assert line, r.stderr
        assert line[0].split(":")[1].isdigit(), line
    m2 = mtad_factory({"cluster": {"sentinel": {"addresses":
                                                ["127.0.0.1:26379"]}}},
                      subdir="b")
    r = subprocess.run([MTAD, "-t", "-c", m2.cfg_path], capture_output=True,
                       text=True, timeout=20)
    assert "cluster.sentinel.master_name" in r.stderr, r.stderr


def test_backoff_another_node_published_is_applied(mtad_factory, sink, redis,
                                                   workdir):
    m = mtad_factory({"cluster": cluster_cfg(workdir, redis),
                      "routes": {"default": "smtp:[127.0.0.1]:%d" %
                                 sink.port},
                      "shaping": {"defaults": {"connections": 2}}}).start()
    assert wait_for(lambda: status(m)["redis"]["connected"], 10)
    send(m, "s@home.test", ["b0@dest.test"], make_message(0))
    sink.wait_for(1, timeout=20)
    assert wait_for(lambda: status(m)["shaping"], 5), status(m)
    pair = status(m)["shaping"][0]
    key = "t:backoff:%s|%s" % (pair["site"], pair["source"])
    now = int(time.time() * 1000)
    # node-b was told 421: suspend 30 s (act 1), reply escaped already
    redis.cmd("SET", key, "node-b|%d|1|30000|0|0|0|0|0|421 4.7.0 slow down"
              % now, "PX", "30000")
    m.wait_log("cluster: site %s source %s suspended for" % (
        pair["site"], pair["source"]), timeout=5)
    assert "node-b was told: 421 4.7.0 slow down" in m.log_text()
    assert wait_for(lambda: status(m)["shaping"][0]["mode"] == "suspended",
                    5), status(m)
    # mail waits (held, not deferred) while the fleet's suspension lasts
    send(m, "s@home.test", ["b1@dest.test"], make_message(1))
    time.sleep(1.0)     # a bounded look: nothing may arrive meanwhile
    assert len(sink.messages) == 1
    m.ctl("resume", pair["site"], check=True)
    sink.wait_for(2, timeout=20)


def test_sentinel_gives_the_primary(mtad_factory, sink, redis, workdir):
    sport = free_port()
    sdir = os.path.join(workdir, "sentinel")
    os.makedirs(sdir)
    conf = os.path.join(sdir, "sentinel.conf")
    with open(conf, "w") as f:
        f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                "sentinel monitor mtadp 127.0.0.1 %d 1\n"
                "sentinel auth-pass mtadp clpw\n" % (sport, sdir, redis.port))
    p = subprocess.Popen([REDIS, conf, "--sentinel"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def asks():
            out = subprocess.run(["redis-cli", "-p", str(sport), "SENTINEL",
                                  "get-master-addr-by-name", "mtadp"],
                                 capture_output=True, text=True,
                                 timeout=5).stdout
            return str(redis.port) in out
        assert wait_for(asks, 10), "sentinel did not start"
        cl = cluster_cfg(workdir, redis)
        del cl["redis"]
        cl["sentinel"] = {"addresses": ["127.0.0.1:%d" % sport],
                          "master_name": "mtadp"}
        m = mtad_factory({"cluster": cl,
                          "routes": {"default": "smtp:[127.0.0.1]:%d" %
                                     sink.port}}).start()
        assert wait_for(lambda: status(m)["redis"]["connected"], 10), \
            status(m)
        s = status(m)
        assert s["redis"]["address"] == "127.0.0.1:%d" % redis.port, s
        assert s["redis"]["role"] == "master"
    finally:
        p.kill()
        p.wait(10)


def test_three_nodes_keep_one_rate_and_connection_limit(mtad_factory, sink,
                                                        redis, workdir):
    rate, n_each = 30, 40
    CONNS = int(os.environ.get('CL_CONNS', '10'))
    nodes = []
    for i in range(3):
        cl = cluster_cfg(workdir, redis, node_id="n%d" % i)
        nodes.append(mtad_factory({
            "cluster": cl,
            "routes": {"default": "smtp:[127.0.0.1]:%d" % sink.port},
            "shaping": {"defaults": {"connections": CONNS,
                                     "deliveries_per_second": rate,
                                     "burst": 0}}},
            subdir="node%d" % i).start())
    for m in nodes:
        assert wait_for(lambda: status(m)["nodes_live"] == 3, 10), status(m)
    t0 = time.time()
    for k in range(n_each):
        for i, m in enumerate(nodes):
            send(m, "s@home.test", ["r%d-%d@dest.test" % (i, k)],
                 make_message(k))
    total = 3 * n_each
    t_inj = time.time() - t0
    arrivals = []
    while len(arrivals) < total and time.time() - t0 < 60:
        k = len(sink.messages)
        while len(arrivals) < k:
            arrivals.append(time.time())
        time.sleep(0.005)
    took = time.time() - t0
    del t_inj
    # no second holds more than the rate (the sink's clock: 5 ms steps)
    worst = max(sum(1 for b in arrivals if a <= b < a + 1.0)
                for a in arrivals)
    assert worst <= rate + 2, worst
    # the fleet's 30/s: 120 take at least 119/30 s; within 10% of it
    least = (total - 1) / float(rate)
    assert took >= least * 0.95, (took, least)
    assert took <= least * 1.25, (took, least)
    peak = max(s["shaping"][0]["connections"]["fleet"]
               for s in (status(m) for m in nodes))
    assert peak <= CONNS


def test_auth_failures_add_up_with_the_fleet(mtad_factory, workdir, hole,
                                             redis):
    from test_auth import login_plain, smtp_starttls, start
    import smtplib
    t = start(mtad_factory, workdir, hole, auth={"max_failures": 3},
              extra={"cluster": cluster_cfg(workdir, redis)})
    assert wait_for(lambda: status(t.m)["redis"]["connected"], 10)
    s = smtp_starttls(t.sub, source="127.0.0.7")
    with pytest.raises(smtplib.SMTPAuthenticationError) as e:
        login_plain(s, "alice", "bad")
    assert e.value.smtp_code == 535
    s.close()
    # this node's failure is the fleet's now
    assert wait_for(lambda: redis.cmd("HVALS", "t:auth").startswith("1:"),
                    5), redis.cmd("HGETALL", "t:auth")
    field = redis.cmd("HKEYS", "t:auth").split()[0]
    # two more on other nodes: 3 in the fleet, max_failures reached here
    end = int(time.time() * 1000) + 600000
    redis.cmd("HSET", "t:auth", field, "3:%d" % end)

    def refused():
        c = smtp_starttls(t.sub, source="127.0.0.7")
        try:
            login_plain(c, "alice", "s3cret pass")
            c.quit()
            return False
        except smtplib.SMTPAuthenticationError as x:
            c.close()
            return x.smtp_code == 421
    assert wait_for(refused, 5)
    # another address is not affected
    s = smtp_starttls(t.sub, source="127.0.0.8")
    assert s.login("alice", "s3cret pass")[0] == 235
    s.quit()


def test_quota_counts_the_other_nodes_usage(mtad_factory, hole, redis,
                                            workdir):
    from test_quota import txn
    m = mtad_factory({"cluster": cluster_cfg(workdir, redis),
                      "relay": {"allow_networks": ["127.0.0.8/32"]},
                      "routes": {"static": {"example.org": hole.route()}},
                      "quotas": {"recipient_domain": {"messages": 3}}})
    m.start()
    assert wait_for(lambda: status(m)["redis"]["connected"], 10)
    assert txn(m, "127.0.0.8", "a@s.test", "u@example.org")[0] == 250
    # this node's message is in the fleet's lease for the key
    key = "t:quota:%d:example.org" % 1      # kind 1: recipient domain
    assert wait_for(lambda: redis.cmd("HGET", key, "node-a").startswith(
        "1:"), 5), redis.cmd("KEYS", "t:*")
    assert "1:example.org" in redis.cmd("ZRANGE", "t:quotas", "0", "-1")
    # node-b holds two: 3 in the fleet, the quota is reached here
    end = int(time.time() * 1000) + 600000
    redis.cmd("HSET", key, "node-b", "2:200:%d" % end)
    assert wait_for(lambda: txn(m, "127.0.0.8", "a@s.test",
                                "v@example.org")[0] == 452, 5)
    def row():
        q = [x for x in status(m)["quotas"] if x["key"] == "example.org"]
        return q[0] if q and q[0]["others"]["messages"] == 2 else None
    assert wait_for(row, 5), status(m)
    q = [row()]
    assert q[0]["others"] == {"messages": 2, "bytes": 200}, q
    assert q[0]["kind"] == "recipient_domain" and q[0]["here"]["messages"] >= 1
    # node-b's lease ends (its messages delivered): room again
    redis.cmd("HDEL", key, "node-b")
    assert wait_for(lambda: txn(m, "127.0.0.8", "a@s.test",
                                "w@example.org")[0] == 250, 5)


def test_a_dead_nodes_connection_lease_expires(mtad_factory, sink, redis,
                                               workdir):
    m = mtad_factory({"cluster": cluster_cfg(workdir, redis),
                      "routes": {"default": "smtp:[127.0.0.1]:%d" %
                                 sink.port},
                      "shaping": {"defaults": {"connections": 1}}}).start()
    assert wait_for(lambda: status(m)["redis"]["connected"], 10)
    # a literal route's site is its address; the source "default"
    key = "t:conn:127.0.0.1|default"
    # node-b (killed) held the one connection; its lease ends in 2 s
    now_ms = int(redis.cmd("TIME").split()[0]) * 1000
    redis.cmd("HSET", key, "node-b", "1:0:%d" % (now_ms + 2000))
    t0 = time.time()
    send(m, "s@home.test", ["l1@dest.test"], make_message(1))
    assert wait_for(lambda: status(m)["shaping"] and status(m)["shaping"][0]
                    ["connections"]["others"] == 1, 5), status(m)
    assert status(m)["shaping"][0]["site"] == "127.0.0.1"
    sink.wait_for(1, timeout=20)
    took = time.time() - t0
    assert 0.8 <= took <= 6, took
    assert "node-b" not in redis.cmd("HKEYS", key)


def test_sentinel_fail_over_moves_the_agent(mtad_factory, sink, redis,
                                            workdir):
    replica = Redis(workdir)
    replica.proc = subprocess.Popen(
        [REDIS, "--port", str(replica.port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", replica.dir,
         "--requirepass", "clpw", "--masterauth", "clpw",
         "--replicaof", "127.0.0.1", str(redis.port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sport = free_port()
    sdir = os.path.join(workdir, "sentinel2")
    os.makedirs(sdir)
    conf = os.path.join(sdir, "sentinel.conf")
    with open(conf, "w") as f:
        f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                "sentinel monitor mtadp 127.0.0.1 %d 1\n"
                "sentinel auth-pass mtadp clpw\n"
                "sentinel down-after-milliseconds mtadp 500\n"
                "sentinel failover-timeout mtadp 3000\n"
                % (sport, sdir, redis.port))
    sp = subprocess.Popen([REDIS, conf, "--sentinel"],
                          stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: "connected_slaves:1" in redis.cmd(
            "INFO", "replication"), 10)

        def replicas_known():
            out = subprocess.run(["redis-cli", "-p", str(sport), "SENTINEL",
                                  "replicas", "mtadp"], capture_output=True,
                                 text=True, timeout=5).stdout
            return str(replica.port) in out
        assert wait_for(replicas_known, 15), "sentinel does not see it"
        cl = cluster_cfg(workdir, redis)
        del cl["redis"]
        cl["sentinel"] = {"addresses": ["127.0.0.1:%d" % sport],
                          "master_name": "mtadp"}
        m = mtad_factory({"cluster": cl,
                          "routes": {"default": "smtp:[127.0.0.1]:%d" %
                                     sink.port}}).start()
        assert wait_for(lambda: status(m)["redis"]["connected"], 10)
        redis.stop()                # the primary dies: the replica goes up
        want = "127.0.0.1:%d" % replica.port
        assert wait_for(lambda: status(m)["redis"]["address"] == want and
                        status(m)["redis"]["connected"], 30), status(m)
        assert status(m)["redis"]["role"] == "master"
        m.wait_log("answers again after", timeout=5)
    finally:
        sp.kill()
        sp.wait(10)
        replica.stop()


def test_reload_restarts_the_agent_with_the_new_section(mtad_factory, sink,
                                                        redis, workdir):
    m = mtad_factory({"cluster": cluster_cfg(workdir, redis),
                      "routes": {"default": "smtp:[127.0.0.1]:%d" %
                                 sink.port}}).start()
    assert wait_for(lambda: status(m)["redis"]["connected"], 10)
    pid = status(m)["agent"]["pid"]
    m.cfg["cluster"]["node_id"] = "node-z"
    m.write_config()
    m.ctl("reload", check=True)
    assert wait_for(lambda: status(m)["node"] == "node-z" and
                    status(m)["redis"]["connected"], 10), status(m)
    assert status(m)["agent"]["pid"] != pid
    del m.cfg["cluster"]
    m.write_config()
    m.ctl("reload", check=True)
    assert wait_for(lambda: status(m) == {"enabled": False}, 10), status(m)
