"""Issue 10, findings 1 and 5: the master (root) never follows a link where
someone else could have put it, and the control socket admits only root
and server.admin_group, never the workers' user.

Each test reproduces an attack from the issue against a real mtad started
as root (CI runs as root); the victims are root-only files and directories
that must come out untouched.
"""
import grp
import os
import pwd
import signal
import stat
import subprocess
import sys

import pytest

from mtadtest import IS_ROOT, USER, alive, wait_for, workers

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="the attacks need root")

ADMIN_GROUP = "mtadadm"
NOBODY = 65534


@pytest.fixture(scope="module")
def admin_gid():
    try:
        return grp.getgrnam(ADMIN_GROUP).gr_gid
    except KeyError:
        subprocess.run(["groupadd", "--system", ADMIN_GROUP], check=True)
        return grp.getgrnam(ADMIN_GROUP).gr_gid


def victim_file(workdir, name="victim", data=b"root's secret\n"):
    path = os.path.join(workdir, name)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)
    return path


def assert_untouched(path, data=b"root's secret\n"):
    st = os.lstat(path)
    assert (st.st_uid, st.st_gid) == (0, 0), "victim chowned: %r" % (st,)
    assert stat.S_IMODE(st.st_mode) == 0o600
    with open(path, "rb") as f:
        assert f.read() == data


def start_fails(m, *needles):
    """mtad must refuse to start; its error names every needle."""
    m.start(wait=False)
    try:
        rc = m.proc.wait(20)
    except subprocess.TimeoutExpired:
        raise AssertionError("mtad started: %s" % m.stderr_text())
    text = m.stderr_text()
    assert rc != 0, text
    for n in needles:
        assert n in text, text
    return text


# ---- finding 1 ----------------------------------------------------------

def test_routes_lock_symlink_not_followed_on_sighup(mtad_factory, workdir):
    m = mtad_factory().start()
    victim = victim_file(workdir)
    lock = os.path.join(m.dir, "routes.mdb-lock")
    os.unlink(lock)
    os.symlink(victim, lock)
    m.proc.send_signal(signal.SIGHUP)
    text = m.wait_log("reload rejected", timeout=20)
    assert "routes.mdb-lock: is a symbolic link" in text, text
    assert_untouched(victim)
    assert alive(m.pid)
    m.wait_ready()                  # the old generation keeps serving
    # a worker forked now (as root until its drop) does not open it at
    # all: workers read the master's snapshot (router.h, TRUST)
    pid = wait_for(lambda: workers(m.pid), what="workers")[0]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len([p for p in workers(m.pid) if p != pid]) == 2,
             what="the worker respawned")
    assert_untouched(victim)


def test_spool_tmp_symlink_not_followed(mtad_factory, workdir):
    m = mtad_factory()
    pw = pwd.getpwnam(USER)
    os.mkdir(m.spool, 0o700)
    os.chown(m.spool, pw.pw_uid, pw.pw_gid)
    victim_dir = os.path.join(workdir, "rootdir")
    os.mkdir(victim_dir, 0o700)
    victim = victim_file(victim_dir, "keep")
    os.symlink(victim_dir, os.path.join(m.spool, "tmp"))
    start_fails(m, "spool.dir", "tmp: is a symbolic link")
    st = os.stat(victim_dir)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    assert_untouched(victim)


def test_spool_precreated_0777_by_nobody_refused(mtad_factory):
    m = mtad_factory()
    os.mkdir(m.spool)
    os.chmod(m.spool, 0o777)
    os.chown(m.spool, NOBODY, NOBODY)
    start_fails(m, "spool.dir", "owned by uid %d" % NOBODY)
    st = os.stat(m.spool)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o777)
    assert os.listdir(m.spool) == []


def test_spool_with_open_mode_refused(mtad_factory):
    pw = pwd.getpwnam(USER)
    m = mtad_factory()
    os.mkdir(m.spool)
    os.chmod(m.spool, 0o777)
    os.chown(m.spool, pw.pw_uid, pw.pw_gid)
    start_fails(m, "spool.dir", "mode 0777")


def test_pid_file_symlink_not_followed(mtad_factory, workdir):
    m = mtad_factory()
    victim = victim_file(workdir)
    os.symlink(victim, m.pid_file)
    start_fails(m, "server.pid_file", "is a symbolic link")
    assert_untouched(victim)


def test_control_socket_regular_file_left_alone(mtad_factory, workdir):
    m = mtad_factory()
    victim_file(workdir, "control.sock")
    start_fails(m, "server.control_socket", "not a socket; left alone")
    assert_untouched(m.sock)


def test_control_socket_in_worker_writable_dir_refused(mtad_factory,
                                                       workdir):
    m = mtad_factory()
    d = os.path.join(workdir, "run")
    os.mkdir(d)
    pw = pwd.getpwnam(USER)
    os.chown(d, pw.pw_uid, pw.pw_gid)
    m.cfg["server"]["control_socket"] = os.path.join(d, "control.sock")
    m.write_config()
    start_fails(m, "server.control_socket", "directory owned by uid %d"
                % pw.pw_uid)
    assert os.listdir(d) == []


def test_routes_dir_writable_by_workers_refused(mtad_factory, workdir):
    m = mtad_factory()
    d = os.path.join(workdir, "lib")
    os.mkdir(d)
    os.chown(d, 0, pwd.getpwnam(USER).pw_gid)
    os.chmod(d, 0o775)
    m.cfg["routes"]["db"] = os.path.join(d, "routes.mdb")
    m.write_config()
    start_fails(m, "routes.db", "writable by group")
    assert os.listdir(d) == []


# ---- finding 5 ----------------------------------------------------------

CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("EACCES"); sys.exit(0)
s.sendall(sys.argv[2].encode() + b"\n")
out = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    out += b
print(out.decode().splitlines()[0] if out else "EOF")
"""


def ctl_as(path, cmd, uid, gid, groups=()):
    """One control request from a process with these credentials."""
    r = subprocess.run([sys.executable, "-c", CLIENT, path, cmd], user=uid,
                       group=gid, extra_groups=list(groups),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_control_socket_refuses_worker_user(mtad_factory):
    m = mtad_factory().start()
    pw = pwd.getpwnam(USER)
    st = os.stat(m.sock)
    assert stat.S_ISSOCK(st.st_mode)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)
    assert ctl_as(m.sock, "stop", pw.pw_uid, pw.pw_gid) == "EACCES"
    # Past the file mode (as if it were opened up), the credential check
    # still refuses the workers' user.
    os.chmod(m.sock, 0o666)
    assert ctl_as(m.sock, "stop", pw.pw_uid, pw.pw_gid) == \
        "error: permission denied"
    m.wait_log("control: refused uid=%d" % pw.pw_uid)
    assert alive(m.pid)
    assert m.ctl("status").returncode == 0      # root works


def test_control_socket_admin_group(mtad_factory, admin_gid):
    m = mtad_factory({"server": {"admin_group": ADMIN_GROUP}}).start()
    st = os.stat(m.sock)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == \
        (0, admin_gid, 0o660)
    # a supplementary member, and a primary one
    assert ctl_as(m.sock, "status", NOBODY, NOBODY, [admin_gid]) == "ok"
    assert ctl_as(m.sock, "status", NOBODY, admin_gid) == "ok"
    os.chmod(m.sock, 0o666)
    assert ctl_as(m.sock, "status", NOBODY, NOBODY) == \
        "error: permission denied"
    pw = pwd.getpwnam(USER)
    assert ctl_as(m.sock, "status", pw.pw_uid, pw.pw_gid) == \
        "error: permission denied"
    assert m.ctl("status").returncode == 0


def test_admin_group_must_not_hold_the_workers(mtad_factory):
    m = mtad_factory({"server": {"admin_group": "mtad"}})
    start_fails(m, "server.admin_group", "must not be a group of server.user")


def routes_fd_flags(pid, db):
    """Open flags of pid's descriptor on db, or None (not open yet)."""
    fdd = "/proc/%d/fd" % pid
    try:
        fds = os.listdir(fdd)
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(os.path.join(fdd, fd)) != db:
                continue
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                line = [ln for ln in f if ln.startswith("flags:")][0]
        except (OSError, IndexError):
            continue
        return int(line.split()[1], 8)
    return None


def test_workers_open_routes_read_only(mtad_factory):
    m = mtad_factory().start()
    db = os.path.realpath(os.path.join(m.dir, "routes.mdb"))
    snap = os.path.join(db + ".snapshot", "routes.mdb")

    def both():
        pids = workers(m.pid)
        flags = [routes_fd_flags(p, snap) for p in pids]
        return len(pids) == 2 and None not in flags and (pids, flags)
    pids, flags = wait_for(both, what="the snapshot open in both workers")
    for f in flags:
        assert f & os.O_ACCMODE == os.O_RDONLY, oct(f)
    # the live table and its lock file are root's alone
    for p in pids:
        assert routes_fd_flags(p, db) is None
        assert routes_fd_flags(p, db + "-lock") is None
    for path in (db, db + "-lock"):
        st = os.stat(path)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600), path
    st = os.stat(snap)
    assert (st.st_gid, stat.S_IMODE(st.st_mode)) == \
        (pwd.getpwnam(USER).pw_gid, 0o640)
