"""Helpers for the inbound SMTP tests: a raw line client that reads whole
(multi-line) replies, and a reader for spool queue files.

The raw client is used instead of smtplib wherever the test must control
the exact bytes on the wire (pipelining in one write, bare LF, dot
stuffing, BDAT) or read replies the server sends unasked (421 on timeout).
"""
import os
import re
import socket
import time

# An SMTP reply line with an RFC 3463 enhanced status code.
ENHANCED = re.compile(rb"^[2-5]\d\d[ -][245]\.\d{1,3}\.\d{1,3}( |$)")


class Reply:
    def __init__(self, lines):
        self.lines = lines                      # raw bytes, without CRLF
        self.code = int(lines[-1][:3])
        self.text = b"\n".join(l[4:] for l in lines)

    def __repr__(self):
        return "Reply(%r)" % self.lines


class Client:
    """A line-oriented SMTP client over a plain socket."""

    def __init__(self, port, source=None, timeout=10.0, host="127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        if source:
            self.sock.bind((source, 0))
        self.sock.connect((host, port))
        self.local_port = self.sock.getsockname()[1]
        self.buf = bytearray()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = self.buf[:i]
                del self.buf[:i + 2]
                return bytes(line)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed; partial %r" % self.buf)
            self.buf += chunk

    def reply(self):
        lines = []
        while True:
            line = self._line()
            lines.append(line)
            if len(line) < 4 or line[3:4] != b"-":
                return Reply(lines)

    def replies(self, n):
        return [self.reply() for _ in range(n)]

    def cmd(self, line):
        self.send(line + b"\r\n" if isinstance(line, bytes) else line + "\r\n")
        return self.reply()

    def greet(self, ehlo="client.test"):
        r = self.reply()
        assert r.code == 220, r
        r = self.cmd("EHLO " + ehlo)
        assert r.code == 250, r
        return r

    def closed(self, timeout=5.0):
        """True when the server closes the connection within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def dot_stuff(body):
    """Body bytes (CRLF lines) -> DATA bytes including the final dot."""
    if not body.endswith(b"\r\n"):
        body += b"\r\n"
    out = body.replace(b"\r\n.", b"\r\n..")
    if out.startswith(b"."):
        out = b"." + out
    return out + b".\r\n"


def assert_enhanced(reply):
    """Every reply line except 220/EHLO continuation carries x.y.z."""
    for line in reply.lines:
        assert ENHANCED.match(line), "no enhanced status code: %r" % line


def read_queue_file(path):
    """(envelope dict, body bytes) of one spool queue file."""
    with open(path, "rb") as f:
        data = f.read()
    head, body = data.split(b"\nend\n", 1)
    env = {"rcpt": []}
    for line in head.split(b"\n")[1:]:
        key, _, val = line.partition(b" ")
        if key == b"rcpt":
            env["rcpt"].append(val)
        else:
            env[key.decode()] = val
    return env, body


def xtext_decode(v):
    if v == b"+":
        return None
    return re.sub(rb"\+([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), v)


def strip_received(body):
    """Split off our Received: header (first field, folded lines)."""
    assert body.startswith(b"Received: "), body[:80]
    pos = 0
    while True:
        end = body.index(b"\r\n", pos) + 2
        pos = end
        if body[pos:pos + 1] not in (b"\t", b" "):
            return body[:pos], body[pos:]


def wait_for(pred, timeout=10.0, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def spool_files(spool, sub):
    try:
        return sorted(n for n in os.listdir(os.path.join(spool, sub))
                      if not n.startswith("."))
    except FileNotFoundError:
        return []


class Blackhole:
    """A listener that never accepts: delivery attempts toward it hang in
    the kernel's backlog, so accepted messages stay in queue/ for the test
    to read, whatever the delivery code's retry and bounce policy."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]

    def route(self):
        return "smtp:[127.0.0.1]:%d" % self.port

    def close(self):
        self.sock.close()
