"""A test SMTP sink: records every message mtad relays to it.

Raw asyncio in a background thread (no aiosmtpd: the tests need to steer
the sink's answers exactly).  It speaks enough ESMTP for a relay client:
EHLO/HELO, MAIL, RCPT, DATA (with dot-unstuffing), BDAT (when CHUNKING is
offered), RSET, NOOP, QUIT, and PIPELINING (commands are answered in order
as they arrive, so pipelined batches just work).

Steering (attributes; change them any time, they are read per command):
  fail_first   answer `fail_code` to the first K end-of-data replies
  fail_code    default "451 4.3.0 try again later"
  reject       set of recipient addresses answered "550 5.1.1 ..."
  mail_reply   if set, MAIL is answered with this line and the sender is
               not taken (RCPT then gets 503, DATA and BDAT 554)
  defer        set of recipient addresses answered "451 4.2.0 ..." at RCPT
  data_delay   seconds to wait before answering the end of data
  caps         EHLO keywords offered (default PIPELINING, 8BITMIME,
               SMTPUTF8, DSN, SIZE, ENHANCEDSTATUSCODES)
  greeting     the banner; anything but 220 is sent and the line closed
  ehlo_ok      False: EHLO gets 502, so the client must fall back to HELO
  rset_reply   answer RSET with this line and close (a dead reused line)
  lenient_eod  True: like a lenient MTA, take a bare CR or bare LF as a
               line end in DATA too, so "\r.\r\n" or "\n.\n" ends the
               data and what follows is read as commands (smuggling tests)
  reply_text   if set, the text of the 250 after the data (any bytes)
  rcpt_replies {address: bytes}: answer RCPT for that address with this
               whole line (any bytes), and do not take the recipient
  rcpt_max     if set, RCPTs past it in one transaction get "452 4.5.3"
  mail_max     if set, a MAIL past it in one connection gets "421 4.7.0"
               and the connection closes (what LIMITS RCPTMAX/MAILMAX,
               RFC 9422, announce when they are in caps)
  close_after_data  close the connection after each end-of-data reply
               (so every message needs a connection of its own)
  hold         a threading.Event: while it is clear, the end of data is
               not answered (the test changes things meanwhile, then sets it)
  mute         True: accept connections and say nothing (a stalled next hop)
  stall_first  never answer the first K ends of data (until the client
               closes: then the message is dropped, as never accepted)
  tls_context  an ssl.SSLContext (server side, see tls_server_context()):
               STARTTLS is offered (RFC 3207) and served with it
  starttls     False: not offered even with a context (default True)
  tls_break    True: STARTTLS gets its 220; after the client's first
               handshake bytes the sink sends bytes that are no TLS
               record and closes (a broken handshake);
               "with-reply": those bytes go in the same write as the 220
               (what a plaintext injection after STARTTLS looks like)
  requiretls   True: REQUIRETLS (RFC 8689) in the EHLO reply of connections
               that did STARTTLS (never in plaintext, as the RFC says)
  starttls_reply  if set, STARTTLS (offered) is answered with this line
               and the session goes on in plaintext (e.g. "454 4.7.0 ...")
  tls          {conn_id: {"version", "cipher", "resumed", "sni"}} of the
               connections that did STARTTLS; Message.tls is the entry of
               the connection the message came on (None: plaintext)

Run as a module for manual tests: python3 -m sink --port 2526
"""
import asyncio
import re
import ssl
import threading
import time

DEFAULT_CAPS = ("PIPELINING", "SIZE 104857600", "8BITMIME", "SMTPUTF8",
                "DSN", "ENHANCEDSTATUSCODES")


class Message:
    def __init__(self, mail_from, mail_params, rcpt_tos, rcpt_params, data,
                 peer, conn_id):
        self.mail_from = mail_from
        self.mail_params = mail_params
        self.rcpt_tos = rcpt_tos
        self.rcpt_params = rcpt_params
        self.data = data
        self.peer = peer
        self.conn_id = conn_id
        self.tls = None             # the sink's tls entry, when TLS

    def __repr__(self):
        return "<Message from=%r to=%r %d bytes>" % (
            self.mail_from, self.rcpt_tos, len(self.data))


def _path(arg):
    """'FROM:<a@b> SIZE=1' -> ('a@b', ['SIZE=1'])."""
    _, _, rest = arg.partition(":")
    rest = rest.strip()
    if rest.startswith("<"):
        end = rest.find(">")
        addr = rest[1:end]
        params = rest[end + 1:].split()
    else:
        parts = rest.split()
        addr = parts[0] if parts else ""
        params = parts[1:]
    return addr, params


def tls_server_context(cert, key):
    """A server context for the sink from a PEM chain (leaf first) and
    key; it records the SNI each client sent (Sink.tls[...]["sni"])."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.sni_names = {}

    def sni(sslobj, name, _ctx):
        ctx.sni_names[id(sslobj)] = name
        return None

    ctx.sni_callback = sni
    return ctx


class Sink:
    def __init__(self, host="127.0.0.1", port=0, caps=DEFAULT_CAPS,
                 name="sink.test"):
        self.host = host
        self.port = port
        self.caps = list(caps)
        self.name = name
        self.fail_first = 0
        self.fail_code = "451 4.3.0 try again later"
        self.reject = set()
        self.mail_reply = None      # e.g. "451 4.3.0 ...": MAIL refused
        self.defer = set()
        self.data_delay = 0.0
        self.greeting = "220 %s ESMTP test sink" % name
        self.ehlo_ok = True         # False: 502 to EHLO (HELO fallback)
        self.rset_reply = None      # e.g. "421 ...": answer RSET so, close
        self.lenient_eod = False
        self.reply_text = None
        self.rcpt_replies = {}
        self.close_after_data = False
        self.rcpt_max = None        # 452 past this many RCPTs
        self.mail_max = None        # 421 and close past this many MAILs
        self.hold = None            # threading.Event gating end-of-data
        self.mute = False           # True: no greeting, no answer at all
        self.stall_first = 0        # ends of data left unanswered
        self.tls_context = None     # ssl.SSLContext: offer STARTTLS
        self.starttls = True        # with a context: offer it
        self.tls_break = False      # 220 to STARTTLS, then junk and close
        self.starttls_reply = None  # e.g. "454 4.7.0 TLS not available"
        self.tls = {}               # conn_id -> what the handshake gave
        self.requiretls = False     # offer REQUIRETLS after STARTTLS
        self.commands = []          # every command verb, in order
        self.messages = []
        self.connections = 0
        self.transactions = 0       # end-of-data replies given
        self.events = []            # ("data_started", conn_id) etc.
        self._lock = threading.Lock()
        self._loop = None
        self._server = None
        self._thread = None
        self._ready = threading.Event()

    # ---- lifecycle ----
    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("sink did not start")
        return self

    def _run(self):
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(
            self._session, self.host, self.port, limit=1 << 24))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        pending = asyncio.all_tasks(self._loop)
        for t in pending:
            t.cancel()
        self._loop.run_until_complete(asyncio.gather(
            *pending, return_exceptions=True))
        self._loop.close()

    def stop(self):
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    @property
    def route(self):
        return "smtp:[%s]:%d" % (self.host, self.port)

    # ---- queries ----
    def received(self):
        with self._lock:
            return list(self.messages)

    def wait_for(self, n, timeout=30.0):
        """Wait until at least n messages arrived; returns them."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self._lock:
                if len(self.messages) >= n:
                    return list(self.messages)
            time.sleep(0.05)
        with self._lock:
            raise AssertionError("sink got %d messages, wanted %d" % (
                len(self.messages), n))

    def wait_event(self, kind, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self._lock:
                for e in self.events:
                    if e[0] == kind:
                        return e
            time.sleep(0.02)
        raise AssertionError("no %s event" % kind)

    def messages_to(self, addr):
        return [m for m in self.received() if addr in m.rcpt_tos]

    # ---- the protocol ----
    async def _session(self, reader, writer):
        with self._lock:
            self.connections += 1
            conn_id = self.connections
        peer = writer.get_extra_info("peername")
        state = {"from": None, "fparams": [], "rcpts": [], "rparams": [],
                 "bdat": bytearray()}
        nmail = 0                   # MAIL commands taken on this connection

        def reset():
            state.update({"from": None, "fparams": [], "rcpts": [],
                          "rparams": [], "bdat": bytearray()})

        async def reply(line):
            writer.write((line.encode() if isinstance(line, str) else line)
                         + b"\r\n")
            await writer.drain()

        pushback = bytearray()

        async def readline():
            """A line (to LF), first from bytes a lenient DATA left over."""
            if pushback:
                i = pushback.find(b"\n")
                if i < 0:
                    pushback.extend(await reader.readline())
                    i = pushback.find(b"\n")
                    if i < 0:
                        i = len(pushback) - 1
                line = bytes(pushback[:i + 1])
                del pushback[:i + 1]
                return line
            return await reader.readline()

        try:
            if self.mute:
                with self._lock:
                    self.events.append(("muted", conn_id))
                await reader.read()     # until the client gives up
                return
            await reply(self.greeting)
            if not self.greeting.startswith("220"):
                return
            while True:
                line = await readline()
                if not line:
                    return
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                verb, _, arg = text.partition(" ")
                verb = verb.upper()
                with self._lock:
                    self.commands.append((conn_id, verb))
                if verb == "EHLO" and not self.ehlo_ok:
                    await reply("502 5.5.2 EHLO not implemented")
                elif verb == "EHLO":
                    lines = [self.name] + list(self.caps)
                    if (self.tls_context is not None and self.starttls
                            and conn_id not in self.tls):
                        lines.append("STARTTLS")
                    if self.requiretls and conn_id in self.tls:
                        lines.append("REQUIRETLS")
                    out = ["250-%s" % l for l in lines[:-1]]
                    out.append("250 %s" % lines[-1])
                    await reply("\r\n".join(out))
                elif verb == "HELO":
                    await reply("250 %s" % self.name)
                elif verb == "MAIL" and self.mail_reply:
                    reset()
                    await reply(self.mail_reply)
                elif (verb == "MAIL" and self.mail_max is not None and
                      nmail >= self.mail_max):
                    await reply("421 4.7.0 too many transactions")
                    return
                elif verb == "MAIL":
                    nmail += 1
                    reset()
                    addr, params = _path(arg)
                    state["from"], state["fparams"] = addr, params
                    await reply("250 2.1.0 Ok")
                elif verb == "RCPT":
                    addr, params = _path(arg)
                    if state["from"] is None:
                        await reply("503 5.5.1 need MAIL")
                    elif addr in self.rcpt_replies:
                        await reply(self.rcpt_replies[addr])
                    elif addr in self.reject:
                        await reply("550 5.1.1 <%s>: Recipient address "
                                    "rejected: no such user" % addr)
                    elif addr in self.defer:
                        await reply("451 4.2.0 <%s>: mailbox busy, try "
                                    "again later" % addr)
                    elif (self.rcpt_max is not None and
                          len(state["rcpts"]) >= self.rcpt_max):
                        await reply("452 4.5.3 too many recipients")
                    else:
                        state["rcpts"].append(addr)
                        state["rparams"].append(params)
                        await reply("250 2.1.5 Ok")
                elif verb == "DATA":
                    if not state["rcpts"]:
                        await reply("554 5.5.1 no valid recipients")
                        continue
                    await reply("354 End data with <CR><LF>.<CR><LF>")
                    with self._lock:
                        self.events.append(("data_started", conn_id))
                    if self.lenient_eod:
                        data = await self._read_data_lenient(readline,
                                                             pushback)
                    else:
                        data = await self._read_data(reader)
                    if data is None:
                        return
                    await self._end_of_data(reply, state, data, peer,
                                            conn_id, reader)
                    reset()
                    if self.close_after_data:
                        return
                elif verb == "BDAT":
                    parts = arg.split()
                    size = int(parts[0])
                    last = len(parts) > 1 and parts[1].upper() == "LAST"
                    chunk = await reader.readexactly(size)
                    state["bdat"] += chunk
                    if not last:
                        await reply("250 2.0.0 %d octets received" % size)
                        continue
                    if not state["rcpts"]:
                        await reply("554 5.5.1 no valid recipients")
                        reset()
                        continue
                    with self._lock:
                        self.events.append(("data_started", conn_id))
                    await self._end_of_data(reply, state,
                                            bytes(state["bdat"]), peer,
                                            conn_id, reader)
                    reset()
                elif verb == "RSET" and self.rset_reply:
                    await reply(self.rset_reply)
                    return
                elif verb == "RSET":
                    reset()
                    await reply("250 2.0.0 Ok")
                elif verb == "STARTTLS" and (self.tls_context is None or
                                             not self.starttls or
                                             conn_id in self.tls):
                    await reply("502 5.5.1 STARTTLS not offered")
                elif verb == "STARTTLS" and self.starttls_reply:
                    await reply(self.starttls_reply)
                elif verb == "STARTTLS" and self.tls_break == "with-reply":
                    with self._lock:
                        self.events.append(("tls_broken", conn_id))
                    await reply(b"220 2.0.0 Ready to start TLS\r\n"
                                b"250 injected")
                    return
                elif verb == "STARTTLS":
                    await reply("220 2.0.0 Ready to start TLS")
                    if self.tls_break:
                        with self._lock:
                            self.events.append(("tls_broken", conn_id))
                        # the junk goes only after the client's first
                        # handshake bytes: sent at once, it could reach the
                        # client in the same read as the 220, which is the
                        # "with-reply" case (an injection), not this one
                        await reader.read(1)
                        writer.write(b"this is no TLS record\r\n" * 4)
                        await writer.drain()
                        return
                    try:
                        await writer.start_tls(self.tls_context)
                    except (ssl.SSLError, OSError) as e:
                        with self._lock:
                            self.events.append(("tls_failed", conn_id,
                                                str(e)))
                        return
                    so = writer.get_extra_info("ssl_object")
                    names = getattr(self.tls_context, "sni_names", {})
                    with self._lock:
                        self.tls[conn_id] = {
                            "version": so.version(),
                            "cipher": so.cipher()[0],
                            "resumed": so.session_reused,
                            "sni": names.pop(id(so), None),
                        }
                    reset()
                elif verb == "NOOP":
                    await reply("250 2.0.0 Ok")
                elif verb == "QUIT":
                    await reply("221 2.0.0 Bye")
                    return
                else:
                    await reply("502 5.5.2 command not recognized")
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            with self._lock:
                self.events.append(("closed", conn_id))
            try:
                writer.close()
            except Exception:
                pass

    async def _read_data(self, reader):
        """Read until CRLF.CRLF; undo dot-stuffing."""
        out = bytearray()
        while True:
            line = await reader.readline()
            if not line:
                return None
            if line == b".\r\n":
                return bytes(out)
            if line.startswith(b"."):
                line = line[1:]
            out += line

    async def _read_data_lenient(self, readline, pushback):
        """Read until a "." alone on a line, where CRLF, a bare CR and a
        bare LF all end lines; undo dot-stuffing; leave what follows the
        end mark in pushback, to be read as commands."""
        buf = bytearray()
        eod = re.compile(rb"(\A|\r\n|\r|\n)\.(\r\n|\r(?!$)|\n)")
        while True:
            line = await readline()
            if not line:
                return None
            buf += line
            m = eod.search(buf)
            if m:
                pushback[:0] = buf[m.end():]
                body = bytes(buf[:m.end(1)])   # its line end is content
                return re.sub(rb"(\A|\r\n|\r|\n)\.", rb"\1", body)

    async def _end_of_data(self, reply, state, data, peer, conn_id,
                           reader):
        while self.hold is not None and not self.hold.is_set():
            await asyncio.sleep(0.02)
        with self._lock:
            stall = self.stall_first > 0
            if stall:
                self.stall_first -= 1
        if stall:
            await reader.read()         # until the client gives up
            with self._lock:
                self.events.append(("dropped", conn_id))
            return
        if self.data_delay:
            await asyncio.sleep(self.data_delay)
            if reader.at_eof():
                # the client went away before our reply: like a real MTA
                # that never said 250, we do not keep the message
                with self._lock:
                    self.events.append(("dropped", conn_id))
                return
        with self._lock:
            self.transactions += 1
            failing = self.fail_first > 0
            if failing:
                self.fail_first -= 1
        if failing:
            await reply(self.fail_code)
            return
        msg = Message(state["from"], state["fparams"], list(state["rcpts"]),
                      list(state["rparams"]), data, peer, conn_id)
        with self._lock:
            msg.tls = self.tls.get(conn_id)
            self.messages.append(msg)
            n = len(self.messages)
        if self.reply_text is not None:
            await reply(b"250 " + self.reply_text)
        else:
            await reply("250 2.0.0 Ok: queued as S%d" % n)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=2526)
    a = ap.parse_args()
    s = Sink(port=a.port).start()
    print("sink on", s.route)
    try:
        while True:
            time.sleep(1)
            print(len(s.received()), "messages")
    except KeyboardInterrupt:
        s.stop()
