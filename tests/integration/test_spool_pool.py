"""Delivered files recycled (spool/spool_pool.c): on a tmpfs spool without
fsync, a file whose message was delivered on its first attempt moves to
tmp/ and the next message is written over it.  Checked end to end, with
one worker so that every message reuses the file before it: bodies of
very different sizes, one after the other, arrive byte for byte (a
shorter one over a longer one must not keep the old tail); deferred mail
is untouched; what lies in the pool is unlinked after two idle seconds,
and at a stop."""

import os

from mtadtest import make_message, spool_files, strip_received, wait_for


def body_of(n, size):
    """A message of about `size` bytes whose every line names it."""
    line = b"message %d line %%08d abcdefghijklmnopqrstuvwxyz\r\n" % n
    lines = []
    total = 0
    k = 0
    while total < size:
        s = line % k
        lines.append(s)
        total += len(s)
        k += 1
    return make_message(n, b"".join(lines))


def tmp_names(m):
    return sorted(os.listdir(os.path.join(m.spool, "tmp")))


def test_bodies_of_every_size_arrive_exact_over_recycled_files(
        mtad_factory, sink):
    m = mtad_factory({"server": {"workers": 1},
                      "routes": {"default": sink.route}}).start()
    sizes = [300 * 1024, 100, 1024 * 1024, 10, 70 * 1024, 0, 2 * 1024 * 1024,
             5000]
    sent = []
    s = m.smtp(timeout=30)
    s.ehlo("client.test")
    for n, size in enumerate(sizes):
        msg = body_of(n, size)
        s.sendmail("a@example.org", ["b%d@example.net" % n], msg)
        sent.append(msg)
        # delivered before the next is written: each one reuses the
        # file of the one before
        sink.wait_for(n + 1, timeout=30)
        wait_for(lambda: not spool_files(m.spool, "queue"),
                 what="message %d removed from queue/" % n)
        # pooled as tmp/.<id>, apart from files being received
        names = tmp_names(m)
        assert len(names) == 1 and names[0].startswith(".") and \
            len(names[0]) == 17, names
    s.quit()
    got = {}
    for r in sink.received():
        _, rest = strip_received(r.data)
        got[r.rcpt_tos[0]] = rest
    assert len(got) == len(sizes)
    for n, msg in enumerate(sent):
        rest = got["b%d@example.net" % n]
        assert len(rest) == len(msg), (n, len(rest), len(msg))
        assert rest == msg, n
    # two idle seconds, and the worker's tick unlinks the pooled file
    wait_for(lambda: not tmp_names(m), timeout=10, what="pool trimmed")


def test_deferred_mail_stays_and_the_pool_goes_at_stop(mtad_factory, sink):
    m = mtad_factory({"server": {"workers": 1},
                      "routes": {"default": sink.route}}).start()
    s = m.smtp(timeout=30)
    s.ehlo("client.test")
    s.sendmail("a@example.org", ["b@example.net"], body_of(1, 100 * 1024))
    sink.wait_for(1, timeout=30)
    wait_for(lambda: len(tmp_names(m)) == 1, what="a pooled file")
    sink.fail_first = 1
    small = make_message(2)
    s.sendmail("a@example.org", ["c@example.net"], small)
    s.quit()
    # deferred: in queue/, and the pooled file it was written over is
    # its own now (no file left in tmp/); the retry reopens it, and the
    # reader takes only a file exactly as long as its envelope says
    wait_for(lambda: len(spool_files(m.spool, "queue")) == 1 and
             not tmp_names(m), what="the deferred message queued")
    sink.wait_for(2, timeout=30)        # its retry, a second later
    wait_for(lambda: not spool_files(m.spool, "queue"),
             what="the retried message removed")
    got = sink.received()
    assert [r.rcpt_tos for r in got] == [["b@example.net"], ["c@example.net"]]
    assert strip_received(got[1].data)[1] == small
    m.stop()
    assert tmp_names(m) == []


def test_a_killed_workers_tmp_files_go_with_its_replacement(
        mtad_factory, sink):
    """kill -9 leaves what the worker was receiving (tmp/<id>) and the
    delivered files it kept (tmp/.<id>); the worker that takes its slot
    unlinks them before it takes mail, where before they stayed until
    the next full start."""
    import signal
    import socket
    from mtadtest import workers
    m = mtad_factory({"server": {"workers": 1},
                      "routes": {"default": sink.route}}).start()
    half = socket.create_connection(("127.0.0.1", m.port), timeout=10)
    f = half.makefile("rb")
    assert f.readline().startswith(b"220")
    for cmd, code in ((b"EHLO client.test", b"250 "),
                      (b"MAIL FROM:<a@example.org>", b"250"),
                      (b"RCPT TO:<b@example.net>", b"250"),
                      (b"DATA", b"354")):
        half.sendall(cmd + b"\r\n")
        line = f.readline()
        while line[3:4] == b"-":
            line = f.readline()
        assert line.startswith(code), (cmd, line)
    half.sendall(b"Subject: half\r\n\r\nnever finished\r\n")
    receiving = wait_for(lambda: [n for n in tmp_names(m)
                                  if not n.startswith(".")],
                         what="the file being received in tmp/")
    s = m.smtp(timeout=30)
    s.sendmail("a@example.org", ["c@example.net"], body_of(1, 50 * 1024))
    s.quit()
    sink.wait_for(1, timeout=30)
    kept = wait_for(lambda: [n for n in tmp_names(m) if n.startswith(".")],
                    what="a delivered file kept in tmp/")
    old = workers(m.pid)
    assert len(old) == 1, old
    os.kill(old[0], signal.SIGKILL)     # well within the pool's 2 idle s
    half.close()
    wait_for(lambda: [w for w in workers(m.pid) if w not in old],
             what="the replacement worker")
    # it sweeps while it starts, before it takes mail
    wait_for(lambda: tmp_names(m) == [], timeout=10,
             what="tmp/ emptied of %r and %r" % (receiving, kept))
    # 2 files, or 1 if a very slow machine let the pool's idle trim take
    # the kept one before the kill: the count is not the point
    m.wait_log("files left in tmp/ by an earlier worker of slot 0 removed")
    s = m.smtp(timeout=30)
    s.sendmail("a@example.org", ["d@example.net"], make_message(3))
    s.quit()
    sink.wait_for(2, timeout=30)
