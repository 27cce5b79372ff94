"""The package test driven by test_deb.sh: install, run, relay, purge.

Every wait is bounded and raises on timeout; mtad is stopped by its pid and
the package purged whatever happens (try/finally).
"""
import grp
import os
import pwd
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
    conff = run("dpkg-query", "-W", "-f=${Conffiles}", "mtad").stdout
    assert CONF in conff, conff
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


def main(deb):
    port, mport = free_port(), free_port()
    sink = Sink().start()
    pid = None
    try:
        run("dpkg", "-i", deb)
        check_installed()
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
    for gone in ("/usr/sbin/mtad", "/usr/sbin/mtactl", CONF,
                 "/lib/systemd/system/mtad.service", "/var/lib/mtad"):
        assert not os.path.exists(gone), gone + " left after purge"
    r = run("dpkg-query", "-W", "-f=${Status}", "mtad", check=False)
    assert "installed" not in r.stdout.replace("not-installed", ""), r.stdout
    print("test_deb: ok: installed, relayed one message, stopped, purged")


if __name__ == "__main__":
    main(sys.argv[1])
