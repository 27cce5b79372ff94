"""The process model (issue 2): master, workers, log process, supervision,
reload, shutdown, privileges, sd_notify, mtad -t and the core of mtactl.

Real processes on loopback with random ports and temporary directories
(fixtures in conftest.py; /proc helpers in mtadtest.py).
"""
import os
import pty
import pwd
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from mtadtest import (IS_ROOT, MTAD, USER, alive, children, children_by_comm,
                      comm, greet, parse_status, proc_status, wait_for,
                      workers)



def worker_set(m, n):
    """Waits until exactly n workers exist and the master reports each of
    them ready (so they have dropped privileges); returns their pids."""
    def ready():
        w = sorted(workers(m.pid))
        if len(w) != n:
            return None
        r = m.ctl("status")
        if r.returncode != 0:
            return None
        _, ws = parse_status(r.stdout)
        st = {int(x["pid"]): x["state"] for x in ws}
        return w if all(st.get(p) == "running" for p in w) else None
    return wait_for(ready, what="%d ready workers" % n)


def test_listener_answers_220(mtad):
    _, data = greet(mtad.port)
    assert data.startswith(b"220 ")


def test_ipv6_listener(mtad_factory):
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    m = mtad_factory()
    from mtadtest import free_port
    p6 = free_port("::1")
    m.cfg["server"]["listen"].append("[::1]:%d" % p6)
    m.write_config()
    m.start()
    _, data = greet(p6, host="::1")
    assert data.startswith(b"220 ")


def test_worker_count_titles_and_status(mtad_factory):
    m = mtad_factory({"server": {"workers": 3}}).start()
    pids = worker_set(m, 3)
    logd = children_by_comm(m.pid, "mtad: logd")
    assert len(logd) == 1
    assert comm(m.pid) == "mtad: master"
    assert sorted(children(m.pid)) == sorted(pids + logd)
    r = m.ctl("status", check=True)
    head, ws = parse_status(r.stdout)
    assert int(head["pid"]) == m.pid
    assert head["workers"] == "3"
    assert sorted(int(w["pid"]) for w in ws) == pids
    assert sorted(int(w["shard"]) for w in ws) == [0, 1, 2]
    assert head["logd"].startswith("pid=%d " % logd[0])
    assert "queue" in head and "rate" in head and "load" in head


@pytest.mark.skipif(not IS_ROOT, reason="privilege drop needs root")
def test_children_run_as_configured_user(mtad):
    pw = pwd.getpwnam(USER)
    kids = worker_set(mtad, 2) + children_by_comm(mtad.pid, "mtad: logd")
    assert len(kids) == 3
    for pid in kids:
        st = proc_status(pid)
        assert st["Uid"].split() == [str(pw.pw_uid)] * 4, (pid, st["Uid"])
        assert st["Gid"].split() == [str(pw.pw_gid)] * 4, (pid, st["Gid"])
        assert "0" not in st["Groups"].split()
        assert st["NoNewPrivs"] == "1"
        assert st["CapEff"] == "0000000000000000"
    # The master stays root: it binds new addresses on reload.
    assert proc_status(mtad.pid)["Uid"].split()[1] == "0"


@pytest.mark.skipif(not IS_ROOT, reason="user look-up happens only as root")
def test_missing_user_is_a_clear_error(mtad_factory):
    m = mtad_factory({"server": {"user": "mtad-no-such-user"}})
    m.start(wait=False)
    rc = m.proc.wait(15)
    assert rc == 67                                  # EX_NOUSER
    assert "no such user 'mtad-no-such-user'" in m.stderr_text()


@pytest.mark.skipif(not IS_ROOT, reason="the spool goes to the workers' user only as root")
@pytest.mark.parametrize("parent", ["workers_user", "sticky"])
def test_spool_in_a_directory_the_workers_user_can_change_is_refused(
        mtad_factory, workdir, parent):
    """The spool directory is the workers' user's: in a directory that user
    may change (its own, or one writable by anyone, sticky or not) it could
    swap the spool for a link under root.  The master refuses to start
    (73, EX_CANTCREAT) and says why."""
    d = os.path.join(workdir, "holder")
    os.mkdir(d)
    pw = pwd.getpwnam(USER)
    if parent == "workers_user":
        os.chown(d, pw.pw_uid, pw.pw_gid)
        os.chmod(d, 0o755)
    else:
        os.chmod(d, 0o1777)
    m = mtad_factory({"spool": {"dir": os.path.join(d, "spool")}})
    m.start(wait=False)
    rc = m.proc.wait(15)
    assert rc == 73, (rc, m.stderr_text())
    err = m.stderr_text()
    assert "spool.dir: " in err, err
    assert ("owned by uid %d" % pw.pw_uid in err if parent == "workers_user"
            else "writable by anyone (mode 1777)" in err), err
    assert not os.path.exists(os.path.join(d, "spool"))


def test_killed_worker_is_replaced(mtad):
    before = worker_set(mtad, 2)
    victim = before[0]
    os.kill(victim, signal.SIGKILL)
    after = wait_for(lambda: (lambda w: w if len(w) == 2 and victim not in w
                              else None)(workers(mtad.pid)),
                     what="a replacement worker")
    assert victim not in after
    text = mtad.wait_log("(pid %d) exited on signal 9" % victim)
    assert "restarting" in text
    # The replacement serves: every worker can answer (bounded attempts).
    for _ in range(10):
        _, data = greet(mtad.port)
        assert data.startswith(b"220 ")
    head, ws = parse_status(mtad.ctl("status", check=True).stdout)
    assert sorted(int(w["pid"]) for w in ws) == sorted(after)
    assert sorted(int(w["shard"]) for w in ws) == [0, 1]


class Hammer(threading.Thread):
    """Connects in a bounded loop and records every outcome."""

    def __init__(self, port, limit=200000):
        super().__init__(daemon=True)
        self.port, self.limit = port, limit
        self.stop_flag = threading.Event()
        self.ok = 0
        self.errors = []

    def run(self):
        deadline = time.time() + 90
        for _ in range(self.limit):
            if self.stop_flag.is_set() or time.time() > deadline:
                break
            try:
                _, data = greet(self.port, timeout=10)
                if data.startswith(b"220 "):
                    self.ok += 1
                else:
                    self.errors.append(("no greeting", data))
            except OSError as e:
                self.errors.append((type(e).__name__, str(e)))


def test_sighup_new_worker_count_without_refusals(mtad):
    old = worker_set(mtad, 2)
    h = Hammer(mtad.port)
    h.start()
    wait_for(lambda: h.ok >= 20, what="client traffic")
    mtad.cfg["server"]["workers"] = 4
    mtad.write_config()
    os.kill(mtad.pid, signal.SIGHUP)
    new = wait_for(lambda: (lambda w: w if len(w) == 4 and
                            not set(w) & set(old) else None)(
                                workers(mtad.pid)),
                   timeout=20, what="4 new-generation workers")
    served = h.ok
    # Longer than the client's own 10 s timeout, so that a stalled
    # connection shows up below as the error it is.
    wait_for(lambda: h.ok >= served + 20, timeout=30,
             what="traffic after the swap")
    h.stop_flag.set()
    h.join(30)
    assert not h.is_alive()
    assert h.errors == [], h.errors[:5]
    assert len(new) == 4
    head, ws = parse_status(mtad.ctl("status", check=True).stdout)
    assert head["generation"] == "2"
    assert sorted(int(w["pid"]) for w in ws) == sorted(new)
    mtad.wait_log("reload done: generation 2 serving with 4 workers")


def test_sighup_broken_config_keeps_serving(mtad):
    before = worker_set(mtad, 2)
    with open(mtad.cfg_path, "a") as f:
        f.write("bogus_section:\n  x: 1\n")
    os.kill(mtad.pid, signal.SIGHUP)
    text = mtad.wait_log("reload rejected; generation 1 keeps serving")
    assert re.search(r"reload rejected: .*relay\.yaml:\d+:\d+: ", text)
    _, data = greet(mtad.port)
    assert data.startswith(b"220 ")
    assert sorted(workers(mtad.pid)) == before


def test_sigterm_stops_everything(mtad):
    pids = [mtad.pid] + children(mtad.pid)
    assert len(pids) == 4                            # master, 2 workers, logd
    assert os.path.exists(mtad.pid_file)
    with open(mtad.pid_file) as f:
        assert int(f.read()) == mtad.pid
    mtad.proc.send_signal(signal.SIGTERM)
    assert mtad.proc.wait(20) == 0
    wait_for(lambda: not any(alive(p) for p in pids), what="all processes gone")
    assert not os.path.exists(mtad.pid_file)
    assert not os.path.exists(mtad.sock)
    text = mtad.log_text()
    assert "stop requested" in text and "mtad exits" in text


def test_killed_master_leaves_no_orphans(mtad):
    kids = worker_set(mtad, 2) + children_by_comm(mtad.pid, "mtad: logd")
    mtad.proc.kill()
    mtad.proc.wait(5)
    # PR_SET_PDEATHSIG makes this immediate; a second is the bound.
    wait_for(lambda: not any(alive(p) for p in kids), timeout=1.0,
             step=0.02, what="workers gone after the master died")
    with pytest.raises(OSError):
        greet(mtad.port, timeout=2)


def test_worker_records_in_order_per_worker(mtad_factory):
    m = mtad_factory({"server": {"workers": 3}}).start()
    worker_set(m, 3)
    ports = [greet(m.port)[0] for _ in range(60)]
    pat = re.compile(r"^(\S+) mtad\[(\d+)\]: worker \d+: connect from "
                     r"\[127\.0\.0\.1\]:(\d+) session=[0-9a-f]{16}$", re.M)

    def ours():
        found = [(t, int(pid), int(p)) for t, pid, p in pat.findall(
            m.log_text()) if int(p) in ports]
        return found if len(found) >= len(ports) else None

    recs = wait_for(ours, what="a connect record per connection")
    assert sorted(p for _, _, p in recs) == sorted(ports)
    order = {p: i for i, p in enumerate(ports)}
    by_pid = {}
    for t, pid, p in recs:
        by_pid.setdefault(pid, []).append((t, order[p]))
    assert set(by_pid) <= set(workers(m.pid))
    for pid, seq in by_pid.items():
        idx = [i for _, i in seq]
        assert idx == sorted(idx), (pid, idx)
        stamps = [t for t, _ in seq]
        assert stamps == sorted(stamps), (pid, stamps)


def test_sigusr1_reopens_log(mtad):
    mtad.wait_log("ready: generation 1")
    rotated = mtad.log + ".1"
    os.rename(mtad.log, rotated)
    os.kill(mtad.pid, signal.SIGUSR1)
    wait_for(lambda: os.path.exists(mtad.log), what="a new log file")
    port, _ = greet(mtad.port)
    text = mtad.wait_log("connect from [127.0.0.1]:%d" % port)
    assert "(re)opened" in text
    with open(rotated) as f:
        assert "connect from [127.0.0.1]:%d" % port not in f.read()


def test_mtad_t_good_and_bad(mtad_factory):
    m = mtad_factory()
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "%s: ok" % m.cfg_path
    m.cfg["limits"] = {"max_message_size": "5X"}
    m.write_config()
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert re.search(r"relay\.yaml:\d+:\d+: limits\.max_message_size: ",
                     r.stderr), r.stderr
    assert "ok" not in r.stdout


def test_mtad_usage_and_bad_config_exit_codes(mtad_factory):
    r = subprocess.run([MTAD, "-x"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 64 and "usage:" in r.stderr
    r = subprocess.run([MTAD, "-h"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "exit codes" in r.stdout
    m = mtad_factory({"server": {"workers": "many"}})
    r = subprocess.run([MTAD, "-f", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 78 and "server.workers" in r.stderr


def test_mtactl_check(mtad_factory):
    m = mtad_factory()
    r = m.ctl("check")
    assert r.returncode == 0 and r.stdout.strip() == "%s: ok" % m.cfg_path
    m.cfg["server"]["workers"] = "many"
    m.write_config()
    r = m.ctl("check")
    assert r.returncode == 1 and "server.workers" in r.stderr


def test_mtactl_reload_waits_for_outcome(mtad):
    old = worker_set(mtad, 2)
    mtad.cfg["server"]["workers"] = 3
    mtad.write_config()
    r = mtad.ctl("reload")
    assert r.returncode == 0, r.stderr
    assert "reloaded: generation 2, 3 workers" in r.stdout
    head, ws = parse_status(mtad.ctl("status", check=True).stdout)
    gen2 = [w for w in ws if w["gen"] == "2"]
    assert len(gen2) == 3 and all(w["state"] == "running" for w in gen2)
    assert not {int(w["pid"]) for w in gen2} & set(old)
    # A broken file: rejected, exit 1 with the error, generation 2 serves.
    with open(mtad.cfg_path, "a") as f:
        f.write("nonsense: [\n")
    r = mtad.ctl("reload")
    assert r.returncode == 1
    assert "rejected" in r.stderr and "relay.yaml:" in r.stderr
    _, data = greet(mtad.port)
    assert data.startswith(b"220 ")
    head, _ = parse_status(mtad.ctl("status", check=True).stdout)
    assert head["generation"] == "2"


def test_mtactl_stop_and_errors(mtad):
    r = mtad.ctl("stop")
    assert r.returncode == 0, r.stderr
    assert mtad.proc.wait(20) == 0
    assert not os.path.exists(mtad.pid_file)
    r = mtad.ctl("status")
    assert r.returncode == 1
    assert "cannot connect to %s" % mtad.sock in r.stderr
    assert "is mtad running?" in r.stderr
    assert mtad.ctl("frobnicate").returncode == 2


def test_mtactl_kick_forwards(mtad):
    r = mtad.ctl("kick", "*", check=True)
    assert "sent to 2 workers" in r.stdout
    assert mtad.ctl("kick", "not-an-id").returncode == 1


def test_daemon_mode_writes_pid_file(mtad_factory):
    m = mtad_factory()
    r = subprocess.run([MTAD, "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    with open(m.pid_file) as f:
        pid = int(f.read())
    try:
        assert alive(pid) and comm(pid) == "mtad: master"
        _, data = greet(m.port)
        assert data.startswith(b"220 ")
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not alive(pid), timeout=20, what="daemon gone")
    wait_for(lambda: not os.path.exists(m.pid_file), what="pid file removed")


def test_sd_notify(mtad_factory, workdir):
    path = os.path.join(workdir, "notify.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(path)
    os.chmod(path, 0o666)
    ns.settimeout(15)
    m = mtad_factory()
    env = dict(os.environ, NOTIFY_SOCKET=path)
    logf = open(os.path.join(workdir, "stderr.log"), "ab")
    m.proc = subprocess.Popen([MTAD, "-f", "-c", m.cfg_path], env=env,
                              stdout=logf, stderr=logf)
    m.logf = logf

    def expect(word):
        for _ in range(20):
            msg = ns.recv(4096).decode()
            if word in msg.split("\n"):
                return
        raise AssertionError("no %s" % word)

    try:
        expect("READY=1")
        os.kill(m.pid, signal.SIGHUP)
        expect("RELOADING=1")
        expect("READY=1")
        m.proc.send_signal(signal.SIGTERM)
        expect("STOPPING=1")
        assert m.proc.wait(20) == 0
    finally:
        ns.close()


def test_killed_log_process_is_replaced(mtad):
    logd = wait_for(lambda: children_by_comm(mtad.pid, "mtad: logd"),
                    what="the log process")[0]
    os.kill(logd, signal.SIGKILL)
    new = wait_for(lambda: [p for p in children_by_comm(mtad.pid, "mtad: logd")
                            if p != logd], what="a new log process")
    assert len(new) == 1
    # Records still reach the same file through the new log process.
    port, _ = greet(mtad.port)
    text = mtad.wait_log("connect from [127.0.0.1]:%d" % port)
    assert "log process exited on signal 9" in text


def test_crash_loop_backs_off(mtad):
    """A worker that dies right after its start is restarted with a
    growing delay, and the master says so."""
    killed = set()
    for _ in range(4):
        def fresh():
            w = [p for p in workers(mtad.pid) if p not in killed]
            return w if len(w) == 2 else None
        victim = wait_for(fresh, what="two live workers")[0]
        os.kill(victim, signal.SIGKILL)
        killed.add(victim)
    text = mtad.wait_log("crash-loop back-off")
    assert re.search(r"restarting in 0\.\ds \(crash-loop back-off", text)
    worker_set(mtad, 2)
    _, data = greet(mtad.port)
    assert data.startswith(b"220 ")


def test_ctrl_c_to_the_process_group_stops_gracefully(mtad_factory, workdir):
    """make run's Ctrl-C: SIGINT reaches master, workers and log process;
    only the master acts, the workers finish and exit 0."""
    m = mtad_factory()
    logf = open(os.path.join(workdir, "stderr.log"), "ab")
    m.logf = logf
    m.proc = subprocess.Popen([MTAD, "-f", "-c", m.cfg_path], stdout=logf,
                              stderr=logf, start_new_session=True)
    m.wait_ready()
    ws = worker_set(m, 2)
    os.killpg(m.pid, signal.SIGINT)                  # our own new group
    assert m.proc.wait(20) == 0
    text = m.wait_log("workers stopped; mtad exits")
    for pid in ws:
        assert "(pid %d, generation 1) exited with status 0" % pid in text
    assert "SIGINT: stop requested" in text


def test_reload_moves_listener(mtad):
    """A new address is bound on reload; one that left the config is closed
    once the old generation is gone; an unchanged one stays the same
    socket (the swap test shows it never refuses)."""
    from mtadtest import free_port
    old_port = mtad.port
    new_port = free_port()
    mtad.cfg["server"]["listen"] = ["127.0.0.1:%d" % new_port]
    mtad.write_config()
    r = mtad.ctl("reload")
    assert r.returncode == 0, r.stderr
    _, data = greet(new_port)
    assert data.startswith(b"220 ")

    def old_closed():
        try:
            socket.create_connection(("127.0.0.1", old_port), timeout=2).close()
            return False
        except ConnectionRefusedError:
            return True
    wait_for(old_closed, what="the old address closed")


def test_reload_with_taken_address_is_rejected(mtad):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    taken = blocker.getsockname()[1]
    try:
        mtad.cfg["server"]["listen"].append("127.0.0.1:%d" % taken)
        mtad.write_config()
        r = mtad.ctl("reload")
        assert r.returncode == 1
        assert "cannot listen on 127.0.0.1:%d" % taken in r.stderr
        _, data = greet(mtad.port)
        assert data.startswith(b"220 ")
    finally:
        blocker.close()


def test_status_counts_traffic(mtad):
    for i in range(3):
        s = mtad.smtp()
        try:
            s.sendmail("a@example.org", ["b@example.net"],
                       "Subject: %d\r\n\r\nbody %d\r\n" % (i, i))
        finally:
            s.quit()

    def counted():
        head, ws = parse_status(mtad.ctl("status", check=True).stdout)
        tot = dict(kv.split("=", 1) for kv in head["total"].split())
        return (head, ws, tot) if int(tot["msgs_in"]) >= 3 else None
    head, ws, tot = wait_for(counted, what="3 messages in the totals")
    assert int(tot["msgs_in"]) == 3
    assert int(tot["conns_total"]) >= 3
    assert sum(int(w["msgs_in"]) for w in ws) == 3
    assert int(tot["bytes_in"]) > 0
    # The per-second ring sees them within its minute.
    rate = wait_for(lambda: (lambda r: r if float(
        r.split()[0].split("=")[1].rstrip("/s")) > 0 else None)(
            parse_status(mtad.ctl("status").stdout)[0]["rate"]),
        timeout=5, what="a non-zero msgs_in rate")
    assert "msgs_in=" in rate


class Sender(threading.Thread):
    """One persistent SMTP connection sending one message after another
    (MAIL, RCPT, DATA, body, each reply awaited) until told to stop; every
    reply that is not the expected one is recorded.  Bounded in count and
    time; paced so that the count lasts longer than a test."""

    def __init__(self, port, limit=20000):
        super().__init__(daemon=True)
        self.port, self.limit = port, limit
        self.stop_flag = threading.Event()
        self.sent = 0
        self.failed = 0
        self.errors = []
        self.quit_reply = None

    def expect(self, sock_file, sock, line, code):
        if line is not None:
            sock.sendall(line)
        reply = b""
        while True:
            got = sock_file.readline()
            if not got:
                raise EOFError("closed after %r" % reply)
            reply += got
            if got[3:4] != b"-":
                break
        if not got.startswith(b"%d " % code):
            self.errors.append((line, reply))
            return False
        return True

    def run(self):
        deadline = time.time() + 60
        try:
            with socket.create_connection(("127.0.0.1", self.port),
                                          timeout=10) as s:
                f = s.makefile("rb")
                if not (self.expect(f, s, None, 220) and
                        self.expect(f, s, b"EHLO sender.test\r\n", 250)):
                    return
                for i in range(self.limit):
                    if self.stop_flag.is_set() or time.time() > deadline:
                        break
                    if not (self.expect(f, s, b"MAIL FROM:<a@x.test>\r\n",
                                        250) and
                            self.expect(f, s, b"RCPT TO:<b@y.test>\r\n",
                                        250) and
                            self.expect(f, s, b"DATA\r\n", 354)):
                        return
                    self.sent += 1
                    if not self.expect(f, s, b"Subject: %d\r\n\r\nbody\r\n"
                                       b".\r\n" % i, 250):
                        if not self.errors[-1][1].startswith(b"452 "):
                            return
                        self.failed += 1    # the transaction failed, the
                                            # session goes on: see the test
                    # paced (at most 500 messages a second): the count
                    # bound must outlast the test on a fast machine too
                    time.sleep(0.002)
                self.expect(f, s, b"QUIT\r\n", 221)
                self.quit_reply = 221
        except (OSError, EOFError) as e:
            self.errors.append(("exception", repr(e)))


def test_reload_keeps_persistent_sessions_error_free(mtad_factory):
    """Issue 2: retiring workers finish their sessions.  Clients that send
    message after message on a few persistent connections through three
    reloads get 250 for every one and never a 421; once they quit, the old
    workers exit."""
    m = mtad_factory({"server": {"shutdown_timeout": "60s"},
                      "routes": {"default": "discard"}}).start()
    first = worker_set(m, 2)
    senders = [Sender(m.port) for _ in range(4)]
    for s in senders:
        s.start()
    wait_for(lambda: all(s.sent >= 5 for s in senders), timeout=30,
             what="traffic on every connection")
    retired = set(first)
    for gen in (2, 3, 4):
        r = m.ctl("reload")
        assert r.returncode == 0, r.stderr
        assert "reloaded: generation %d" % gen in r.stdout
        # The sessions outlive the reload and more than the idle grace
        # (2 s): they keep sending on the old workers.
        marks = [s.sent for s in senders]
        wait_for(lambda: not all(s.is_alive() for s in senders) or
                 all(s.sent >= k + 20 for s, k in zip(senders, marks)),
                 timeout=30, what="traffic after reload %d" % gen)
        time.sleep(2.5)
        assert all(s.is_alive() for s in senders), \
            [(s.sent, s.errors) for s in senders]
        head, ws = parse_status(m.ctl("status", check=True).stdout)
        assert head["generation"] == str(gen)
        current = {int(w["pid"]) for w in ws if w["gen"] == str(gen)}
        retired |= set(workers(m.pid)) - current
    for s in senders:
        s.stop_flag.set()
    for s in senders:
        s.join(30)
        assert not s.is_alive()
    errors = [e for s in senders for e in s.errors]
    # No 452 either: a reload must not purge the spool's tmp/ under the
    # old generation's messages in progress.
    assert errors == [], errors[:5]
    assert all(s.quit_reply == 221 for s in senders)
    assert sum(s.sent for s in senders) >= 4 * 65
    # The persistent sessions were held by first-generation workers, which
    # exit as soon as their last client has quit (long before the 60 s
    # shutdown timeout); the later retired generations too.
    wait_for(lambda: not any(alive(p) for p in retired), timeout=15,
             what="retired workers to exit")
    assert len(worker_set(m, 2)) == 2


def test_busy_listen_address_exits_unavailable(mtad_factory):
    # The step that fails gives the exit code (EX_UNAVAILABLE for a listen
    # address), not a search of the error text.
    m = mtad_factory()
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        busy.bind(("127.0.0.1", m.port))
        busy.listen(1)
        r = subprocess.run([MTAD, "-f", "-c", m.cfg_path],
                           capture_output=True, text=True, timeout=30)
    finally:
        busy.close()
    assert r.returncode == 69, (r.returncode, r.stderr)  # EX_UNAVAILABLE
    assert "127.0.0.1:%d" % m.port in r.stderr


def _start_on_tty(m):
    """Start m with a pseudo-terminal as its stderr (mtad -f run by hand),
    drained by a thread; returns the pty's master end."""
    master, slave = pty.openpty()
    m.proc = subprocess.Popen([MTAD, "-f", "-c", m.cfg_path],
                              stdout=subprocess.DEVNULL, stderr=slave,
                              cwd=m.dir)
    os.close(slave)

    def drain():
        try:
            while os.read(master, 4096):
                pass
        except OSError:
            pass
    threading.Thread(target=drain, daemon=True).start()
    m.wait_ready()
    return master


def _stderr_of(pid):
    return os.readlink("/proc/%d/fd/2" % pid)


@pytest.mark.parametrize("log_file", ["file", "-"])
def test_children_get_the_terminal_as_stderr_only_when_needed(
        mtad_factory, log_file):
    over = {"log": {"file": "-"}} if log_file == "-" else None
    m = mtad_factory(over)
    master = _start_on_tty(m)
    try:
        tty = _stderr_of(m.pid)
        assert tty.startswith("/dev/pts/"), tty
        ws = wait_for(lambda: len(workers(m.pid)) == 2 and workers(m.pid),
                      what="two workers")
        # a worker never needs the terminal, but in a sanitizer build
        # (`make asan` sets ASAN_OPTIONS) its reports are written there
        want = tty if "ASAN_OPTIONS" in os.environ else "/dev/null"
        for w in ws:
            assert _stderr_of(w) == want, (w, _stderr_of(w))
        logd = wait_for(lambda: children_by_comm(m.pid, "mtad: logd"),
                        what="logd")[0]
        # logd writes the log there for log.file "-", else it has no use
        assert _stderr_of(logd) == (tty if log_file == "-" else
                                    "/dev/null"), _stderr_of(logd)
    finally:
        m.stop()
        os.close(master)
