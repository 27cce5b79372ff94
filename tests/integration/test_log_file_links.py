"""log.file is opened by the master, as root, at start and at every
reopen (SIGUSR1, reload): in a directory the workers' user can change, a
link put there would make root create or append to any file.  Like
server.pid_file and the routes db, such a directory is refused and a link
is never followed.  Each test failed before its fix."""
import os
import pwd
import signal

import pytest

from mtadtest import IS_ROOT, USER, alive, wait_for
from test_privsep import assert_untouched, start_fails, victim_file

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="the attacks need root")


def test_log_file_in_a_worker_writable_dir_is_refused(mtad_factory, workdir):
    pw = pwd.getpwnam(USER)
    logdir = os.path.join(workdir, "logs")
    os.mkdir(logdir, 0o755)
    os.chown(logdir, pw.pw_uid, pw.pw_gid)
    victim = victim_file(workdir)
    # what a worker could do there: the log file is a link to root's file
    os.symlink(victim, os.path.join(logdir, "mtad.log"))
    m = mtad_factory({"log": {"file": os.path.join(logdir, "mtad.log")}})
    start_fails(m, "log.file", "owned by uid %d" % pw.pw_uid)
    assert_untouched(victim)


def test_log_file_link_is_not_followed(mtad_factory, workdir):
    m = mtad_factory()
    victim = victim_file(workdir)
    os.symlink(victim, m.log)
    start_fails(m, "log.file", "is a symbolic link")
    assert_untouched(victim)


def test_reopen_does_not_follow_a_link(mtad_factory, workdir):
    m = mtad_factory().start()
    victim = victim_file(workdir)
    os.rename(m.log, m.log + ".1")
    os.symlink(victim, m.log)
    m.proc.send_signal(signal.SIGUSR1)
    # refused, and said so in the file still open (the renamed one)
    rotated = m.log + ".1"

    def said():
        with open(rotated, "rb") as f:
            text = f.read()
        return b"log.file" in text and b"is a symbolic link" in text
    wait_for(said, 20, what="the refused reopen in the old log")
    assert_untouched(victim)
    assert alive(m.pid)
