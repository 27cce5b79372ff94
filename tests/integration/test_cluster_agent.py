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


def test_node_registers_and_status_shows_it(mtad_factory, sink, redis,
                                            workdir):
    m = mtad_factory({"cluster": cluster_cfg(workdir, redis),
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
