"""The durable group commit off the worker's loop (spool.fsync: true;
spool/spool_sync.c, smtpd/session_msg.c): the syncfs() runs on a helper
thread made inside the worker's sandbox while the loop serves other
sessions; 250 only after the sync that followed the rename; a client that
leaves while its message waits loses nothing."""

import os
import re
import socket
import threading

import pytest

from mtadtest import (Client, dot_stuff, read_queue_file,
                      strip_received, wait_for, workers)



@pytest.fixture
def durable(mtad_factory, hole):
    """Two workers, spool.fsync on, a route that never answers (messages
    stay queued)."""
    m = mtad_factory({"server": {"workers": 2},
                      "spool": {"fsync": True},
                      "routes": {"default": hole.route()}})
    return m.start()


def body_in_queue(m, qid):
    _, body = read_queue_file(os.path.join(m.spool, "queue", qid))
    return strip_received(body)[1]


def nthreads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def test_many_sessions_commit_durably_through_the_sync_thread(durable):
    m = durable
    before = set(wait_for(lambda: len(workers(m.pid)) == 2 and workers(m.pid),
                          what="two workers"))
    results, errors = {}, []

    def session(k):
        try:
            with Client(m.port, timeout=30) as c:
                c.greet()
                for j in range(5):
                    body = b"Subject: s%d m%d\r\n\r\nbody %d %d\r\n" % (k, j, k, j)
                    # the whole transaction in one write: the session waits
                    # in the commit while others go on
                    c.send(b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\n"
                           b"DATA\r\n" + dot_stuff(body))
                    rs = c.replies(4)
                    assert [r.code for r in rs] == [250, 250, 354, 250], rs
                    results[(k, j)] = (rs[3].text.split()[-1].decode(), body)
        except Exception as e:          # reported below, with its session
            errors.append((k, repr(e)))

    ts = [threading.Thread(target=session, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "a session hung"
    assert errors == [], errors
    assert len(results) == 40
    for qid, body in results.values():
        assert body_in_queue(m, qid) == body
    # no worker was killed by its sandbox (a new pid would show it), and
    # a worker that committed runs its sync thread
    assert set(workers(m.pid)) == before
    assert max(nthreads(p) for p in before) == 2
    assert "sandbox" not in m.stderr_text()


def test_a_client_that_leaves_during_the_commit_loses_nothing(durable):
    m = durable
    wait_for(lambda: len(workers(m.pid)) == 2, what="two workers")
    n0 = len(m.queue_ids())
    bodies = []
    for k in range(10):
        body = b"Subject: gone %d\r\n\r\nleft %d\r\n" % (k, k)
        bodies.append(body)
        s = socket.create_connection(("127.0.0.1", m.port), timeout=10)
        s.recv(512)                     # the 220
        s.sendall(b"EHLO gone.test\r\nMAIL FROM:<a@x.test>\r\n"
                  b"RCPT TO:<b@y.test>\r\nDATA\r\n" + dot_stuff(body))
        # leave at once, before any 250 can have been read
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    # each message either was committed (its 250 lost with the client,
    # then delivered all the same) or dropped before its commit with the
    # reset; none may be half there, none twice, and what the log calls
    # received is in queue/ (both paths: "received" and "queued after its
    # client left", whichever the timing gave)
    def settled():
        text = m.log_text()
        n = text.count(": connect from [")
        return n >= 11 and n == text.count(": disconnect from [") and text
    wait_for(settled, what="every session closed")

    # a message whose client left is logged when its sync ends, which may
    # be after the disconnect: wait until the log and queue/ agree
    def agreed():
        ids = set(m.queue_ids()[n0:])
        logged = set(re.findall(r"([0-9A-F]{16}): from=<a@x\.test>, size=",
                                m.log_text()))
        return (ids,) if logged == ids else None
    ids, = wait_for(agreed, what="every queued message logged as received")
    got = [body_in_queue(m, q) for q in ids]
    assert set(got) <= set(bodies), got
    assert len(got) == len(set(got)), "a message committed twice"
