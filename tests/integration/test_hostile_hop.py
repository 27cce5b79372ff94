"""A hostile or broken next hop: replies that do not follow the commands
mtad sent must never make it count a message as delivered that the hop
never got.  Each test failed before its fix.

The next hop here is scripted: it answers each command line with what the
test says, reads a message's content after a 354, and records what it got.
"""

import pytest

from mtadtest import ScriptedPeer, make_message, send, wait_for

READ_TIMEOUT = 20.0


class ScriptedHop(ScriptedPeer):
    """An SMTP next hop on 127.0.0.1 whose replies come from a dict:
    verb -> reply bytes (CRLF included; may hold several replies or
    none).  A connection is served until the client closes it or QUIT;
    after a 354 the content is read up to CRLF.CRLF and answered with
    replies["."].  bodies: the contents received."""

    DEFAULT = {
        "EHLO": b"250-hop.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n",
        "HELO": b"250 hop.test\r\n",
        "MAIL": b"250 2.1.0 ok\r\n",
        "RCPT": b"250 2.1.5 ok\r\n",
        "DATA": b"354 go ahead\r\n",
        ".": b"250 2.0.0 ok\r\n",
        "RSET": b"250 2.0.0 ok\r\n",
        "QUIT": b"221 2.0.0 bye\r\n",
    }

    def __init__(self, **replies):
        self.replies = dict(self.DEFAULT)
        self.replies.update(replies)
        self.bodies = []
        super().__init__(threaded=True, eof_ok=True,
                         join_timeout=READ_TIMEOUT + 5)

    def session(self, conn):
        conn.settimeout(READ_TIMEOUT)
        buf = bytearray()

        def line():
            while b"\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    raise EOFError("closed")
                buf.extend(data)
            i = buf.index(b"\r\n")
            out = bytes(buf[:i])
            del buf[:i + 2]
            return out

        conn.sendall(b"220 hop.test ESMTP\r\n")
        while True:
            ln = line()
            verb = ln.split(b" ", 1)[0].decode(errors="replace").upper()
            reply = self.replies.get(verb, b"502 5.5.2 what\r\n")
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
                conn.sendall(self.replies["."])


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


@pytest.mark.parametrize("replies", [
    # DATA answered 250 at once: no 354, so no content was sent
    {"DATA": b"250 2.0.0 ok\r\n"},
    # one reply too many to RCPT: with PIPELINING the surplus becomes the
    # reply to DATA, and the real 354 the reply to the content
    {"RCPT": b"250 2.1.5 ok\r\n250 2.0.0 surplus\r\n"},
], ids=["data-250", "rcpt-surplus"])
def test_a_2xx_to_data_is_no_delivery(mtad_factory, scripted_hop, replies):
    hop = scripted_hop(**replies)
    m = mtad_factory({"server": {"workers": 1},
                      "routes": {"default": hop.route},
                      "delivery": {"retry": ["1h"]}}).start()
    qid = send(m, "a@example.org", ["b@example.net"], make_message(1))
    lines = wait_for(lambda: status_lines(m, qid, "b@example.net"), 20,
                     what="a delivery status for %s" % qid)
    assert "status=deferred" in lines[0], lines
    assert "in reply to DATA" in lines[0], lines
    assert not any("status=sent" in ln for ln in lines), lines
    assert qid in m.ctl("queue", check=True).stdout
    assert hop.bodies == []
    assert hop.errors == []
