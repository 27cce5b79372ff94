"""mtad-sendmail as /usr/sbin/sendmail: the message it makes of what it is
given, recipients over several transactions, and a user who may not read
relay.yaml (the installed case) submitting through the master's hint."""
import os
import pwd
import re
import stat
import subprocess

import pytest

from mtadtest import IS_ROOT, MTACTL, read_queue_file, wait_for

SENDMAIL = os.path.join(os.path.dirname(MTACTL), "mtad-sendmail")


def queued(m, n):
    wait_for(lambda: len(m.queue_ids()) == n, what="%d queued" % n)
    return [read_queue_file(os.path.join(m.spool, "queue", q))
            for q in m.queue_ids()]


def header_and_body(body):
    """The message as the spool holds it, without mtad's Received: line."""
    head, sep, rest = body.partition(b"\r\n\r\n")
    assert sep, body
    return head.split(b"\r\n"), rest


def test_plain_body_gets_an_empty_line_date_and_message_id(mtad_factory,
                                                           hole):
    """A body piped in without headers: From:, Date: and Message-ID: are
    added and then the empty line, so the body stays the body (the old
    code put 'plain body' in the header section, right after From:)."""
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "a@remote.test"],
                       input=b"plain body\nTo: not@a.header\n",
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (env, body), = queued(m, 1)
    head, rest = header_and_body(body)
    assert rest == b"plain body\r\nTo: not@a.header\r\n", body
    names = [h.split(b":")[0].lower() for h in head if h[:1] not in b" \t"]
    for want in (b"from", b"date", b"message-id"):
        assert names.count(want) == 1, (want, head)
    uid = os.getuid()
    assert any(re.match(rb"Received: by \S+ \(mtad-sendmail, from userid "
                        rb"%d\);" % uid, h) for h in head), head
    date = [h for h in head if h.startswith(b"Date: ")][0]
    assert re.match(rb"Date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d "
                    rb"[+-]\d{4}$", date), date
    mid = [h for h in head if h.startswith(b"Message-ID: ")][0]
    assert re.match(rb"Message-ID: <\d{14}\.[0-9a-f]{16}@mx\.test\.example>$",
                    mid), mid


def test_a_full_name_with_specials_is_one_quoted_name(mtad_factory, hole):
    """-F goes into the From: added as its display name: with a '<', ','
    or '"' in it (a name a web form passed on) it is one quoted string,
    not an address of its own; a plain name stays as it is."""
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    cases = ((b'Eve <root@evil.test>, "Bob\\"',
              b'"Eve <root@evil.test>, \\"Bob\\\\\\""'),
             (b"Ann Lee", b"Ann Lee"))
    for name, _ in cases:
        r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-f", "me@home.test",
                            "-F", name, "a@remote.test"],
                           input=b"Subject: s\n\nhi\n", capture_output=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
    froms = sorted(h for _, body in queued(m, 2)
                   for h in header_and_body(body)[0] if h.startswith(b"From: "))
    assert froms == sorted(b"From: " + shown + b" <me@home.test>"
                           for _, shown in cases), froms


def test_header_section_ends_at_a_line_that_is_no_field(mtad_factory, hole):
    """Headers, then a body line without the empty line: the empty line
    is put in; a Date: and Message-ID: given are kept and not doubled;
    -t reads no To: from the body."""
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    msg = (b"Subject: s\nDate: Mon, 1 Jan 2024 00:00:00 +0000\n"
           b"Message-ID: <given@x>\nthe body\nCc: c@remote.test\n")
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-t", "a@remote.test"],
                       input=msg, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (env, body), = queued(m, 1)
    assert [x.split(b" ")[1] for x in env["rcpt"]] == [b"a@remote.test"]
    head, rest = header_and_body(body)
    assert rest == b"the body\r\nCc: c@remote.test\r\n", body
    assert head.count(b"Message-ID: <given@x>") == 1, head
    assert sum(h.startswith(b"Date:") for h in head) == 1, head
    assert sum(h.startswith(b"Message-ID:") for h in head) == 1, head


def test_t_recipients_over_the_limit_go_in_more_transactions(mtad_factory,
                                                             hole):
    """More recipients than limits.max_recipients: the server's 452 ends
    a transaction, the rest follow in the next (the old code exited 75
    at the first 452, on every try)."""
    m = mtad_factory({"routes": {"default": hole.route()},
                      "limits": {"max_recipients": 3}})
    m.start()
    rcpts = ["r%d@remote.test" % i for i in range(8)]
    msg = ("To: %s\nSubject: many\n\nhi\n" % ", ".join(rcpts)).encode()
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "-t"], input=msg,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = queued(m, 3)
    counts = sorted(len(env["rcpt"]) for env, _ in got)
    assert counts == [2, 3, 3], counts
    every = sorted(x.split(b" ")[1].decode() for env, _ in got
                   for x in env["rcpt"])
    assert every == sorted(rcpts)


def _in_installed_layout(m, workdir, argv, msg, run_dir=None):
    """Run argv as 'nobody' in a private mount namespace where /run/mtad is
    the test's runtime directory (the master wrote its hint there) and
    /etc/mtad/relay.yaml, when there is an /etc/mtad, is root's 0640 file
    as the package installs it."""
    run = os.path.join(workdir, "run")
    os.makedirs(run, exist_ok=True)
    etc = os.path.join(workdir, "etc")
    os.makedirs(etc, exist_ok=True)
    with open(os.path.join(etc, "relay.yaml"), "w") as f:
        f.write("server: {listen: ['127.0.0.1:1']}\n")
    os.chmod(os.path.join(etc, "relay.yaml"), 0o640)
    script = ("set -e; mount -t tmpfs tmpfs /run; mkdir /run/mtad; "
              "mount --bind %s /run/mtad; "
              "if [ -d /etc/mtad ]; then mount --bind %s /etc/mtad; fi; "
              "exec setpriv --reuid=nobody --regid=nogroup --clear-groups "
              "--inh-caps=-all -- \"$@\"" % (run_dir or os.path.dirname(m.sock),
                                               etc))
    return subprocess.run(["unshare", "-m", "--propagation", "private",
                           "sh", "-c", script, "sh", *argv], input=msg,
                          capture_output=True, timeout=60)


@pytest.mark.skipif(not IS_ROOT, reason="changes user and mounts")
def test_a_user_who_cannot_read_relay_yaml_submits(mtad_factory, workdir,
                                                   sink):
    """As 'nobody', with no -C and no -S and relay.yaml unreadable: the
    master's hint (world-readable, next to the control socket) names the
    listener; the message is delivered with nobody's name as the sender
    and nobody's uid in Received:.  Nobody can do no more than that: not
    read the spool, not reach the control socket, not write the hint."""
    os.chmod(workdir, 0o755)    # mtad's own modes must keep nobody out
    m = mtad_factory({"routes": {"default": sink.route}})
    m.start()
    hint = os.path.join(os.path.dirname(m.sock), "submit")
    st = os.stat(hint)
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == 0
    with open(hint) as f:
        text = f.read()
    assert "listen 127.0.0.1:%d\n" % m.port in text, text
    assert "hostname mx.test.example\n" in text, text
    nobody = pwd.getpwnam("nobody")
    r = _in_installed_layout(m, workdir, [SENDMAIL, "a@remote.test"],
                             b"Subject: cron\n\nhi\n")
    assert r.returncode == 0, r.stderr
    got, = sink.wait_for(1)
    assert got.mail_from == "nobody@mx.test.example", got.mail_from
    assert b"(mtad-sendmail, from userid %d)" % nobody.pw_uid in got.data
    assert got.data.endswith(b"\r\n\r\nhi\r\n"), got.data
    probe = ("import os, socket, sys\n"
             "fails = 0\n"
             "for f in (lambda: os.listdir(sys.argv[1]),\n"
             "          lambda: open(sys.argv[2], 'a'),\n"
             "          lambda: socket.socket(socket.AF_UNIX)"
             ".connect(sys.argv[3])):\n"
             "    try:\n"
             "        f()\n"
             "    except PermissionError:\n"
             "        fails += 1\n"
             "print(fails)\n")
    r = _in_installed_layout(m, workdir, ["/usr/bin/python3", "-c", probe,
                                          os.path.join(m.spool, "queue"),
                                          "/run/mtad/submit", m.sock], b"")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == b"3", (r.stdout, r.stderr)


@pytest.mark.skipif(not IS_ROOT, reason="changes user and mounts")
def test_a_hint_another_user_could_write_is_refused(mtad_factory, workdir):
    """With mtad down a local user might plant /run/mtad/submit (or make
    its directory theirs) to take other users' mail: the hint is used
    only when root (or the caller) owns it and its directory and nobody
    else may write them.  Each planted hint names the live listener, so
    only the check keeps the message from being queued."""
    m = mtad_factory()
    m.start()
    with open(os.path.join(os.path.dirname(m.sock), "submit")) as f:
        text = f.read()
    cases = (("owned by another user", 0o755, 4242, 0o644),
             ("writable by anyone", 0o755, 0, 0o666),
             ("in a directory of another user", 0o755, 0, 0o644))
    for i, (what, dmode, fuid, fmode) in enumerate(cases):
        run = os.path.join(workdir, "planted%d" % i)
        os.mkdir(run)
        os.chmod(run, dmode)
        if what.startswith("in a directory"):
            os.chown(run, 4242, 4242)
        hint = os.path.join(run, "submit")
        with open(hint, "w") as f:
            f.write(text)
        os.chown(hint, fuid, fuid)
        os.chmod(hint, fmode)
        r = _in_installed_layout(m, workdir, [SENDMAIL, "a@remote.test"],
                                 b"Subject: s\n\nhi\n", run_dir=run)
        assert r.returncode == 75, (what, r.returncode, r.stderr)
        assert b"message not sent" in r.stderr, (what, r.stderr)
    assert m.queue_ids() == [], m.queue_ids()


def test_an_mbox_from_line_in_front_is_dropped(mtad_factory, hole):
    """'From sender date' before the headers (mbox style) is dropped, as
    Postfix's sendmail does: the headers after it stay headers."""
    m = mtad_factory({"routes": {"default": hole.route()}})
    m.start()
    r = subprocess.run([SENDMAIL, "-C", m.cfg_path, "a@remote.test"],
                       input=b"From app Thu Dec  3 10:00:00 2026\n"
                             b"Subject: s\n\nbody\n",
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (env, body), = queued(m, 1)
    head, rest = header_and_body(body)
    assert b"Subject: s" in head and rest == b"body\r\n", body
    assert b"From app" not in body


def test_the_hint_follows_reload_and_goes_at_stop(mtad_factory):
    """The master rewrites the hint at a reload (a new listener, a new
    host name) and removes it at stop: a stale one would send mail to an
    address nothing or something else listens on."""
    m = mtad_factory()
    m.start()
    hint = os.path.join(os.path.dirname(m.sock), "submit")
    with open(hint) as f:
        assert "hostname mx.test.example\n" in f.read()
    m.cfg["server"]["hostname"] = "other.test.example"
    m.write_config()
    m.ctl("reload", check=True)
    with open(hint) as f:
        text = f.read()
    assert "hostname other.test.example\n" in text, text
    assert "listen 127.0.0.1:%d\n" % m.port in text, text
    m.stop()
    assert not os.path.exists(hint)
