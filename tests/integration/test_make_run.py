"""make run (the Makefile, mk/runconf.sh): mtad on var/run.yaml, which is
CONFIG (default the tracked relay.yaml) with spool.dir one of the
checkout's own and, with PORT, listen on 127.0.0.1:PORT, so that neither
needs an edit of relay.yaml.  make run itself runs in a copy of the tree."""
import os
import re
import shutil
import signal
import smtplib
import subprocess

import pytest

from mtadtest import (IS_ROOT, ROOT, free_port, greet, make_in, tree_copy,
                      wait_for)

RUNCONF = os.path.join(ROOT, "mk", "runconf.sh")
SPOOL_RE = r"spool\.dir (/dev/shm/mtad-\d+/spool)"


def runconf(tmp_path, text, spool="/dev/shm/x/spool", port=""):
    cfg = tmp_path / "in.yaml"
    cfg.write_text(text)
    return subprocess.run(["sh", RUNCONF, str(cfg), spool, port],
                          capture_output=True, text=True, timeout=30)


def spool_of_checkout(root):
    """The spool `make run` would use in root (make -n runs nothing)."""
    r = make_in(root, "-n", "run")
    assert r.returncode == 0, r.stdout + r.stderr
    return re.search(SPOOL_RE, r.stdout).group(1)


def test_make_run_port_config_and_own_spool(tmp_path):
    tree = tree_copy(str(tmp_path / "tree"), binaries=True)
    with open(os.path.join(tree, "relay.yaml")) as f:
        tracked = f.read()
    mine = os.path.join(tree, "my.local.yaml")
    with open(mine, "w") as f:
        f.write(tracked.replace("# hostname: mx1.example.net",
                                "hostname: run.example.test"))
    port = free_port()
    spool = spool_of_checkout(tree)
    assert spool != spool_of_checkout(ROOT), "two checkouts, one spool"
    assert not os.path.exists(os.path.dirname(spool)), spool
    log = open(tmp_path / "run.log", "w+")
    proc = make_in(tree, "run", "PORT=%d" % port, "CONFIG=my.local.yaml",
                   stdout=log, stderr=subprocess.STDOUT,
                   start_new_session=True)

    def text():
        log.seek(0)
        return log.read()
    try:
        def greets():
            try:
                return b"run.example.test" in greet(port, timeout=2)[1]
            except OSError:
                return False
        wait_for(lambda: proc.poll() is not None or greets(), timeout=60,
                 what="make run's mtad greeting")
        assert proc.poll() is None, text()
        assert "spool.dir %s and listen 127.0.0.1:%d" % (spool, port) \
            in text(), text()
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as c:
            c.sendmail("a@example.org", ["you@example.org"],
                       b"Subject: make run\r\n\r\nhello\r\n")
        new = os.path.join(tree, "var", "Maildir", "new")
        wait_for(lambda: os.path.isdir(new) and os.listdir(new),
                 what="the message in var/Maildir/new")
        if IS_ROOT:         # the master's rule for the spool's parent
            st = os.stat(os.path.dirname(spool))
            assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o755), st
        with open(os.path.join(tree, "var", "run.yaml")) as f:
            run_yaml = f.read()
        assert 'dir: "%s"' % spool in run_yaml
        assert 'listen: ["127.0.0.1:%d"]' % port in run_yaml
        assert "hostname: run.example.test" in run_yaml
        with open(os.path.join(tree, "relay.yaml")) as f:
            assert f.read() == tracked, "make run changed relay.yaml"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)      # Ctrl-C
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        shutil.rmtree(os.path.dirname(spool), ignore_errors=True)
    assert "workers stopped; mtad exits" in text(), text()


def test_runconf_block_listen_and_missing_sections(tmp_path):
    r = runconf(tmp_path, "server:\n"
                "    workers: 2\n"
                "    listen:\n"
                "    - \"0.0.0.0:25\"\n"
                "    - address: \"0.0.0.0:26\"\n"
                "      proxy_protocol: v2\n"
                "    pid_file: ./var/mtad.pid\n"
                "log:\n  level: info\n", port="2600")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("server:\n"
                        "    workers: 2\n"
                        "    listen: [\"127.0.0.1:2600\"]\n"
                        "    pid_file: ./var/mtad.pid\n"
                        "log:\n  level: info\n"
                        "spool:\n  dir: \"/dev/shm/x/spool\"\n"), r.stdout


def test_runconf_without_port_keeps_listen(tmp_path):
    text = "server:\n  listen: [\"127.0.0.1:2525\"]\nspool:\n  fsync: false\n"
    r = runconf(tmp_path, text)
    assert r.returncode == 0, r.stderr
    assert r.stdout == text + "  dir: \"/dev/shm/x/spool\"\n", r.stdout


@pytest.mark.parametrize("text,spool,port,why", [
    ("spool: {dir: /x}\n", "/dev/shm/x/spool", "", "in.yaml:1: spool: written on one line"),
    ("spool:\n  dir: /x\n", "var/spool", "", "SPOOL must be an absolute path"),
    ("spool:\n  dir: /x\n", "/a b", "", "SPOOL: use letters"),
    ("spool:\n  dir: /x\n", "/x", "25x", "PORT is not a number"),
    ("spool:\n  dir: /x\n", "/x", "70000", "PORT must be 1 to 65535"),
])
def test_runconf_refuses(tmp_path, text, spool, port, why):
    r = runconf(tmp_path, text, spool, port)
    assert r.returncode == 2, r.stdout
    assert why in r.stderr, r.stderr
