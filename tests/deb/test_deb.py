"""The package test driven by test_deb.sh: install, run, relay, purge.

Every wait is bounded and raises on timeout; mtad is stopped by its pid and
the package purged whatever happens (try/finally).
"""
import grp
import os
import pwd
import re
import shutil
import signal
import smtplib
import socket
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from sink import Sink  # noqa: E402

CONF = "/etc/mtad/relay.yaml"
EXAMPLE = "/etc/mtad/relay.yaml.example"
LOGROTATE = "/etc/logrotate.d/mtad"
TOP = os.path.join(HERE, "..", "..")
WANTS = "/etc/systemd/system/multi-user.target.wants/mtad.service"
# the commands postinst_calls() replaces by stubs
STUBBED = ("systemctl", "deb-systemd-helper", "deb-systemd-invoke",
           "systemd-sysusers", "systemd-tmpfiles")


def run(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError("%s: rc=%d\n%s%s" % (" ".join(cmd), r.returncode,
                                                   r.stdout, r.stderr))
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(pred, what, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))


def log_of(f):
    """What mtad wrote to the unnamed stderr file f."""
    f.seek(0)
    return f.read().decode(errors="replace")


def greets(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.settimeout(2)
            return s.recv(512).startswith(b"220")
    except OSError:
        return False


def check_installed():
    for path in ("/usr/sbin/mtad", "/usr/sbin/mtactl",
                 "/usr/sbin/mtad-sendmail"):
        assert os.access(path, os.X_OK), path
    for path in ("/lib/systemd/system/mtad.service",
                 "/usr/lib/sysusers.d/mtad.conf",
                 "/usr/lib/tmpfiles.d/mtad.conf",
                 "/usr/share/man/man8/mtad.8.gz",
                 "/usr/share/man/man8/mtactl.8.gz",
                 "/usr/share/man/man5/relay.yaml.5.gz"):
        assert os.path.isfile(path), path
    # the example relay.yaml(5) points to, and the logrotate snippet
    for path, src in ((EXAMPLE, "packaging/relay.yaml.example"),
                      (LOGROTATE, "packaging/logrotate/mtad"),
                      ("/etc/mtad/bounce-classes.conf.example",
                       "packaging/bounce-classes.conf")):
        with open(path) as f, open(os.path.join(TOP, src)) as g:
            assert f.read() == g.read(), path
    conff = run("dpkg-query", "-W", "-f=${Conffiles}", "mtad").stdout
    for path in (CONF, EXAMPLE, LOGROTATE):
        assert path + " " in conff, (path, conff)
    fields = run("dpkg-query", "-W", "-f=${Maintainer}\n${Homepage}\n",
                 "mtad").stdout.split("\n")
    assert re.fullmatch(r"[^<>]+ <[^<>@ ]+@[^<>@ ]+\.[^<>@ .]+>", fields[0]) \
        and "localhost" not in fields[0], fields
    assert fields[1] == "" or (fields[1].startswith("https://") and
                               "localhost" not in fields[1]), fields
    pw = pwd.getpwnam("mtad")               # sysusers.d made the user
    # tmpfiles.d made the dirs: root's where the master keeps its files
    # (it refuses a directory the workers could change), the workers' spool
    for d, uid, mode in (("/var/lib/mtad", 0, 0o755), ("/run/mtad", 0, 0o755),
                         ("/run/mtad/spool", pw.pw_uid, 0o700)):
        st = os.stat(d)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, mode), \
            (d, st.st_uid, oct(st.st_mode))
    st = os.stat(CONF)
    assert st.st_gid == grp.getgrnam("mtad").gr_gid, st
    assert stat.S_IMODE(st.st_mode) == 0o640, oct(st.st_mode)
    if shutil.which("systemd-analyze"):
        r = run("systemd-analyze", "verify", "/lib/systemd/system/mtad.service",
                check=False)
        assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    else:
        print("test_deb: systemd-analyze absent: unit not verified")


def postinst_calls(args, systemd, was_enabled=True):
    """The commands of STUBBED that the installed postinst runs for ARGS,
    with or without a running systemd: in a mount namespace of its own,
    whose /run is an empty tmpfs (holding /run/systemd/system when
    systemd), with stubs that log their arguments in front of PATH, so
    that no unit of this machine is touched."""
    with tempfile.TemporaryDirectory() as d:
        calls = os.path.join(d, "calls")
        for c in STUBBED:
            with open(os.path.join(d, c), "w") as f:
                f.write('#!/bin/sh\necho "%s $*" >> %s\n'
                        'case "$*" in *was-enabled*) exit %d ;; esac\n'
                        % (c, calls, 0 if was_enabled else 1))
            os.chmod(os.path.join(d, c), 0o755)
        run("unshare", "-m", "sh", "-c",
            "mount --make-rprivate / && mount -t tmpfs tmpfs /run && "
            + ("mkdir -p /run/systemd/system && " if systemd else "")
            + 'PATH=%s:$PATH exec sh /var/lib/dpkg/info/mtad.postinst "$@"' % d,
            "postinst", *args)
        if not os.path.exists(calls):
            return []
        with open(calls) as f:
            return f.read().splitlines()


def check_postinst():
    """An upgrade (configure OLD-VERSION) restarts a running mtad under
    systemd, after the daemon-reload; a first install does not start it,
    and without systemd nothing is restarted.  An admin's disable stays."""
    restart = "deb-systemd-invoke try-restart mtad.service"
    reload_ = "systemctl --system daemon-reload"
    enable = "deb-systemd-helper enable mtad.service"
    up = postinst_calls(["configure", "0.0.1"], systemd=True)
    assert restart in up and up.index(reload_) < up.index(restart), up
    first = postinst_calls(["configure", ""], systemd=True)
    assert enable in first and reload_ in first, first
    assert not [c for c in first if "try-restart" in c or " start" in c], first
    bare = postinst_calls(["configure", "0.0.1"], systemd=False)
    assert enable in bare, bare
    assert not [c for c in bare if c.startswith(("systemctl", "deb-systemd-invoke"))], bare
    off = postinst_calls(["configure", "0.0.1"], systemd=True, was_enabled=False)
    assert enable not in off and restart in off, off


def main(deb):
    port, mport = free_port(), free_port()
    sink = Sink().start()
    pid = None
    try:
        run("dpkg", "-i", deb)
        check_installed()
        check_postinst()
        with open(CONF) as f:
            text = f.read()
        # The packaged file, pointed at loopback ports and at the sink.
        text = text.replace('listen: ["127.0.0.1:2525"]',
                            'listen: ["127.0.0.1:%d"]' % port)
        text = text.replace('"smtp:[smarthost.example.net]:25"',
                            '"%s"' % sink.route)
        assert str(port) in text and sink.route in text, "relay.yaml changed"
        text += "\nmetrics:\n  listen: \"127.0.0.1:%d\"\n" % mport
        with open(CONF, "w") as f:
            f.write(text)
        run("/usr/sbin/mtad", "-t", "-c", CONF)
        # log.file "-": the log goes to stderr, a file (a pipe could fill);
        # an unnamed one: a fixed name in /tmp is a link any user may plant
        err = tempfile.TemporaryFile()
        proc = subprocess.Popen(["/usr/sbin/mtad", "-f", "-c", CONF],
                                stdout=subprocess.DEVNULL, stderr=err)
        pid = proc.pid
        wait(lambda: proc.poll() is not None or greets(port), "the greeting")
        assert proc.poll() is None, log_of(err)
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as c:
            c.sendmail("pkg@example.org", ["someone@example.net"],
                       b"Subject: from the package\r\n\r\nhello\r\n")
        msgs = sink.wait_for(1, timeout=20)
        assert b"from the package" in msgs[0].data
        st = run("/usr/sbin/mtactl", "-c", CONF, "status").stdout
        assert "msgs_out=1" in st, st
        # a local user, who may not read relay.yaml (root:mtad 0640), and
        # an unprivileged mtad-sendmail: the master's /run/mtad/submit
        # names the listener
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                            "--clear-groups", "/usr/sbin/mtad-sendmail",
                            "someone@example.net"], input=b"from nobody\n",
                           capture_output=True, timeout=60, cwd="/")
        assert r.returncode == 0, r.stderr
        msgs = sink.wait_for(2, timeout=20)
        assert any(b"\r\n\r\nfrom nobody\r\n" in x.data for x in msgs)
        os.kill(pid, signal.SIGTERM)
        assert proc.wait(30) == 0, log_of(err)
        pid = None
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        sink.stop()
        run("dpkg", "--purge", "mtad", check=False)
    for gone in ("/usr/sbin/mtad", "/usr/sbin/mtactl", CONF, EXAMPLE,
                 LOGROTATE, WANTS, "/lib/systemd/system/mtad.service",
                 "/var/lib/mtad", "/var/log/mtad"):
        assert not os.path.exists(gone), gone + " left after purge"
    r = run("dpkg-query", "-W", "-f=${Status}", "mtad", check=False)
    assert "installed" not in r.stdout.replace("not-installed", ""), r.stdout
    print("test_deb: ok: installed, relayed one message, stopped, purged")


if __name__ == "__main__":
    main(sys.argv[1])
