"""PROXY protocol listeners, driven by raw sockets (no balancer): the map
form of server.listen and its errors, proxy_from, bad and slow headers,
the header's address as the client for relay control, per-address limits,
logs and Received:, bytes after the header kept, and mtactl drain."""
import os
import re
import socket
import subprocess
import time

import pytest

from mtadtest import MTAD, MTACTL
from mtadtest import (make_proxy_node, read_reply, v1_header, v2_header,
                        wait_for)


def check(path):
    return subprocess.run([MTAD, "-t", "-c", path], capture_output=True,
                          text=True, timeout=30)


def write(tmp, text):
    p = os.path.join(tmp, "relay.yaml")
    with open(p, "w") as f:
        f.write(text)
    return p


BASE = """\
server:
  listen:
    - "127.0.0.1:2525"
%s
routes:
  default: "discard"
"""


@pytest.mark.parametrize("entry,want", [
    ('    - address: "127.0.0.1:2526"\n      proxy_protocol: v2\n'
     '      proxy_from: [10.0.0.0/8]\n', None),
    ('    - address: "127.0.0.1:2526"\n      proxy_protocol: auto\n'
     '      proxy_from: [10.0.0.0/8, "::1/128"]\n', None),
    ('    - {address: "127.0.0.1:2526"}\n', None),
    ('    - address: "127.0.0.1:2526"\n      proxy_protcol: v2\n',
     r"relay.yaml:5:7: server.listen\[1\].proxy_protcol: unknown key "
     r"'proxy_protcol' \(expected one of: address, proxy_protocol, "
     r"proxy_from, role, tls, pregreet, pregreet_multiline, dnsbl, "
     r"greylist, milters\)"),
    ('    - address: "127.0.0.1:2526"\n      proxy_protocol: v3\n'
     '      proxy_from: [10.0.0.0/8]\n',
     r"relay.yaml:5:23: server.listen\[1\].proxy_protocol: expected v1, v2 "
     r"or auto, got 'v3'"),
    ('    - address: "127.0.0.1:2526"\n      proxy_protocol: v1\n',
     r"relay.yaml:5:7: server.listen\[1\].proxy_protocol: needs proxy_from"),
    ('    - address: "127.0.0.1:2526"\n      proxy_from: [10.0.0.0/8]\n',
     r"relay.yaml:5:7: server.listen\[1\].proxy_from: only with "
     r"proxy_protocol"),
    ('    - address: "127.0.0.1:2526"\n      proxy_protocol: v1\n'
     '      proxy_from: [10.0.0/33]\n',
     r"relay.yaml:6:20: server.listen\[1\].proxy_from\[0\]: expected a "
     r"network"),
    ('    - proxy_protocol: v1\n      proxy_from: [10.0.0.0/8]\n',
     r"relay.yaml:4:7: server.listen\[1\]: missing key address"),
    ('    - address: "127.0.0.1:2525"\n      proxy_protocol: v1\n'
     '      proxy_from: [10.0.0.0/8]\n',
     r"relay.yaml:4:7: server.listen\[1\]: '127.0.0.1:2525' is listed "
     r"twice"),
    ('    - address: "127.0.0.1:2526"\n      address: "127.0.0.1:2527"\n',
     r"relay.yaml:5:7: server.listen\[1\].address: duplicate key"),
])
def test_listen_map_form(workdir, entry, want):
    r = check(write(workdir, BASE % entry))
    if want is None:
        assert r.returncode == 0, r.stdout + r.stderr
    else:
        assert r.returncode != 0
        assert re.search(want, r.stdout + r.stderr), r.stdout + r.stderr


def status_field(m, key):
    r = m.ctl("status", check=True)
    mm = re.search(r"^proxy: refused=(\d+) bad_header=(\d+)", r.stdout,
                   re.M)
    assert mm, r.stdout
    return int(mm.group(1 if key == "refused" else 2))


def connect(port, src="127.0.0.1"):
    s = socket.socket()
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def closed_without_greeting(s, timeout=10):
    """True when the server closes the connection having sent nothing."""
    s.settimeout(timeout)
    try:
        data = s.recv(100)
    except ConnectionResetError:
        return True
    return data == b""


@pytest.fixture
def pnode(mtad_factory, sink):
    m = make_proxy_node(mtad_factory, "p1.test", "auto", {
        "relay": {"allow_networks": ["192.0.2.0/24"]},
        "limits": {"command_timeout": "1s", "max_connections_per_ip": 2},
        "routes": {"default": sink.route}})
    m.start()
    return m


def test_peer_not_in_proxy_from_is_refused(pnode):
    s = connect(pnode.proxy_port, src="127.0.0.2")
    s.sendall(v1_header("192.0.2.5", 1000))
    assert closed_without_greeting(s)
    s.close()
    pnode.wait_log("refused [127.0.0.2]")
    assert "not in proxy_from" in pnode.log_text()
    assert status_field(pnode, "refused") == 1
    assert "connect from [192.0.2.5]" not in pnode.log_text()


@pytest.mark.parametrize("junk,why", [
    (b"EHLO client.test\r\n", "not a PROXY protocol header"),
    (b"PROXY TCP4 192.0.2.5 127.0.0.1 99999 25\r\n", "PROXY v1: bad port"),
    (b"PROXY TCP4 192.0.2.5\n", "PROXY v1: LF without CR"),
    (b"\r\n\r\n\x00\r\nQUIT\n\x21\x31\x00\x00", "AF_UNIX"),
])
def test_bad_header_closes(pnode, junk, why):
    s = connect(pnode.proxy_port)
    s.sendall(junk)
    assert closed_without_greeting(s)
    s.close()
    pnode.wait_log(why)
    assert status_field(pnode, "bad") == 1


def test_slow_header_times_out(pnode):
    s = connect(pnode.proxy_port)
    s.sendall(b"PROXY TCP4 192.0.2.5 ")     # and then nothing
    t0 = time.monotonic()
    assert closed_without_greeting(s, timeout=10)
    assert time.monotonic() - t0 >= 0.9      # command_timeout 1s bounds it
    s.close()
    pnode.wait_log("no complete PROXY header in time")
    assert status_field(pnode, "bad") == 1
    # EOF inside the header is bad too
    s = connect(pnode.proxy_port)
    s.sendall(b"\r\n\r\n\x00\r\nQU")
    s.shutdown(socket.SHUT_WR)
    assert closed_without_greeting(s)
    s.close()
    pnode.wait_log("connection closed before the PROXY header")
    wait_for(lambda: status_field(pnode, "bad") == 2, what="bad_header=2")


def smtp_dialog(s, lines):
    out = [read_reply(s)]
    for ln in lines:
        s.sendall(ln + b"\r\n")
        out.append(read_reply(s))
    return out


@pytest.mark.parametrize("ver", ["v1", "v2"])
def test_header_address_is_the_client(pnode, sink, ver):
    """The balancer (127.0.0.1, in the default relay networks but not in
    this node's) passes 192.0.2.5 (allowed) and 198.51.100.7 (denied)."""
    hdr = v1_header if ver == "v1" else v2_header
    s = connect(pnode.proxy_port)
    s.sendall(hdr("192.0.2.5", 40001))
    r = smtp_dialog(s, [b"EHLO c.test", b"MAIL FROM:<a@example.org>",
                        b"RCPT TO:<x@far.example>", b"DATA"])
    assert r[0].startswith(b"220"), r
    assert r[3].startswith(b"250"), r       # RCPT: relay allowed
    assert r[4].startswith(b"354"), r
    s.sendall(b"Subject: t\r\n\r\nhi\r\n.\r\n")
    assert read_reply(s).startswith(b"250")
    s.sendall(b"QUIT\r\n")
    s.close()
    msgs = sink.wait_for(1)
    assert b"Received: from c.test ([192.0.2.5])" in msgs[0].data, \
        msgs[0].data[:300]
    s = connect(pnode.proxy_port)
    s.sendall(hdr("198.51.100.7", 40002))
    r = smtp_dialog(s, [b"EHLO c.test", b"MAIL FROM:<a@example.org>",
                        b"RCPT TO:<x@far.example>"])
    assert r[3].startswith(b"554 5.7.1"), r
    s.close()
    log = pnode.wait_log("Relay access denied")
    assert "RCPT from [198.51.100.7]:40002" in log
    assert "connect from [192.0.2.5]:40001" in log
    assert "PROXY %s for [192.0.2.5]:40001" % ver in log


def test_bytes_after_the_header_are_the_clients(pnode):
    """Header and a command in one segment: the command is not eaten."""
    s = connect(pnode.proxy_port)
    s.sendall(v2_header("192.0.2.9", 5, tlv=b"\x04\x00\x03abc") +
              b"NOOP\r\n")
    got = b""
    s.settimeout(5)
    while got.count(b"\r\n") < 2:
        chunk = s.recv(1000)
        assert chunk, got
        got += chunk
    assert got.startswith(b"220 ") and b"\r\n250 " in got, got
    s.close()


def test_per_address_limit_uses_the_header(pnode):
    held = []
    for i in range(2):
        s = connect(pnode.proxy_port)
        s.sendall(v1_header("192.0.2.77", 100 + i))
        assert read_reply(s).startswith(b"220")
        held.append(s)
    s = connect(pnode.proxy_port)
    s.sendall(v1_header("192.0.2.77", 200))
    r = read_reply(s)
    assert r.startswith(b"421 4.7.0") and b"from 192.0.2.77" in r, r
    s.close()
    s = connect(pnode.proxy_port)            # another client is fine
    s.sendall(v1_header("192.0.2.78", 300))
    assert read_reply(s).startswith(b"220")
    s.close()
    for h in held:
        h.close()


def test_drain_delivers_then_stops(mtad_factory, sink):
    """A deferred message and an open session: drain closes the port,
    lets the session finish its message, delivers both, then stops."""
    sink.fail_first = 1
    m = mtad_factory({"routes": {"default": sink.route},
                      "delivery": {"retry": ["1s"]}}).start()
    c = m.smtp()
    c.ehlo("c.test")
    c.sendmail("a@example.org", ["b@example.net"], b"Subject: 1\r\n\r\n1\r\n")
    wait_for(lambda: sink.transactions >= 1,
             what="the first (deferred) attempt")
    held = m.smtp()
    held.ehlo("c.test")
    d = subprocess.Popen([MTACTL, "-c", m.cfg_path, "drain"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    m.wait_log("draining: listeners closed", timeout=10)
    wait_for(lambda: m.log_text().count("draining: listeners closed") == 2,
             what="both workers draining")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", m.port), timeout=2)
    held.sendmail("a@example.org", ["c@example.net"],
                  b"Subject: 2\r\n\r\n2\r\n")
    held.quit()
    c.quit()
    out, err = d.communicate(timeout=60)
    assert d.returncode == 0, out + err
    assert "draining:" in out and "drained: mtad stopped, queue empty" in out
    m.proc.wait(10)
    subjects = sorted(x.data.split(b"Subject: ")[1][:1] for x in
                      sink.received())
    assert subjects == [b"1", b"2"], subjects
    assert m.queue_ids() == []
    assert "drained: queue empty, no sessions; stopping" in m.log_text()
