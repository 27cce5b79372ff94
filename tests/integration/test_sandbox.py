"""Issue 10, "contain the next one": workers run under a seccomp filter and
Landlock rules (server.sandbox, on by default).  A forbidden call kills the
worker, the master logs it and forks a replacement that serves; Landlock
keeps a worker out of files outside the spool, its Maildirs and a few
read-only paths.

The forbidden call is made on request of the control command
"sandbox-test", which exists only when the master was started with
MTAD_SANDBOX_TEST=1 in its environment (by whoever starts mtad: root).
"""
import os
import socket
import subprocess

import pytest

from mtadtest import (MTAD, alive, children_by_comm, proc_status, wait_for,
                      workers)


def seccomp_mode(pid):
    return proc_status(pid).get("Seccomp")


def ctl_raw(m, request):
    """One control request over the socket (mtactl has no sandbox-test)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(m.sock)
        s.sendall(request.encode() + b"\n")
        out = b""
        while True:
            b = s.recv(4096)
            if not b:
                return out.decode()
            out += b


def start_with_test_hook(m):
    env = dict(os.environ, MTAD_SANDBOX_TEST="1")
    m.logf = open(os.path.join(m.dir, "stderr.log"), "ab")
    m.proc = subprocess.Popen([MTAD, "-f", "-c", m.cfg_path], env=env,
                              stdout=m.logf, stderr=m.logf, cwd=m.dir)
    m.wait_ready()
    return m


def test_forbidden_call_kills_worker_and_master_respawns(mtad_factory):
    m = start_with_test_hook(mtad_factory())
    m.wait_log("sandbox: seccomp filter on")
    before = set(wait_for(lambda: len(workers(m.pid)) == 2 and
                          workers(m.pid), what="two workers"))
    for pid in before:
        assert seccomp_mode(pid) == "2", proc_status(pid)   # filter mode
    r = ctl_raw(m, "sandbox-test")
    assert r.startswith("ok\n"), r
    victim = int(r.split("worker pid ")[1].split()[0])
    assert victim in before
    m.wait_log("(pid %d) exited on signal 31" % victim)     # SIGSYS
    wait_for(lambda: not alive(victim), what="victim gone")
    after = wait_for(lambda: len(workers(m.pid)) == 2 and
                     victim not in workers(m.pid) and workers(m.pid),
                     timeout=20, what="a new worker")
    assert set(after) - before, (before, after)
    # the replacement serves
    with m.smtp() as s:
        assert s.ehlo()[0] == 250
    assert alive(m.pid)


def test_sandbox_test_command_absent_without_env(mtad):
    r = ctl_raw(mtad, "sandbox-test")
    assert r.startswith("error: unknown request"), r
    assert len(workers(mtad.pid)) == 2


def test_sandbox_off_leaves_workers_unfiltered(mtad_factory):
    m = mtad_factory({"server": {"sandbox": False}}).start()
    pids = wait_for(lambda: len(workers(m.pid)) == 2 and workers(m.pid),
                    what="two workers")
    for pid in pids:
        assert seccomp_mode(pid) == "0"
    assert seccomp_mode(m.pid) == "0"
    assert "sandbox: seccomp filter on" not in m.log_text()


def test_master_and_logd_filtered(mtad):
    assert seccomp_mode(mtad.pid) == "2"
    logd = wait_for(lambda: children_by_comm(mtad.pid, "mtad: logd"),
                    what="logd")
    assert seccomp_mode(logd[0]) == "2"


def test_landlock_confines_maildirs_to_those_known_at_start(mtad_factory,
                                                           workdir):
    """A Maildir route added live outside the Maildirs the workers knew at
    start is deferred (Landlock: EACCES), not delivered; after a reload the
    new workers know it and deliver.  The directory itself is the workers'
    (so only Landlock, not the file modes, stands in the way)."""
    from mtadtest import worker_dir
    from mtadtest import make_message, maildir_files, send, wait_for
    m = mtad_factory({"routes": {"static": {
        "known.test": "maildir:" + worker_dir(os.path.join(workdir, "md1"))}}})
    m.start()
    late = worker_dir(os.path.join(workdir, "late"))
    md = os.path.join(late, "Maildir")
    r = m.ctl("route", "add", "late.test", "maildir:" + md)
    assert r.returncode == 0, r.stdout + r.stderr
    qid = send(m, "a@example.org", ["b@late.test"], make_message(1))
    text = m.wait_log("%s: to=<b@late.test>" % qid)
    m.wait_log("status=deferred")
    text = m.log_text()
    assert "Permission denied" in text, text
    assert maildir_files(md) == []
    assert m.ctl("reload").returncode == 0
    files = wait_for(lambda: maildir_files(md), 30)
    assert files and len(files) == 1, files


@pytest.mark.parametrize("how", ["link", "parent"])
def test_no_rule_for_a_maildir_a_less_trusted_user_can_redirect(
        mtad_factory, workdir, how):
    """Root makes the workers' Landlock rules from the maildir routes'
    paths.  A path through a symbolic link (link), or through a directory
    a less trusted user owns (parent: nobody could plant a link there), must
    not lead root to open what it points at: no rule, a warning naming
    the route and the path, and the delivery defers (EACCES) instead of
    landing in the link's target.  Before the fix root followed the link
    and the message was delivered into the target."""
    from mtadtest import IS_ROOT, make_message, maildir_files, send, worker_dir
    if not IS_ROOT:
        pytest.skip("needs root (a directory of another user)")
    target = worker_dir(os.path.join(workdir, "target"))
    if how == "link":
        base = os.path.join(workdir, "link")
        os.symlink(target, base)
        os.lchown(base, 65534, 65534)
        md = os.path.join(base, "Maildir")
        refused = "'%s' is a symbolic link" % base
    else:
        evil = os.path.join(workdir, "evil")
        os.makedirs(evil)
        os.chown(evil, 65534, 65534)
        os.rename(target, os.path.join(evil, "target"))
        target = os.path.join(evil, "target")
        md = os.path.join(target, "Maildir")
        refused = "directory owned by uid 65534"
    m = mtad_factory({"server": {"workers": 1},
                      "delivery": {"retry": ["1h"]},
                      "routes": {"static": {"evil.test": "maildir:" + md}}})
    m.start()
    qid = send(m, "a@example.org", ["b@evil.test"], make_message(1))
    m.wait_log("%s: to=<b@evil.test>" % qid)
    line = [ln for ln in m.log_text().splitlines()
            if "%s: to=<b@evil.test>" % qid in ln][0]
    assert "status=deferred" in line, line
    assert maildir_files(os.path.join(target, "Maildir")) == []
    warned = [ln for ln in m.log_text().splitlines()
              if "maildir route evil.test '%s'" % md in ln]
    assert warned and refused in warned[0], m.log_text()
