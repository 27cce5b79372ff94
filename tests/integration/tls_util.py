"""Helpers for the TLS performance tests (test_tls_perf.py): certificates
of both key types, a memory-BIO STARTTLS client that sees every TLS record
the server sends, and the client socket's own TCP counters.
"""
import os
import select
import socket
import ssl
import struct
import subprocess

TCP_INFO = getattr(socket, "TCP_INFO", 11)
TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", 12)
# struct tcp_info (linux/tcp.h): tcpi_segs_out is the u32 at byte 136
# (after 8 u8, 24 u32 and 4 u64: bytes_acked .. and pacing/max_pacing,
# bytes_received); present since Linux 4.2.
TCPI_SEGS_OUT = 136


def make_cert(d, name, kind, days=30):
    """A self-signed certificate and key in d: kind "rsa" (2048) or "ec"
    (P-256).  Returns (cert, key)."""
    cert = os.path.join(d, name + ".crt")
    key = os.path.join(d, name + ".key")
    newkey = (["-newkey", "rsa:2048"] if kind == "rsa" else
              ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
    subprocess.run(["openssl", "req", "-x509", *newkey, "-nodes",
                    "-keyout", key, "-out", cert, "-days", str(days),
                    "-subj", "/CN=%s.test.example" % name],
                   check=True, capture_output=True, timeout=120)
    os.chmod(cert, 0o644)
    os.chmod(key, 0o600)
    return cert, key


def cert_der(path):
    with open(path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def segs_out(sock):
    """Segments this socket has sent (data and pure ACKs alike)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 256)
    assert len(info) >= TCPI_SEGS_OUT + 4, "tcp_info too short"
    return struct.unpack_from("I", info, TCPI_SEGS_OUT)[0]


def records(data):
    """Split raw TLS bytes into (content type, length) of whole records;
    returns (list, leftover bytes)."""
    out = []
    while len(data) >= 5:
        ctype, _ver, n = struct.unpack("!BHH", data[:5])
        if len(data) < 5 + n:
            break
        out.append((ctype, n))
        data = data[5 + n:]
    return out, data


class BioClient:
    """STARTTLS over a plain socket through memory BIOs, so the test
    decides what goes out in which segment and sees each record that
    comes in."""

    def __init__(self, port, ctx, timeout=20.0):
        self.sock = socket.create_connection(("127.0.0.1", port),
                                             timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.inb, self.outb = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.ctx = ctx
        self.tls = None
        self.raw = b""              # bytes of a partial record
        self.recs = []              # (type, length) of every record seen

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def recv_line_plain(self):
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = self.sock.recv(4096)
            assert chunk, "closed in clear text"
            data += chunk
        return data

    def starttls(self, session=None):
        """Greeting, STARTTLS, then the handshake up to the moment the
        client's last flight (its Finished) waits in outb, unsent."""
        assert self.recv_line_plain().startswith(b"220 ")
        self.sock.sendall(b"STARTTLS\r\n")
        assert self.recv_line_plain().startswith(b"220 2.0.0")
        self.tls = self.ctx.wrap_bio(self.inb, self.outb, session=session)
        for _ in range(50):
            try:
                self.tls.do_handshake()
                return
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outb.read())
                self.feed(self.wait_data())
        raise AssertionError("handshake did not finish in 50 rounds")

    def wait_data(self):
        r, _, _ = select.select([self.sock], [], [], self.timeout)
        assert r, "nothing from the server in %ss" % self.timeout
        data = self.sock.recv(65536)
        assert data, "closed by the server"
        return data

    def feed(self, data):
        self.inb.write(data)
        recs, self.raw = records(self.raw + data)
        self.recs += recs

    def read_reply(self, nlines_last=1):
        """Application bytes up to and including nlines_last final reply
        lines ("ddd " lines)."""
        got = b""
        while True:
            try:
                got += self.tls.read(65536)
            except ssl.SSLWantReadError:
                pass
            finals = [l for l in got.split(b"\r\n") if l[3:4] == b" "]
            if len(finals) >= nlines_last and got.endswith(b"\r\n"):
                return got
            self.feed(self.wait_data())
