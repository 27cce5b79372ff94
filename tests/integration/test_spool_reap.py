"""Delivered messages' files closed off the loop on a disk spool
(spool/spool_reap.c): on ext4 with "discard" the last close() of a
removed file waits for the device, so a worker hands it to a helper
thread.  Checked: every file is closed (the workers hold no descriptor
per delivered message), every message arrives once, and a tmpfs spool
gets no such thread."""

import os
import shutil
import tempfile

import pytest

from mtadtest import make_message, wait_for, workers


def fs_type(path):
    """The file system type of path, from /proc/self/mounts (longest
    mount point that holds it)."""
    path = os.path.realpath(path)
    best, kind = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, typ = line.split()[:3]
            mnt = mnt.replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and \
                    len(mnt) >= len(best):
                best, kind = mnt, typ
    return kind


@pytest.fixture
def disk_dir():
    d = tempfile.mkdtemp(prefix="mtad-reap-", dir="/var/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def open_files(pid, under):
    """Descriptors of pid open on a path under `under` (deleted files
    show as "PATH (deleted)")."""
    n = 0
    fdd = "/proc/%d/fd" % pid
    for fd in os.listdir(fdd):
        try:
            t = os.readlink(os.path.join(fdd, fd))
        except OSError:
            continue
        if t.startswith(under):
            n += 1
    return n


def nthreads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def relay(m, sink, n):
    s = m.smtp(timeout=30)
    s.ehlo("client.test")
    for k in range(n):
        s.sendmail("a@example.org", ["b%d@example.net" % k],
                   make_message(k, b""))
    s.quit()
    sink.wait_for(n, timeout=60)


def test_disk_spool_closes_every_delivered_file(mtad_factory, sink,
                                                disk_dir):
    if fs_type(disk_dir) in ("tmpfs", "ramfs", ""):
        pytest.skip("/var/tmp is not on a disk file system here")
    spool = os.path.join(disk_dir, "spool")
    m = mtad_factory({"spool": {"dir": spool},
                      "routes": {"default": sink.route}}).start()
    ws = wait_for(lambda: len(workers(m.pid)) == 2 and workers(m.pid),
                  what="two workers")
    relay(m, sink, 300)
    assert len(sink.received()) == 300
    # every message removed from queue/ once delivered ...
    wait_for(lambda: m.queue_ids() == [], what="an empty queue")
    # ... and its file closed: by the helper thread, soon after
    wait_for(lambda: all(open_files(p, spool + "/queue/") == 0 for p in ws),
             what="no queue file held open by a worker")
    # the worker that delivered made its helper thread (no sync thread:
    # spool.fsync is off), and none was killed by its sandbox
    assert set(workers(m.pid)) == set(ws)
    assert max(nthreads(p) for p in ws) == 2
    assert "sandbox" not in m.stderr_text()


def test_tmpfs_spool_closes_inline_without_a_thread(mtad_factory, sink):
    m = mtad_factory({"routes": {"default": sink.route}}).start()
    assert fs_type(m.spool) == "tmpfs"
    ws = wait_for(lambda: len(workers(m.pid)) == 2 and workers(m.pid),
                  what="two workers")
    relay(m, sink, 50)
    wait_for(lambda: m.queue_ids() == [], what="an empty queue")
    assert all(open_files(p, m.spool + "/queue/") == 0 for p in ws)
    assert all(nthreads(p) == 1 for p in ws)
