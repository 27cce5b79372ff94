"""mtactl run as root reads the spool, a directory the workers' user
owns: what that user put there (a FIFO, a symbolic link) must not make
root open anything else nor hang.  A FIFO is the probe: an open() of it
for reading blocks until a writer comes, so mtactl following a link to
one, or opening one, hangs and the test fails at its timeout.
"""
import os
import pwd
import subprocess

import pytest

from mtadtest import IS_ROOT, MTACTL, USER, make_message, send

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="the attacks need root")

FAKE_ID = "1A2354E3D6C0FFFF"


def as_worker_user(fn, *args):
    """Run fn(*args) in a child with the workers' uid and gid."""
    pw = pwd.getpwnam(USER)
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            fn(*args)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def show(m, qid):
    return subprocess.run([MTACTL, "-c", m.cfg_path, "show", qid],
                          capture_output=True, text=True, timeout=10)


@pytest.fixture
def m(mtad_factory, hole):
    return mtad_factory({"server": {"workers": 1},
                         "routes": {"default": hole.route()}}).start()


def test_show_of_a_fifo_in_queue_does_not_hang(m):
    path = os.path.join(m.spool, "queue", FAKE_ID)
    as_worker_user(os.mkfifo, path)
    r = show(m, FAKE_ID)
    assert r.returncode == 1, r
    assert FAKE_ID in r.stderr


def test_show_does_not_follow_a_link_in_queue(m, workdir):
    target = os.path.join(workdir, "root-fifo")
    os.mkfifo(target, 0o600)
    path = os.path.join(m.spool, "queue", FAKE_ID)
    as_worker_user(os.symlink, target, path)
    r = show(m, FAKE_ID)
    assert r.returncode == 1, r
    assert FAKE_ID in r.stderr


def test_show_does_not_follow_a_link_in_state(m, workdir):
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    qpath = os.path.join(m.spool, "queue", qid)
    assert show(m, qid).returncode == 0
    target = os.path.join(workdir, "root-fifo")
    os.mkfifo(target, 0o600)
    spath = os.path.join(m.spool, "state", qid)

    def plant():
        if os.path.lexists(spath):
            os.unlink(spath)
        os.symlink(target, spath)
        # the mark that says a state file exists (SPOOL_HAS_STATE, u+x)
        os.chmod(qpath, os.stat(qpath).st_mode | 0o100)
    as_worker_user(plant)
    r = show(m, qid)
    # the message is still shown or refused, but mtactl came back
    assert r.returncode in (0, 1), r


def test_status_does_not_follow_a_link_for_the_queue_dir(m, workdir):
    """The master counts spool/queue for status, metrics and drain: a link
    put there must not make root list another directory."""
    victim = os.path.join(workdir, "rootdir")
    os.mkdir(victim, 0o700)
    for i in range(7):
        open(os.path.join(victim, "f%d" % i), "w").close()
    q = os.path.join(m.spool, "queue")

    def plant():
        os.rename(q, q + ".real")
        os.symlink(victim, q)
    as_worker_user(plant)
    st = m.ctl("status", check=True).stdout
    assert "queue: unknown (" in st, st
    js = m.ctl("status", "--json", check=True).stdout
    assert '"queue":null' in js.replace(" ", ""), js
