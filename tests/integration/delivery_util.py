"""Fixtures and helpers for the delivery tests: test SMTP sinks (sink.py)
started per test and stopped afterwards, and small send/parse helpers."""
import os
import re
import socket
import time

import pytest

from sink import Sink

ID_RE = re.compile(rb"queued as ([0-9A-F]{16})")


@pytest.fixture
def sink_factory():
    """Make and start sinks; every one is stopped after the test."""
    made = []

    def make(**kw):
        s = Sink(**kw).start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


@pytest.fixture
def sink(sink_factory):
    return sink_factory()


def closed_port():
    """A loopback port nobody listens on (connections are refused), never
    one handed out to an mtad listener of this run."""
    from conftest import free_port
    return free_port()


def make_message(n, extra=b"", subject=None):
    """A CRLF message with a unique serial in a header and the body."""
    subj = subject or ("message %d" % n)
    return (b"From: sender@example.org\r\nTo: rcpt@example.net\r\n"
            b"Subject: " + subj.encode() + b"\r\n"
            b"X-Serial: " + str(n).encode() + b"\r\n\r\n"
            b"serial " + str(n).encode() + b"\r\n" + extra)


def send(mtad, sender, rcpts, msg, conn=None):
    """Send one message; returns its queue id (from the 250 reply)."""
    own = conn is None
    s = conn or mtad.smtp()
    try:
        s.ehlo("client.test")
        code, _ = s.mail(sender)
        assert code == 250, code
        for r in rcpts:
            code, resp = s.rcpt(r)
            assert code == 250, (code, resp)
        code, resp = s.data(msg)
        assert code == 250, (code, resp)
        m = ID_RE.search(resp)
        return m.group(1).decode() if m else None
    finally:
        if own:
            s.quit()


def strip_received(data):
    """Split a relayed message into (Received header block, the rest).
    The block is the leading 'Received:' field with its folded lines."""
    assert data.startswith(b"Received:"), data[:200]
    pos = 0
    while True:
        nl = data.index(b"\n", pos) + 1
        pos = nl
        if not data[pos:pos + 1] in (b" ", b"\t"):
            break
    return data[:pos], data[pos:]


def wait_until(pred, timeout=20.0, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def maildir_files(path):
    new = os.path.join(path, "new")
    try:
        return sorted(os.path.join(new, f) for f in os.listdir(new))
    except FileNotFoundError:
        return []


def worker_pid_of(mtad, qid, timeout=10.0):
    """PID of the process that logged the queue id first (the accepting
    worker, which is also the one delivering it)."""
    pat = re.compile(r"mtad\[(\d+)\]: [^:]*: %s:" % qid)

    def find():
        m = pat.search(mtad.log_text())
        return int(m.group(1)) if m else None
    pid = wait_until(find, timeout)
    assert pid, "no log line for %s:\n%s" % (qid, mtad.log_text()[-3000:])
    return pid
