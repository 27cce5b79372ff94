"""A compromised worker cannot freeze the master, mtactl or the other
workers through the routes table.

LMDB's lock file holds process-shared mutexes (the reader mutex at offset
8, the writer mutex at offset 64); a process that maps it writable can
take one with a plain store, no system call, and every other user of the
file then waits in futex_wait for good.  The attack here is what a worker
could do: every file of the routes directory that a worker holds open for
writing or maps shared and writable gets a live owner's tid stored at both
offsets (a pwrite lands in the same pages the worker maps), and every file
there that the workers' user can open for writing by name gets the same.
Afterwards the master must still reload, mtactl must still add and get
routes and read the status, each within a bound, and mail must still be
delivered by the route just added.
"""
import os
import pwd
import struct
import subprocess
import sys

import pytest

from mtadtest import MTACTL, make_message, send, workers

USER = "mtad"
BOUND = 15                          # seconds for each answer

# As the workers' user: open every file below the directory for writing
# and take both mutexes; print what could be opened that way.
AS_WORKER = r"""
import os, struct, sys
opened = []
for root, dirs, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(root, f)
        try:
            fd = os.open(p, os.O_RDWR)
        except OSError:
            continue
        opened.append(p)
        if os.fstat(fd).st_size >= 72:
            os.pwrite(fd, struct.pack("<I", os.getpid()), 8)
            os.pwrite(fd, struct.pack("<I", os.getpid()), 64)
        os.close(fd)
print("\n".join(opened))
"""


def writable_files(pid, under):
    """Files below under that pid has open for writing or maps shared and
    writable: what it can store into."""
    found = set()
    fddir = "/proc/%d/fd" % pid
    for fd in os.listdir(fddir):
        try:
            path = os.readlink(os.path.join(fddir, fd))
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                flags = int(f.read().split("flags:")[1].split()[0], 8)
        except (OSError, IndexError):
            continue
        if path.startswith(under + "/") and flags & os.O_ACCMODE:
            found.add(path)
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip().startswith(under + "/") \
                    and parts[1][1] == "w" and parts[1][3] == "s":
                found.add(parts[5].strip())
    return found


def take_mutexes(path, owner):
    """Store owner (a live tid) into both lock words, as a plain atomic
    store from inside the worker would."""
    with open(path, "r+b") as f:
        if os.fstat(f.fileno()).st_size >= 72:
            os.pwrite(f.fileno(), struct.pack("<I", owner), 8)
            os.pwrite(f.fileno(), struct.pack("<I", owner), 64)


def ctl(m, *args):
    """mtactl within BOUND seconds: a hang is a failure, not a wait."""
    try:
        return subprocess.run([MTACTL, "-c", m.cfg_path, *args],
                              capture_output=True, text=True, timeout=BOUND)
    except subprocess.TimeoutExpired:
        raise AssertionError("mtactl %s: no answer within %d s (blocked on "
                             "the routes lock?)" % (" ".join(args), BOUND))


def test_worker_cannot_block_master_mtactl_or_lookups(mtad_factory, workdir,
                                                     sink_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root: the workers run as another user")
    sink = sink_factory()
    rdir = os.path.join(workdir, "routes")
    m = mtad_factory({"routes": {"db": os.path.join(rdir, "routes.mdb")}})
    m.start()
    pids = workers(m.pid)
    assert pids
    attacked = set()
    for pid in pids:
        for path in writable_files(pid, rdir):
            take_mutexes(path, pid)     # pid stays alive: owner never dies
            attacked.add(path)
    pw = pwd.getpwnam(USER)
    r = subprocess.run([sys.executable, "-c", AS_WORKER, rdir],
                       user=pw.pw_uid, group=pw.pw_gid, capture_output=True,
                       text=True, timeout=BOUND)
    assert r.returncode == 0, r.stderr
    by_name = [p for p in r.stdout.splitlines() if p]

    r = ctl(m, "reload")
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = ctl(m, "route", "add", "lock.example", sink.route)
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = ctl(m, "route", "get", "u@lock.example")
    assert r.returncode == 0 and sink.route in r.stdout, (r.stdout, r.stderr)
    r = ctl(m, "status")
    assert r.returncode == 0, (r.stdout, r.stderr)

    # the route added after the attack is the one delivery uses
    send(m, "a@client.example", ["u@lock.example"], make_message(1))
    assert len(sink.wait_for(1, timeout=BOUND)) == 1
    # nothing of the routes table was a worker's to write
    assert attacked == set() and by_name == [], (attacked, by_name)
    assert m.proc.poll() is None
