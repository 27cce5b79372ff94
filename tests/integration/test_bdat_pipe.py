"""The outbound transaction's round trips (issue 16): with PIPELINING and
CHUNKING offered, mtad sends [RSET] MAIL RCPT... and BDAT n LAST with the
body in one go and reads every reply after; without them, the old
sequence (DATA after the envelope replies, or one command per reply).

`Hop` below is a scripted next hop that answers nothing of a group until
it holds all of it: a client that waited for a reply inside the group
would stall it, and the read deadline (a raised error, never a silent
pass) fails the test.  Refusals (a RCPT, every RCPT, MAIL) must come out
right; so must TLS (a dead reused connection: test_delivery.py,
parametrized over the peer's capabilities).  Loopback only;
every wait is bounded.
"""
import os

import pytest

from mtadtest import (ScriptedPeer, make_message, make_test_ca, send,
                      strip_received, tls_server_context, wait_for)

READ_TIMEOUT = 20.0                 # a stalled group fails after this


class Hop(ScriptedPeer):
    """One-connection-at-a-time SMTP next hop on 127.0.0.1.

    groups: per group of commands the client sent without waiting, their
    verbs (a group ends where a client must wait: DATA, BDAT ... LAST,
    QUIT; without PIPELINING every command is a group, and nothing may
    follow it in the same read).  bodies: the message bytes received.
    """

    def __init__(self, caps, reject=(), mail_reply=None, tls_context=None):
        self.caps = list(caps)
        self.reject = set(reject)
        self.mail_reply = mail_reply
        self.tls_context = tls_context
        self.groups = []
        self.bodies = []
        super().__init__(join_timeout=READ_TIMEOUT + 5)

    def session(self, conn):
        conn.settimeout(READ_TIMEOUT)
        buf = bytearray()
        pipelining = "PIPELINING" in self.caps

        def fill():
            data = conn.recv(65536)
            if not data:
                raise EOFError("closed")
            buf.extend(data)

        def line():
            while b"\r\n" not in buf:
                fill()
            i = buf.index(b"\r\n")
            text = bytes(buf[:i]).decode()
            del buf[:i + 2]
            return text

        def take(n):
            while len(buf) < n:
                fill()
            out = bytes(buf[:n])
            del buf[:n]
            return out

        conn.sendall(b"220 hop.test ESMTP\r\n")
        tls = False
        sender, rcpts, replies, group = None, [], [], []
        while True:
            try:
                cmd = line()
            except (EOFError, ConnectionError):
                return
            verb = cmd.split(" ", 1)[0].upper()
            group.append(verb)
            if not pipelining and buf and verb != "BDAT":
                raise AssertionError("%r came in the same read as %s "
                                     "without PIPELINING" % (bytes(buf), verb))
            end = True
            if verb == "EHLO":
                caps = list(self.caps)
                if self.tls_context is not None and not tls:
                    caps.append("STARTTLS")
                lines = ["hop.test"] + caps
                replies.append("\r\n".join(
                    ("250-%s" if i < len(lines) - 1 else "250 %s") % l
                    for i, l in enumerate(lines)))
            elif verb == "STARTTLS":
                conn.sendall(b"220 2.0.0 go ahead\r\n")
                plain, conn = conn, self.tls_context.wrap_socket(
                    conn, server_side=True)
                conn.settimeout(READ_TIMEOUT)
                self.swap(plain, conn)
                tls = True
                group = []
                continue
            elif verb in ("RSET", "MAIL", "RCPT"):
                end = not pipelining
                if verb == "RSET":
                    sender, rcpts = None, []
                    replies.append("250 2.0.0 Ok")
                elif verb == "MAIL" and self.mail_reply:
                    sender, rcpts = None, []
                    replies.append(self.mail_reply)
                elif verb == "MAIL":
                    sender, rcpts = cmd, []
                    replies.append("250 2.1.0 Ok")
                else:
                    addr = cmd[cmd.index("<") + 1:cmd.index(">")]
                    if sender is None:
                        replies.append("503 5.5.1 need MAIL")
                    elif addr in self.reject:
                        replies.append("550 5.1.1 <%s>: no such user" % addr)
                    else:
                        rcpts.append(addr)
                        replies.append("250 2.1.5 Ok")
            elif verb == "BDAT":
                size = int(cmd.split()[1])
                assert cmd.upper().endswith(" LAST"), cmd
                body = take(size)
                if rcpts:
                    self.bodies.append(body)
                    replies.append("250 2.0.0 queued")
                else:
                    replies.append("554 5.5.1 no valid recipients")
                sender, rcpts = None, []
            elif verb == "DATA":
                if not rcpts:
                    replies.append("554 5.5.1 no valid recipients")
                else:
                    replies.append("354 go ahead")
                    conn.sendall(("\r\n".join(replies) + "\r\n").encode())
                    replies = []
                    self._commit(group)
                    group = []
                    if buf:
                        raise AssertionError("%r before the 354" % bytes(buf))
                    body = bytearray()
                    while not body.endswith(b"\r\n.\r\n"):
                        body += line().encode() + b"\r\n"
                    self.bodies.append(bytes(body))
                    replies.append("250 2.0.0 queued")
                    group.append("(body)")
                sender, rcpts = None, []
            elif verb == "QUIT":
                conn.sendall(b"221 bye\r\n")
                return
            else:
                replies.append("502 5.5.2 what?")
            if end:
                conn.sendall(("\r\n".join(replies) + "\r\n").encode())
                replies = []
                self._commit(group)
                group = []

    def _commit(self, group):
        with self.lock:
            self.groups.append(list(group))


@pytest.fixture
def hop_factory():
    hops = []

    def make(*a, **kw):
        h = Hop(*a, **kw)
        hops.append(h)
        return h
    yield make
    for h in hops:
        h.stop()


def start(mtad_factory, route, static=None, **over):
    cfg = {"routes": {"default": route}, "server": {"workers": 1},
           "delivery": {"retry": ["1s"]}}
    if static:
        cfg["routes"]["static"] = static
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    return mtad_factory(cfg).start()


def sent_line(m, qid, rcpt, status):
    needle = "%s: to=<%s>" % (qid, rcpt)

    def find():
        for ln in m.log_text().splitlines():
            if needle in ln and "status=%s" % status in ln:
                return ln
        return None
    return wait_for(find, 30, what="%s status=%s" % (needle, status))


def txn_groups(hop):
    """The groups after the greeting and EHLO."""
    return [g for g in hop.groups if g not in (["EHLO"],)]


@pytest.mark.parametrize("caps,want", [
    (("PIPELINING", "CHUNKING"),
     [["MAIL", "RCPT", "BDAT"], ["RSET", "MAIL", "RCPT", "BDAT"]]),
    (("PIPELINING",),
     [["MAIL", "RCPT", "DATA"], ["(body)"],
      ["RSET", "MAIL", "RCPT", "DATA"], ["(body)"]]),
    (("CHUNKING",),
     [["MAIL"], ["RCPT"], ["BDAT"], ["RSET"], ["MAIL"], ["RCPT"], ["BDAT"]]),
    ((), [["MAIL"], ["RCPT"], ["DATA"], ["(body)"],
          ["RSET"], ["MAIL"], ["RCPT"], ["DATA"], ["(body)"]]),
], ids=["pipelining+chunking", "pipelining", "chunking", "neither"])
def test_round_trips_follow_the_offered_extensions(mtad_factory, hop_factory,
                                                   caps, want):
    hop = hop_factory(("8BITMIME",) + caps)
    m = start(mtad_factory, hop.route)
    msgs = [make_message(i, b"body %d\r\n.dot line\r\n" % i) for i in (1, 2)]
    assert all(msg.endswith(b"\r\n") for msg in msgs)
    for i, msg in enumerate(msgs):
        qid = send(m, "a@example.org", ["b%d@example.net" % i], msg)
        sent_line(m, qid, "b%d@example.net" % i, "sent")
    assert hop.errors == []
    assert hop.connections == 1          # the second reused the first's
    assert txn_groups(hop) == want
    assert len(hop.bodies) == 2
    for got, msg in zip(hop.bodies, msgs):
        body = got if "CHUNKING" in caps else \
            got[:-5].replace(b"\r\n..", b"\r\n.") + b"\r\n"
        _, rest = strip_received(body)
        assert rest == msg


def test_a_refused_rcpt_in_a_pipelined_bdat(mtad_factory, hop_factory,
                                            sink_factory):
    hop = hop_factory(("PIPELINING", "CHUNKING"), reject={"bad@remote.test"})
    home = sink_factory()
    m = start(mtad_factory, hop.route, static={"home.test": home.route})
    qid = send(m, "alice@home.test", ["good@remote.test", "bad@remote.test"],
               make_message(3))
    sent_line(m, qid, "good@remote.test", "sent")
    line = sent_line(m, qid, "bad@remote.test", "bounced")
    assert "550 5.1.1" in line, line
    assert txn_groups(hop) == [["MAIL", "RCPT", "RCPT", "BDAT"]]
    assert len(hop.bodies) == 1
    dsn = home.wait_for(1, timeout=30)[0].data.decode("utf-8", "replace")
    assert "Final-Recipient: rfc822; bad@remote.test" in dsn
    assert "good@remote.test" not in dsn
    assert hop.errors == []


def test_every_rcpt_refused_then_the_connection_goes_on(mtad_factory,
                                                        hop_factory,
                                                        sink_factory):
    """The BDAT gets 554 (nobody to take it): the recipient keeps its own
    RCPT reply, and the peer read past the body, so the next transaction
    on the same connection is understood."""
    hop = hop_factory(("PIPELINING", "CHUNKING"), reject={"bad@remote.test"})
    home = sink_factory()
    m = start(mtad_factory, hop.route, static={"home.test": home.route})
    q1 = send(m, "alice@home.test", ["bad@remote.test"], make_message(4))
    line = sent_line(m, q1, "bad@remote.test", "bounced")
    assert "550 5.1.1" in line and "554" not in line, line
    q2 = send(m, "alice@home.test", ["good@remote.test"], make_message(5))
    sent_line(m, q2, "good@remote.test", "sent")
    assert hop.connections == 1
    assert txn_groups(hop) == [["MAIL", "RCPT", "BDAT"],
                               ["RSET", "MAIL", "RCPT", "BDAT"]]
    assert len(hop.bodies) == 1 and b"X-Serial: 5" in hop.bodies[0]
    assert hop.errors == []


def test_refused_mail_in_a_pipelined_bdat_defers(mtad_factory, hop_factory):
    hop = hop_factory(("PIPELINING", "CHUNKING"),
                      mail_reply="451 4.3.0 sender busy")
    m = start(mtad_factory, hop.route)
    qid = send(m, "a@example.org", ["b@remote.test"], make_message(6))
    line = sent_line(m, qid, "b@remote.test", "deferred")
    assert "451 4.3.0 sender busy" in line, line
    hop.mail_reply = None               # the retry (1s) goes through
    sent_line(m, qid, "b@remote.test", "sent")
    groups = txn_groups(hop)
    assert groups[0] == ["MAIL", "RCPT", "BDAT"], groups
    # the retry: on the same connection (RSET first) or a new one
    assert groups[-1][-3:] == ["MAIL", "RCPT", "BDAT"], groups
    assert len(groups[-1]) == 3 or groups[-1][0] == "RSET", groups
    assert len(hop.bodies) == 1
    assert hop.errors == []


def test_pipelined_bdat_over_tls(mtad_factory, hop_factory, sink_factory,
                                 workdir):
    d = os.path.join(workdir, "ca")
    os.makedirs(d)
    os.chmod(d, 0o755)
    ca = make_test_ca(d)
    chain, key = ca.issue(["127.0.0.1"])
    ctx = tls_server_context(chain, key)
    hop = hop_factory(("PIPELINING", "CHUNKING"), reject={"bad@remote.test"},
                      tls_context=ctx)
    home = sink_factory()
    m = start(mtad_factory, hop.route, static={"home.test": home.route},
              tls={"ca_file": ca.cert},
              delivery={"tls": "encrypt", "retry": ["1s"]})
    # more than one TLS record, less than MTA_PIPE_BODY_MAX
    msg = make_message(7, b"".join(b"line %05d\r\n" % i for i in range(3000)))
    qid = send(m, "alice@home.test", ["good@remote.test", "bad@remote.test"],
               msg)
    line = sent_line(m, qid, "good@remote.test", "sent")
    assert "tls=TLSv1." in line, line
    assert "550 5.1.1" in sent_line(m, qid, "bad@remote.test", "bounced")
    q2 = send(m, "alice@home.test", ["good@remote.test"], make_message(8))
    sent_line(m, q2, "good@remote.test", "sent")
    assert hop.connections == 1
    assert [g for g in hop.groups if g != ["EHLO"]] == [
        ["MAIL", "RCPT", "RCPT", "BDAT"], ["RSET", "MAIL", "RCPT", "BDAT"]]
    assert hop.groups.count(["EHLO"]) == 2      # before and after STARTTLS
    _, rest = strip_received(hop.bodies[0])
    assert rest == msg
    assert b"X-Serial: 8" in hop.bodies[1]
    assert hop.errors == []
