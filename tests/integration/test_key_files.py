"""Keys, certificates and the password file are read by the master as root,
by path, at start and at every reload.  Where a less trusted user can
change the directory (the workers' user, anyone), a link put there would
make root read what it names, and a FIFO would hang the master: such
places are refused (safefs_check_read), with the setting and the
directory named.  Links among root's own directories still work, as
certbot's live/ -> archive/ needs."""
import os
import pwd
import subprocess

import pytest

from mtadtest import IS_ROOT, MTAD, USER, Client
from test_privsep import start_fails
from test_tls import make_cert, starttls

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="needs root to own and chown")


def workers_dir(workdir, name):
    """A directory the workers' user owns, as a compromised worker could
    write to."""
    pw = pwd.getpwnam(USER)
    d = os.path.join(workdir, name)
    os.mkdir(d, 0o755)
    os.chown(d, pw.pw_uid, pw.pw_gid)
    return d, pw.pw_uid


def tls_cfg(cert, key):
    return {"server": {"workers": 1}, "tls": {"cert_file": cert, "key_file": key}}


def test_key_in_a_worker_writable_dir_is_refused(mtad_factory, workdir):
    cert, key = make_cert(workdir)
    d, uid = workers_dir(workdir, "keys")
    moved = os.path.join(d, "server.key")
    os.rename(key, moved)
    start_fails(mtad_factory(tls_cfg(cert, moved)), "tls.key_file", moved,
                "owned by uid %d" % uid)


def test_link_into_a_world_writable_dir_is_refused(mtad_factory, workdir):
    cert, key = make_cert(workdir)
    d = os.path.join(workdir, "open")
    os.mkdir(d)
    os.chmod(d, 0o777)                  # no sticky bit: anyone may swap it
    target = os.path.join(d, "server.crt")
    os.rename(cert, target)
    link = os.path.join(workdir, "cert-link.crt")
    os.symlink(target, link)
    start_fails(mtad_factory(tls_cfg(link, key)), "tls.cert_file",
                "writable by anyone")


def test_fifo_as_key_is_refused_without_hanging(mtad_factory, workdir):
    cert, _ = make_cert(workdir)
    fifo = os.path.join(workdir, "fifo.key")
    os.mkfifo(fifo, 0o600)
    # start_fails waits 20 s for mtad to exit: a master blocked on the
    # FIFO's open fails the test
    start_fails(mtad_factory(tls_cfg(cert, fifo)), "tls.key_file", fifo,
                "not a regular file")


def test_certbot_links_between_roots_dirs_work(mtad_factory, workdir):
    cert, key = make_cert(workdir)
    archive = os.path.join(workdir, "archive", "mx")
    live = os.path.join(workdir, "live", "mx")
    os.makedirs(archive, 0o700)
    os.makedirs(live, 0o755)
    for src, name in ((cert, "fullchain1.pem"), (key, "privkey1.pem")):
        os.rename(src, os.path.join(archive, name))
        os.symlink(os.path.join("..", "..", "archive", "mx", name),
                   os.path.join(live, name.replace("1", "")))
    m = mtad_factory(tls_cfg(os.path.join(live, "fullchain.pem"),
                             os.path.join(live, "privkey.pem"))).start()
    with Client(m.port) as c:
        starttls(c)
        assert c.cmd("EHLO client.test").code == 250


def test_dkim_key_in_a_worker_writable_dir_is_refused(mtad_factory, workdir):
    d, uid = workers_dir(workdir, "dkim")
    key = os.path.join(d, "s1.pem")
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key],
                   check=True, capture_output=True, timeout=60)
    m = mtad_factory({"dkim": {"sign": [{"domain": "example.org", "selector": "s1",
                                         "key_file": key,
                                         "algorithm": "ed25519-sha256"}]}})
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0, r.stderr
    assert "dkim.sign[0].key_file '%s'" % key in r.stderr, r.stderr
    assert "owned by uid %d" % uid in r.stderr, r.stderr


def test_password_file_in_a_worker_writable_dir_is_refused(mtad_factory, workdir):
    d, uid = workers_dir(workdir, "auth")
    pw = os.path.join(d, "passwd")
    with open(pw, "w") as f:
        f.write("alice:$6$x$y\n")
    os.chmod(pw, 0o600)
    start_fails(mtad_factory({"auth": {"password_file": pw}}),
                "auth.password_file", "owned by uid %d" % uid)


def workers_ready(m, generation=1):
    m.wait_log("master: ready: generation %d" % generation)
    return m.log_text()


def test_tls_key_readable_by_others_is_warned_at_reload(mtad_factory,
                                                         workdir):
    """A private key nobody else may read: no warning.  Made readable by
    others, the reload (new workers read it again) warns, naming it, like
    auth.password_file; so does a group other than root's or the
    workers'."""
    cert, key = make_cert(workdir)
    os.chmod(key, 0o600)
    m = mtad_factory(tls_cfg(cert, key)).start()
    assert "tls.key_file" not in workers_ready(m)
    os.chmod(key, 0o644)
    assert m.ctl("reload").returncode == 0
    m.wait_log("tls.key_file %s: readable or writable by others "
               "(mode 0644" % key)
    os.chmod(key, 0o640)
    os.chown(key, 0, 65534)
    assert m.ctl("reload").returncode == 0
    m.wait_log("tls.key_file %s: readable or writable by group 65534" % key)


def test_key_of_root_or_the_workers_group_is_not_warned(mtad_factory,
                                                        workdir):
    cert, key = make_cert(workdir)
    os.chmod(key, 0o640)
    os.chown(key, 0, pwd.getpwnam(USER).pw_gid)
    m = mtad_factory(tls_cfg(cert, key)).start()
    assert "tls.key_file" not in workers_ready(m)


def test_dkim_key_readable_by_others_is_warned(mtad_factory, workdir):
    from test_dkim import keygen
    path, _ = keygen(workdir, "example.org", "s1", "ed25519-sha256")
    os.chmod(path, 0o604)
    m = mtad_factory({"server": {"workers": 1},
                      "dkim": {"sign": [{"domain": "example.org",
                                         "selector": "s1",
                                         "key_file": path,
                                         "algorithm": "ed25519-sha256"}]}}).start()
    m.wait_log("dkim.sign[0].key_file %s: readable or writable by others "
               "(mode 0604" % path)
