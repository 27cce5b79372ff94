"""A milter (Sendmail milter protocol 6, the server side) in Python for the
tests: it answers each command by a script the test sets, records what it
was sent (commands, macros, headers, body), and can die or stall at a
chosen command.

script (a dict, read when a command arrives, so a test changes it between
sessions):
  actions, protocol   what OPTNEG answers (SMFIF_*, SMFIP_* bits)
  replies             {cmd: packet} for C H M R T L N B (default 'c')
  rcpt_replies        {address: packet}: the RCPT reply for that address
  eom                 a list of packets sent at end of message, then the
                      final one (default: just 'c'); None in it closes
                      the connection there, ("sleep", s) waits s seconds
  die_at / stall_at   a command byte: close the socket / never answer it
  delay               {cmd: seconds} to wait before answering it
A packet is (cmd, data bytes).
"""
import socket
import struct
import threading

SMFIF_ALL = 0x1ff


def pkt(cmd, data=b""):
    return struct.pack(">I", len(data) + 1) + cmd.encode() + data


def z(*strs):
    """NUL-ended strings, as the protocol carries them."""
    return b"".join((s.encode() if isinstance(s, str) else s) + b"\0"
                    for s in strs)


def u32(n):
    return struct.pack(">I", n)


class FakeMilter:
    def __init__(self, host="127.0.0.1", port=0):
        self.script = {}
        self.sessions = []          # per connection: list of (cmd, data)
        self.lock = threading.Lock()
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((host, port))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.stop_ev = threading.Event()
        self.conns = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def socket_spec(self):
        return "inet:127.0.0.1:%d" % self.port

    def stop(self):
        self.stop_ev.set()
        try:
            self.srv.close()
        except OSError:
            pass
        for c in list(self.conns):
            try:
                c.close()
            except OSError:
                pass

    def last(self):
        with self.lock:
            return list(self.sessions[-1]) if self.sessions else []

    def all(self):
        with self.lock:
            return [list(s) for s in self.sessions]

    def _serve(self):
        while not self.stop_ev.is_set():
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._run, args=(c,), daemon=True).start()

    @staticmethod
    def _recv(c, n):
        b = b""
        while len(b) < n:
            d = c.recv(n - len(b))
            if not d:
                raise EOFError
            b += d
        return b

    def _run(self, c):
        log = []
        with self.lock:
            self.sessions.append(log)
        try:
            while True:
                n = struct.unpack(">I", self._recv(c, 4))[0]
                body = self._recv(c, n)
                cmd, data = chr(body[0]), body[1:]
                with self.lock:
                    log.append((cmd, data))
                if not self._answer(c, cmd, data):
                    break
        except (EOFError, OSError):
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def _answer(self, c, cmd, data):
        sc = self.script
        if cmd == sc.get("die_at"):
            return False
        if cmd == sc.get("stall_at"):
            self.stop_ev.wait(60)
            return False
        if cmd in sc.get("delay", {}):
            self.stop_ev.wait(sc["delay"][cmd])
        if cmd == "O":
            c.sendall(pkt("O", u32(6) + u32(sc.get("actions", SMFIF_ALL)) +
                          u32(sc.get("protocol", 0))))
        elif cmd in ("D", "A"):
            pass
        elif cmd == "Q":
            return False
        elif cmd == "E":
            for p in sc.get("eom", [("c", b"")]):
                if p is None:
                    return False
                if p[0] == "sleep":
                    if self.stop_ev.wait(p[1]):
                        return False
                    continue
                c.sendall(pkt(*p))
        elif cmd == "R" and data.split(b"\0")[0].decode() in \
                sc.get("rcpt_replies", {}):
            c.sendall(pkt(*sc["rcpt_replies"][data.split(b"\0")[0].decode()]))
        elif cmd in "CHMRTLNB":
            if cmd in ("L", "B") and sc.get("protocol", 0) & \
                    {"L": 0x80, "B": 0x80000}[cmd]:
                return True         # no reply wanted
            c.sendall(pkt(*sc.get("replies", {}).get(cmd, ("c", b""))))
        return True


def macros(log):
    """Every macro the session was sent: {name: value}."""
    out = {}
    for cmd, data in log:
        if cmd != "D":
            continue
        parts = data[1:].split(b"\0")
        for i in range(0, len(parts) - 1, 2):
            out[parts[i].decode()] = parts[i + 1].decode()
    return out


def headers(log):
    return [tuple(p.decode() for p in d.split(b"\0")[:2])
            for c, d in log if c == "L"]


def body(log):
    return b"".join(d for c, d in log if c == "B")
