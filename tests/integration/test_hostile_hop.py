"""A hostile or broken next hop: replies that do not follow the commands
mtad sent must never make it count a message as delivered that the hop
never got.  Each test failed before its fix.

The next hop here is scripted: it answers each command line with what the
test says, reads a message's content after a 354 or a BDAT, and records
what it got.
"""

import threading

import pytest

from mtadtest import ScriptedPeer, make_message, send, wait_for

READ_TIMEOUT = 20.0


class ScriptedHop(ScriptedPeer):
    """An SMTP next hop on 127.0.0.1 whose replies come from a dict:
    verb -> reply bytes (CRLF included; may hold several replies or
    none).  A connection is served until the client closes it or QUIT;
    after a 354 the content is read up to CRLF.CRLF and answered with
    replies["."]; a BDAT's chunk is read and answered with replies["BDAT"]
    (or, for the first BDAT of a connection, replies["BDAT1"]).  first:
    replies that override these on the first connection only.  hold: an
    Event the first BDAT's reply waits for.  bodies: the contents received
    (a chunk only when its reply was a 2xx)."""

    DEFAULT = {
        "EHLO": b"250-hop.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n",
        "HELO": b"250 hop.test\r\n",
        "MAIL": b"250 2.1.0 ok\r\n",
        "RCPT": b"250 2.1.5 ok\r\n",
        "DATA": b"354 go ahead\r\n",
        ".": b"250 2.0.0 ok\r\n",
        "BDAT": b"250 2.0.0 ok\r\n",
        "RSET": b"250 2.0.0 ok\r\n",
        "QUIT": b"221 2.0.0 bye\r\n",
    }

    def __init__(self, first=None, hold=None, **replies):
        self.replies = dict(self.DEFAULT)
        self.replies.update(replies)
        self.first = first or {}
        self.hold = hold
        self.bodies = []
        super().__init__(threaded=True, eof_ok=True,
                         join_timeout=READ_TIMEOUT + 5)

    def session(self, conn):
        conn.settimeout(READ_TIMEOUT)
        buf = bytearray()
        replies = dict(self.replies)
        with self.lock:
            if self.connections == 1:
                replies.update(self.first)
        nbdat = 0

        def fill():
            data = conn.recv(65536)
            if not data:
                raise EOFError("closed")
            buf.extend(data)

        def line():
            while b"\r\n" not in buf:
                fill()
            i = buf.index(b"\r\n")
            out = bytes(buf[:i])
            del buf[:i + 2]
            return out

        conn.sendall(b"220 hop.test ESMTP\r\n")
        while True:
            ln = line()
            verb = ln.split(b" ", 1)[0].decode(errors="replace").upper()
            if verb == "BDAT":
                size = int(ln.split()[1])
                while len(buf) < size:
                    fill()
                chunk = bytes(buf[:size])
                del buf[:size]
                nbdat += 1
                reply = replies.get("BDAT1" if nbdat == 1 else "BDAT",
                                    replies["BDAT"])
                if nbdat == 1 and self.hold is not None:
                    if not self.hold.wait(READ_TIMEOUT):
                        raise AssertionError("hold was never released")
                if reply.startswith(b"2"):
                    with self.lock:
                        self.bodies.append(chunk)
                conn.sendall(reply)
                continue
            reply = replies.get(verb, b"502 5.5.2 what\r\n")
            if reply:
                conn.sendall(reply)
            if verb == "QUIT":
                return
            if verb == "DATA" and reply.startswith(b"354"):
                body = bytearray()
                while True:
                    ln = line()
                    if ln == b".":
                        break
                    body += ln + b"\r\n"
                with self.lock:
                    self.bodies.append(bytes(body))
                conn.sendall(replies["."])


@pytest.fixture
def scripted_hop():
    made = []

    def make(**replies):
        h = ScriptedHop(**replies)
        made.append(h)
        return h
    yield make
    for h in made:
        h.stop()


def status_lines(m, qid, rcpt):
    needle = "%s: to=<%s>" % (qid, rcpt)
    return [ln for ln in m.log_text().splitlines() if needle in ln]


def first_status(mtad_factory, hop, retry):
    """mtad relaying to hop, one message sent: (mtad, its id, the status
    lines of its first attempt)."""
    m = mtad_factory({"server": {"workers": 1},
                      "routes": {"default": hop.route},
                      "delivery": {"retry": [retry]}}).start()
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    lines = wait_for(lambda: status_lines(m, qid, "b@example.net"), 20,
                     what="a delivery status for %s" % qid)
    return m, qid, lines


@pytest.mark.parametrize("replies", [
    # DATA answered 250 at once: no 354, so no content was sent
    {"DATA": b"250 2.0.0 ok\r\n"},
    # one reply too many to RCPT: with PIPELINING the surplus becomes the
    # reply to DATA, and the real 354 the reply to the content
    {"RCPT": b"250 2.1.5 ok\r\n250 2.0.0 surplus\r\n"},
], ids=["data-250", "rcpt-surplus"])
def test_a_2xx_to_data_is_no_delivery(mtad_factory, scripted_hop, replies):
    hop = scripted_hop(**replies)
    m, qid, lines = first_status(mtad_factory, hop, "1h")
    assert "status=deferred" in lines[0], lines
    # the surplus taken as DATA's reply, or seen with the 354 behind it
    assert ("in reply to DATA" in lines[0] or
            "out of step" in lines[0]), lines
    assert not any("status=sent" in ln for ln in lines), lines
    assert qid in m.ctl("queue", check=True).stdout
    assert hop.bodies == []
    assert hop.errors == []


CHUNKING_EHLO = b"250-hop.test\r\n250-PIPELINING\r\n250 CHUNKING\r\n"
SURPLUS = b"250 2.0.0 surplus\r\n"


def sent_lines(m, qid, rcpt):
    return [ln for ln in status_lines(m, qid, rcpt) if "status=sent" in ln]


def test_a_surplus_after_ehlo_is_no_bdat_verdict(mtad_factory, scripted_hop):
    """The first connection answers EHLO twice (one write) and refuses the
    BDAT: taken in order, the surplus answered MAIL, and the RCPT's reply
    became the BDAT's verdict: sent, with nothing accepted.  The
    connection must be dropped and the message delivered once, later, on
    a fresh one."""
    hop = scripted_hop(EHLO=CHUNKING_EHLO,
                       first={"EHLO": CHUNKING_EHLO + SURPLUS,
                              "BDAT": b"451 4.3.0 not taken\r\n"})
    m, qid, lines = first_status(mtad_factory, hop, "1s")
    assert "status=deferred" in lines[0], lines
    assert "out of step" in lines[0], lines
    wait_for(lambda: sent_lines(m, qid, "b@example.net"), 20,
             what="%s sent on a fresh connection" % qid)
    assert len(sent_lines(m, qid, "b@example.net")) == 1
    assert len(hop.bodies) == 1 and b"serial 1" in hop.bodies[0]
    assert hop.connections >= 2
    assert hop.errors == []


def test_a_surplus_after_a_verdict_is_no_next_verdict(mtad_factory,
                                                       scripted_hop):
    """The first connection's first BDAT verdict comes with a surplus
    reply (one write) while a second message waits for the connection;
    that connection refuses any further BDAT.  Taken in order, the surplus
    answered the second message's RSET, and its RCPT's reply became its
    BDAT verdict: sent, with nothing accepted.  Neither message may be
    counted on that connection's word after the surplus: each is sent
    (logged) exactly once, and only once the hop has its content."""
    hold = threading.Event()
    hop = scripted_hop(EHLO=CHUNKING_EHLO, hold=hold,
                       first={"BDAT1": b"250 2.0.0 ok\r\n" + SURPLUS,
                              "BDAT": b"451 4.3.0 not taken\r\n"})
    m = mtad_factory({"server": {"workers": 1},
                      "routes": {"default": hop.route},
                      "delivery": {"retry": ["1s"],
                                   "connections_per_destination": 1}}
                     ).start()
    try:
        q1 = send(m, "a@example.org", ["b@example.net"], make_message(1))
        q2 = send(m, "a@example.org", ["b@example.net"], make_message(2))
    finally:
        hold.set()
    for qid in (q1, q2):
        wait_for(lambda: sent_lines(m, qid, "b@example.net"), 20,
                 what="%s sent" % qid)
    for qid in (q1, q2):
        assert len(sent_lines(m, qid, "b@example.net")) == 1
    got2 = [b for b in hop.bodies if b"serial 2" in b]
    assert len(got2) == 1, hop.bodies
    assert hop.connections >= 2
    assert hop.errors == []
