"""Under faults (issue 19): the numbered findings, one test each, against a
real mtad.

1. a recipient that got 250 is not offered again when the delivery state
   cannot be written (spool full);
2. one DSN per failed recipient when the state write after it fails;
3. a reload while a next hop stalls ends without any SIGKILL, and the next
   generation delivers what the old one gave back;
4. delivery.timeouts: a stalled next hop is given up at the configured
   limits (greeting: next host; data_done: deferred, then retried).
Plus spool.reserve: new mail gets 452 (one warning per episode) while
delivery state and bounces of accepted mail still fit.

The full-spool tests mount a small tmpfs on the spool (root only: CI runs
as root) and fill it to an exact number of free pages with a filler file.
"""
import os
import signal
import smtplib
import socket
import subprocess
import threading
import time

import pytest

from mtadtest import (MTAD, alive, make_message, recv_until_eof, wait_for,
                      workers)

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mounting a tmpfs needs root")


class SmallSpool:
    """A tmpfs of size_mb mounted on path, and a filler file in it."""

    def __init__(self, path, size_mb):
        self.path = path
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o",
                        "size=%dm,mode=0700" % size_mb, "tmpfs", path],
                       check=True)
        self.filler = os.path.join(path, "filler")

    def free_pages(self):
        st = os.statvfs(self.path)
        return st.f_bavail, st.f_frsize

    def fill(self, leave_bytes):
        """Grow the filler until at most leave_bytes (rounded down to
        whole pages) are free."""
        avail, page = self.free_pages()
        want = avail - leave_bytes // page
        if want <= 0:
            return
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            os.posix_fallocate(fd, size, want * page)
        finally:
            os.close(fd)
        left = self.free_pages()[0] * page
        assert left <= leave_bytes, (left, leave_bytes)

    def empty(self):
        try:
            os.unlink(self.filler)
        except FileNotFoundError:
            pass

    def umount(self):
        subprocess.run(["umount", "-l", self.path], check=False)


@pytest.fixture
def small_spool(workdir):
    made = []

    def make(size_mb=16):
        s = SmallSpool(os.path.join(workdir, "spool"), size_mb)
        made.append(s)
        return s

    yield make
    for s in made:
        s.umount()


def start(mtad_factory, sink, extra=None):
    over = {"routes": {"default": sink.route}}
    if extra:
        for k, v in extra.items():
            over.setdefault(k, {}).update(v)
    return mtad_factory(over).start()


def send_raw(m, sender, rcpts, body):
    """One transaction; returns (code of the end of data, queue id)."""
    s = m.smtp()
    try:
        s.ehlo("client.test")
        assert s.mail(sender)[0] == 250
        for r in rcpts:
            assert s.rcpt(r)[0] == 250
        code, resp = s.data(body)
        return code, resp
    finally:
        try:
            s.quit()
        except Exception:
            pass


def recv_reply(sock):
    """Lines until a final reply line (code + space)."""
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError("closed while waiting: %r" % data)
        data += chunk
        lines = data.split(b"\r\n")
        if any(len(x) >= 4 and x[3:4] == b" " for x in lines):
            return data


def count_in(text, needle):
    return text.count(needle)


# ---- 1: no second delivery without a crash -----------------------------

@needs_root
def test_sent_recipient_not_offered_again_when_state_cannot_be_saved(
        mtad_factory, sink, small_spool):
    sp = small_spool()
    hold = threading.Event()
    sink.defer = {"b@example.net"}
    sink.hold = hold
    m = start(mtad_factory, sink)
    code, _ = send_raw(m, "s@example.org", ["a@example.net", "b@example.net"],
                       make_message(1))
    assert code == 250
    sink.wait_event("data_started", timeout=20)
    sp.fill(0)                          # not one page left for the state
    hold.set()                          # a gets 250, b stays deferred
    m.wait_log("saving the delivery state", timeout=20)
    # the spool stays full for three retry steps (delivery.retry 1s, 2s)
    time.sleep(3)
    sp.empty()
    sink.defer = set()
    wait_for(lambda: sink.messages_to("b@example.net"), timeout=30,
             what="b delivered once the spool has room")
    assert len(sink.messages_to("a@example.net")) == 1, \
        [m_.rcpt_tos for m_ in sink.received()]
    assert len(sink.messages_to("b@example.net")) == 1
    wait_for(lambda: not m.queue_ids(), timeout=20, what="queue empty")


# ---- 2: one bounce per failure -----------------------------------------

@needs_root
def test_one_dsn_when_state_save_after_it_fails(mtad_factory, sink,
                                                small_spool):
    sp = small_spool()
    hold = threading.Event()
    sink.reject = {"a@example.net"}
    sink.defer = {"b@example.net"}
    sink.hold = hold
    m = start(mtad_factory, sink)
    code, _ = send_raw(m, "s@example.org",
                       ["a@example.net", "b@example.net", "c@example.net"],
                       make_message(2))
    assert code == 250
    sink.wait_event("data_started", timeout=20)
    _, page = sp.free_pages()
    sp.fill(page)                       # room for the DSN, not the state
    hold.set()                          # c 250, a 550, b 451
    m.wait_log("sender non-delivery notification", timeout=20)
    m.wait_log("saving the delivery state", timeout=20)
    time.sleep(3)                       # retry steps with the spool full
    sp.empty()
    sink.defer = set()
    wait_for(lambda: sink.messages_to("b@example.net"), timeout=30,
             what="b delivered once the spool has room")
    wait_for(lambda: not m.queue_ids(), timeout=20, what="queue empty")
    dsns = [x for x in sink.received() if x.mail_from == ""]
    assert len(dsns) == 1, len(dsns)
    assert b"a@example.net" in dsns[0].data
    assert len(sink.messages_to("c@example.net")) == 1


# ---- 3: a reload never kills -------------------------------------------

def test_reload_while_next_hop_stalls_kills_nothing(mtad_factory, sink):
    """The next hop never answers the final dot: at the stop deadline the
    old worker waits a second for that reply, then defers, and exits by
    itself; the new generation delivers the message."""
    sink.stall_first = 1
    m = start(mtad_factory, sink, {"server": {"shutdown_timeout": "3s"}})
    old = set(workers(m.pid))
    code, _ = send_raw(m, "s@example.org", ["x@example.net"], make_message(3))
    assert code == 250
    sink.wait_event("data_started", timeout=20)
    # an inbound session between transactions is told 421 and closed
    idle = socket.create_connection(("127.0.0.1", m.port), timeout=30)
    assert idle.recv(512).startswith(b"220")
    idle.sendall(b"EHLO client.test\r\n")
    assert b"250 " in recv_reply(idle)
    os.kill(m.pid, signal.SIGHUP)
    wait_for(lambda: not any(alive(p) for p in old), timeout=20,
             what="old workers gone")
    text = m.wait_log("generation 1 gone", timeout=20)
    assert "killing it" not in text     # they exited by themselves
    assert "timed out while waiting for the end of data reply" in text
    rest = recv_until_eof(idle)
    idle.close()
    assert rest.startswith(b"421 4.3.2"), rest
    got = sink.wait_for(1, timeout=30)
    assert got[0].rcpt_tos == ["x@example.net"]
    sink.wait_event("dropped")          # the stalled one was not kept
    wait_for(lambda: not m.queue_ids(), timeout=20, what="queue empty")
    assert len(sink.received()) == 1


def test_reload_gives_back_a_delivery_stalled_before_data(mtad_factory,
                                                         sink):
    """The next hop accepts the connection and says nothing: at the stop
    deadline the old worker closes it without marking anything ("given
    back"), exits by itself, and the new generation delivers."""
    sink.mute = True
    m = start(mtad_factory, sink, {"server": {"shutdown_timeout": "3s"},
                                   "delivery": {"timeouts": {
                                       "greeting": "10s"}}})
    old = set(workers(m.pid))
    code, _ = send_raw(m, "s@example.org", ["g@example.net"], make_message(8))
    assert code == 250
    sink.wait_event("muted", timeout=20)
    os.kill(m.pid, signal.SIGHUP)
    wait_for(lambda: not any(alive(p) for p in old), timeout=20,
             what="old workers gone")
    text = m.wait_log("generation 1 gone", timeout=20)
    assert "killing it" not in text
    assert "stop deadline: 1 deliveries given back" in text
    sink.mute = False
    got = sink.wait_for(1, timeout=30)
    assert got[0].rcpt_tos == ["g@example.net"]
    wait_for(lambda: not m.queue_ids(), timeout=20, what="queue empty")
    assert len(sink.received()) == 1


# ---- 4: outbound timeouts in relay.yaml --------------------------------

def test_stalled_greeting_moves_on_to_next_host(mtad_factory, sink_factory):
    dead = sink_factory()
    dead.mute = True                    # accepts, never greets
    good = sink_factory()
    route = "%s,%s" % (dead.route, good.route)
    m = mtad_factory({"routes": {"default": route},
                      "delivery": {"timeouts": {"greeting": "1s"}}}).start()
    code, _ = send_raw(m, "s@example.org", ["y@example.net"], make_message(4))
    assert code == 250
    got = good.wait_for(1, timeout=20)
    assert got[0].rcpt_tos == ["y@example.net"]
    text = m.wait_log("status=sent")
    assert "timed out while receiving the initial server greeting" in text
    assert "trying the next host" in text


def test_stalled_end_of_data_is_deferred_at_data_done(mtad_factory, sink):
    sink.stall_first = 1
    m = start(mtad_factory, sink,
              {"delivery": {"timeouts": {"data_done": "1s"}}})
    code, _ = send_raw(m, "s@example.org", ["z@example.net"], make_message(5))
    assert code == 250
    m.wait_log("timed out while waiting for the end of data reply",
               timeout=20)
    got = sink.wait_for(1, timeout=30)
    assert got[0].rcpt_tos == ["z@example.net"]
    wait_for(lambda: not m.queue_ids(), timeout=20, what="queue empty")
    assert len(sink.received()) == 1


def test_timeouts_keys_are_checked(mtad_factory, sink):
    m = mtad_factory({"routes": {"default": sink.route},
                      "delivery": {"timeouts": {"rcpt": "soon"}}})
    r = subprocess.run([MTAD, "-t", "-c", m.cfg_path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert "delivery.timeouts.rcpt" in r.stderr + r.stdout


# ---- spool.reserve ----------------------------------------------------

@needs_root
def test_reserve_refuses_new_mail_keeps_state_and_bounces(
        mtad_factory, sink, small_spool):
    sp = small_spool(16)
    hold = threading.Event()
    sink.defer = {"b@example.net"}
    sink.reject = {"r@example.net"}
    sink.hold = hold
    m = start(mtad_factory, sink, {"spool": {"reserve": "4M"},
                                   "server": {"workers": 1}})
    code, _ = send_raw(m, "s@example.org",
                       ["a@example.net", "b@example.net", "r@example.net"],
                       make_message(6))
    assert code == 250
    sink.wait_event("data_started", timeout=20)
    sp.fill(2 * 1024 * 1024)            # under the reserve, above zero
    # spool_room() trusts its last look at the file system for
    # SPOOL_ROOM_MS (10 ms; spool/spool_write.c): the first message's look
    # may be that recent.  Past it, the next DATA must look again and see
    # the filled spool (a lower bound on elapsed time, not a deadline).
    time.sleep(0.05)
    for i in range(5):
        s = m.smtp()
        try:
            s.ehlo("client.test")
            assert s.mail("s@example.org")[0] == 250
            assert s.rcpt("n%d@example.net" % i)[0] == 250
            with pytest.raises(smtplib.SMTPDataError) as e:
                s.data(make_message(100 + i))
            assert e.value.smtp_code == 452, e.value
        finally:
            s.close()
    hold.set()                          # a 250, b 451, r 550: DSN + state
    m.wait_log("sender non-delivery notification", timeout=20)
    m.wait_log("status=deferred", timeout=20)
    text = m.log_text()
    assert "saving the delivery state" not in text
    assert "cannot queue the bounce" not in text
    # one warning per worker and episode, not one per message
    assert count_in(text, "new mail gets 452") == 1
    sp.empty()
    sink.defer = set()
    code, _ = send_raw(m, "s@example.org", ["after@example.net"],
                       make_message(7))
    assert code == 250
    m.wait_log("spool has room again")
    wait_for(lambda: sink.messages_to("after@example.net"), timeout=20,
             what="new mail delivered")
    wait_for(lambda: sink.messages_to("b@example.net"), timeout=30,
             what="b delivered")
    assert len(sink.messages_to("a@example.net")) == 1
    assert len([x for x in sink.received() if x.mail_from == ""]) == 1
