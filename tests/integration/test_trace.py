"""mtactl trace ID: every log record of one message, from every process,
also after delivery; the inbound session's records joined by their
session id; and, when log.file is "-", a true word on where the records
went (mtad's standard error: a file, a terminal, the journal).
Loopback only; every wait is bounded."""
import os
import pty
import subprocess
import threading

from mtadtest import MTAD, make_message, send, wait_for

QID = "1A23C5053860103D"
OTHER = "1A23C5053860AAAA"


def test_trace_finds_a_message_after_delivery(mtad_factory, sink):
    m = mtad_factory({"routes": {"default": sink.route}}).start()
    qid = send(m, "a@src.test", ["b@dst.test"], make_message(1))
    other = send(m, "c@src.test", ["d@dst.test"], make_message(2))
    sink.wait_for(2)
    for q in (qid, other):
        m.wait_log("%s: removed" % q)
    assert qid not in m.queue_ids()
    r = m.ctl("trace", qid.lower())
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # arrival, result and removal, in order
    at = [[i for i, l in enumerate(lines) if "%s: %s" % (qid, k) in l]
          for k in ("from=<a@src.test>", "to=<b@dst.test>", "removed")]
    assert all(len(x) == 1 for x in at) and at == sorted(at), r.stdout
    # nothing of the other message, nothing that is not the message's or
    # its session's
    assert other not in r.stdout and "d@dst.test" not in r.stdout
    assert all(qid in l or "session=" in l or '"session"' in l
               for l in lines), r.stdout
    # an unknown id and a malformed one
    r = m.ctl("trace", "0123456789ABCDEF")
    assert r.returncode == 1
    assert r.stderr == "mtactl: trace: 0123456789ABCDEF: no log record in " \
        "%s\n" % m.log
    r = m.ctl("trace", "../etc")
    assert r.returncode == 1 and "is not a queue id" in r.stderr
    assert m.ctl("trace").returncode == 2


def write(path, lines):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(l + "\n" for l in lines))


def test_trace_joins_the_inbound_session_across_a_rotation(mtad_factory):
    """A hand-written log (text and JSON lines, as both formats write
    them) and its rotated FILE.1: the message's records pull in the
    records of its session (session=), and only those; what a client
    sent (its HELO with an escape sequence) is escaped."""
    m = mtad_factory()                  # mtactl reads only the files
    w1 = "2026-12-03T14:00:00.%03dZ mtad[11]: worker 1: "
    w0 = "2026-12-03T14:00:01.%03dZ mtad[10]: worker 0: "
    write(m.log + ".1", [
        w1 % 1 + "connect from [127.0.0.1]:4000 session=S1a",
        w1 % 2 + "connect from [127.0.0.1]:4001 session=S2b",
        w1 % 3 + "helo=evil\x1b]0;owned\x07 session=S1a",
        w1 % 4 + "%s: from=<a@src.test>, size=10, nrcpt=1, "
                 "client=[127.0.0.1]:4000, session=S1a" % QID,
        w1 % 5 + "%s: from=<x@src.test>, size=10, nrcpt=1, "
                 "client=[127.0.0.1]:4001, session=S2b" % OTHER,
        w1 % 6 + "xsession=S1a is another key",
    ])
    write(m.log, [
        w1 % 7 + "disconnect from [127.0.0.1]:4000 commands=5 session=S1a",
        w0 % 8 + "%s: to=<b@dst.test>, relay=r[127.0.0.2]:25, tls=none, "
                 "status=sent (250 ok)" % QID,
        '{"ts":"2026-12-03T14:00:02.000Z","level":"info","proc":"worker 0",'
        '"event":"removed","queue_id":"%s","msg":"%s: removed"}' % (QID, QID),
        '{"ts":"2026-12-03T14:00:02.001Z","level":"info","proc":"worker 1",'
        '"event":"connect","session":"S2b","msg":"connect"}',
        w0 % 9 + "%s0: not this one" % QID,
        w0 % 10 + "%s: removed" % OTHER,
    ])
    r = m.ctl("trace", QID)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        w1 % 1 + "connect from [127.0.0.1]:4000 session=S1a",
        w1 % 3 + "helo=evil\\x1b]0;owned\\x07 session=S1a",
        w1 % 4 + "%s: from=<a@src.test>, size=10, nrcpt=1, "
                 "client=[127.0.0.1]:4000, session=S1a" % QID,
        w1 % 7 + "disconnect from [127.0.0.1]:4000 commands=5 session=S1a",
        w0 % 8 + "%s: to=<b@dst.test>, relay=r[127.0.0.2]:25, tls=none, "
                 "status=sent (250 ok)" % QID,
        '{"ts":"2026-12-03T14:00:02.000Z","level":"info","proc":"worker 0",'
        '"event":"removed","queue_id":"%s","msg":"%s: removed"}' % (QID, QID),
    ], r.stdout
    # the JSON form of the session key joins too
    write(m.log, [
        '{"ts":"t","event":"connect","session":"J9","msg":"connect from x"}',
        '{"ts":"t","event":"received","queue_id":"%s","session":"J9",'
        '"msg":"%s: from=<a@src.test>"}' % (OTHER, OTHER),
        '{"ts":"t","event":"connect","session":"J10","msg":"other"}',
    ])
    os.unlink(m.log + ".1")
    r = m.ctl("trace", OTHER)
    assert r.returncode == 0, r.stderr
    assert [l.split('"session":"')[1][:3] for l in r.stdout.splitlines()] == \
        ['J9"', 'J9"'], r.stdout


def test_log_on_stderr_is_found_or_named(mtad_factory, sink):
    """log.file "-": records go to mtad's standard error.  A file there is
    read; a terminal (mtad -f, as under make run) is named, and so is the
    journal's socket; with no mtad to ask, both are named.  mtactl show
    says the same."""
    m = mtad_factory({"routes": {"default": sink.route},
                      "log": {"file": "-"},
                      "delivery": {"retry": ["1h"]}})
    m.start()                           # stderr is the file stderr.log
    qid = send(m, "a@src.test", ["b@dst.test"], make_message(1))
    sink.wait_for(1)
    wait_for(lambda: "%s: removed" % qid in m.stderr_text(), 10,
             what="the removal on stderr")
    r = m.ctl("trace", qid)
    assert r.returncode == 0, r.stderr
    assert "%s: to=<b@dst.test>" % qid in r.stdout
    m.stop()
    r = m.ctl("trace", qid)
    assert r.returncode == 1
    assert "under systemd the journal (journalctl -u mtad -g %s), under " \
        "mtad -f (make run) its terminal" % qid in r.stderr, r.stderr

    # a terminal: what make run does
    master, slave = pty.openpty()

    def drain():                        # the terminal's reader
        try:
            while os.read(master, 4096):
                pass
        except OSError:
            pass
    threading.Thread(target=drain, daemon=True).start()
    try:
        m.proc = subprocess.Popen([MTAD, "-f", "-c", m.cfg_path],
                                  stdout=slave, stderr=slave, cwd=m.dir)
        m.wait_ready()
        tty = os.ttyname(slave)
        sink.fail_first = 1             # keep the next message queued
        qid = send(m, "a@src.test", ["b@dst.test"], make_message(2))
        wait_for(lambda: '"attempts":1' in m.ctl("queue", "--json").stdout,
                 10, what="a deferred message")
        r = m.ctl("trace", qid)
        assert r.returncode == 1
        assert r.stderr == 'mtactl: trace: log.file is "-": the records went ' \
            'to the terminal mtad runs on (%s, mtad -f as under make run) ' \
            'and were not kept; set log.file to a path to keep them\n' % tty
        r = m.ctl("show", qid)
        assert r.returncode == 0, r.stderr
        hist = [l for l in r.stdout.splitlines() if l.startswith("history:")]
        assert hist == ['history:     log.file is "-": the records went to '
                        'the terminal mtad runs on (%s, mtad -f as under '
                        'make run) and were not kept; set log.file to a path '
                        'to keep them' % tty], r.stdout
        assert "journalctl" not in r.stdout
    finally:
        m.stop()
        os.close(slave)
        os.close(master)            # ends drain()


def test_a_session_id_in_peer_text_ties_in_nothing(mtad_factory):
    """What a client or a server wrote that looks like a session id (a
    sender <session=X@dom>, a reply "(250 ok session=X)", a JSON value)
    does not pull another session's records into the trace: the id is the
    one mtad writes, the last "session=" of a text record, the "session"
    key of a JSON one."""
    m = mtad_factory()
    w = "2026-12-03T14:00:00.%03dZ mtad[11]: worker 1: "
    write(m.log, [
        w % 1 + "connect from [127.0.0.1]:4000 session=S1a",
        w % 2 + "connect from [127.0.0.1]:4001 session=S2b",
        w % 3 + "%s: from=<session=S2b@src.test>, size=10, nrcpt=1, "
                "client=[127.0.0.1]:4000, session=S1a" % QID,
        w % 4 + "%s: to=<b@dst.test>, relay=r[127.0.0.2]:25, "
                "status=sent (250 ok session=S3c)" % QID,
        w % 5 + "connect from [127.0.0.1]:4002 session=S3c",
        '{"ts":"t","event":"removed","queue_id":"%s","from":"session=S2b",'
        '"msg":"%s: removed session=S2b"}' % (QID, QID),
    ])
    r = m.ctl("trace", QID)
    assert r.returncode == 0, r.stderr
    got = r.stdout.splitlines()
    assert [l for l in got if "connect from" in l] == \
        [w % 1 + "connect from [127.0.0.1]:4000 session=S1a"], r.stdout
    assert len(got) == 4, r.stdout     # connect, from=, to=, removed
