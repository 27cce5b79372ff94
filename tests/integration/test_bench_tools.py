"""The benchmark's own tools: smtpblast (load) and smtpsink (sink).

The bench's figures are only as good as their counting, so these tests check
that what smtpblast says was accepted is exactly what smtpsink counted
(messages, bytes, recipients), in every sending mode (pipelined DATA, BDAT,
lock-step, many messages per connection), that the sink's chosen share of
4xx/5xx answers is reported the same on both sides, that the sink speaks
DATA (dot-stuffing, the terminator across writes) and BDAT (chunks, LAST)
correctly, and that idle mode holds its connections.  No timing is asserted.
Loopback only, free ports, temporary directories, processes stopped by pid.
"""
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("MTAD_BUILD", "build"))
BLAST = os.path.join(BUILD, "bench", "smtpblast")
SINK = os.path.join(BUILD, "bench", "smtpsink")

pytestmark = pytest.mark.skipif(
    not (os.access(BLAST, os.X_OK) and os.access(SINK, os.X_OK)),
    reason="build/bench/smtpblast and smtpsink not built")


def kv(text):
    return {k: int(float(v)) for k, v in re.findall(r"(\w+)=([\d.]+)", text)}


class Sink:
    def __init__(self, *args):
        self.dir = tempfile.mkdtemp(prefix="bench-tools.")
        self.portfile = os.path.join(self.dir, "port")
        self.countfile = os.path.join(self.dir, "count")
        self.out = open(os.path.join(self.dir, "out"), "w+")
        self.proc = subprocess.Popen([SINK, "-p", self.portfile, "-c", self.countfile,
                                      "-i", "20"] + list(args),
                                     stdout=self.out, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while not os.path.exists(self.portfile) and time.time() < deadline:
            time.sleep(0.02)
        with open(self.portfile) as f:
            self.port = int(f.read())

    def stop(self):
        """SIGTERM: the sink prints its final counters and exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.seek(0)
        lines = [l for l in self.out.read().splitlines() if l.startswith("msgs=")]
        return kv(lines[-1]) if lines else {}

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


@pytest.fixture
def sink_factory():
    made = []

    def make(*args):
        s = Sink(*args)
        made.append(s)
        return s
    yield make
    for s in made:
        s.cleanup()


def blast(port, *args, timeout=60):
    r = subprocess.run([BLAST, "-s", "127.0.0.1:%d" % port, "-T", "30"] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return kv(r.stdout)


@pytest.mark.parametrize("mode", [[], ["-B"], ["-P"], ["-P", "-B"], ["-k", "0"], ["-k", "7"]],
                         ids=["pipelined-data", "bdat", "lockstep-data", "lockstep-bdat",
                              "one-connection-per-session", "seven-per-connection"])
def test_blast_and_sink_agree(sink_factory, mode):
    sink = sink_factory()
    res = blast(sink.port, "-c", "5", "-m", "120", "-z", "2000", *mode)
    got = sink.stop()
    assert res["accepted"] == 120 and res["errors"] == 0
    assert res["tempfail"] == 0 and res["permfail"] == 0
    assert got["msgs"] == 120
    assert got["bytes"] == 120 * 2000          # exact size, nothing lost or added
    assert got["rcpts"] == 120
    if mode == ["-k", "0"]:
        assert res["conns"] == 5
    if mode == ["-k", "7"]:
        assert 18 <= res["conns"] <= 18 + 5    # ceil(120/7), plus one short tail per session


@pytest.mark.parametrize("per_conn", ["1", "0"], ids=["connection-each", "one-connection"])
def test_paced_rate_is_never_exceeded(sink_factory, per_conn):
    """-R 100: message n starts no sooner than 0.2 s + n/100 s after the
    start, so 60 messages take at least 0.79 s however fast the sink is (a
    loaded machine can only make it slower), and every one arrives."""
    sink = sink_factory()
    r = subprocess.run([BLAST, "-s", "127.0.0.1:%d" % sink.port, "-T", "30", "-c", "5",
                        "-m", "60", "-k", per_conn, "-R", "100"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    res = kv(r.stdout)
    elapsed = float(re.search(r"elapsed_s=([\d.]+)", r.stdout).group(1))
    got = sink.stop()
    assert res["accepted"] == 60 and res["errors"] == 0
    assert got["msgs"] == 60
    assert elapsed >= 0.2 + 59 / 100.0, r.stdout


def test_paced_rate_must_be_a_rate(sink_factory):
    sink = sink_factory()
    for bad in ("-1", "1e9"):
        r = subprocess.run([BLAST, "-s", "127.0.0.1:%d" % sink.port, "-m", "1", "-R", bad],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "usage" in r.stderr, (bad, r.stdout, r.stderr)
    sink.stop()


def test_recipients_and_big_message(sink_factory):
    sink = sink_factory()
    res = blast(sink.port, "-c", "3", "-m", "6", "-r", "4", "-z", "1M")
    got = sink.stop()
    assert res["accepted"] == 6
    assert got["msgs"] == 6 and got["rcpts"] == 24
    assert got["bytes"] == 6 * 1048576


def test_chosen_share_of_failures_is_reported_by_both(sink_factory):
    sink = sink_factory("-4", "20", "-5", "10")
    res = blast(sink.port, "-c", "10", "-m", "600", "-k", "0")
    got = sink.stop()
    assert res["accepted"] + res["tempfail"] + res["permfail"] == 600
    assert got["msgs"] == res["accepted"]
    assert got["tempfail"] == res["tempfail"] and got["permfail"] == res["permfail"]
    # 600 draws at 20% and 10%: zero of either is (0.8^600, 0.9^600) impossible
    assert res["tempfail"] > 0 and res["permfail"] > 0


def test_delayed_replies_still_count(sink_factory):
    sink = sink_factory("-d", "20")
    res = blast(sink.port, "-c", "4", "-m", "40", "-k", "0")
    got = sink.stop()
    assert res["accepted"] == 40 and got["msgs"] == 40


def test_count_file_is_written(sink_factory):
    sink = sink_factory()
    blast(sink.port, "-c", "2", "-m", "10")
    deadline = time.time() + 10
    text = ""
    while time.time() < deadline:
        with open(sink.countfile) as f:
            text = f.read()
        if kv(text).get("msgs") == 10:
            break
        time.sleep(0.05)
    assert kv(text)["msgs"] == 10


def converse(port, chunks):
    """Send each chunk in its own write; return everything the sink said."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.recv(512)
        for c in chunks:
            s.sendall(c)
            time.sleep(0.05)
        s.sendall(b"QUIT\r\n")
        data = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
        return data


def test_sink_data_terminator_and_dot_stuffing(sink_factory):
    sink = sink_factory()
    out = converse(sink.port, [
        b"EHLO t\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n",
        b"Subject: x\r\n\r\n..leading dot\r",     # the terminator split over writes
        b"\n.",
        b"\r\n",
    ])
    got = sink.stop()
    codes = re.findall(rb"^(\d{3}) ", out, re.M)
    assert codes == [b"250", b"250", b"250", b"354", b"250", b"221"], out
    assert got["msgs"] == 1
    # the wire form, stuffed dot included, without the terminating ".\r\n"
    assert got["bytes"] == len(b"Subject: x\r\n\r\n..leading dot\r\n")


def test_sink_bdat_chunks(sink_factory):
    sink = sink_factory()
    out = converse(sink.port, [
        b"EHLO t\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nBDAT 5\r\nhel",
        b"loBDAT 4 LAST\r\n..\r\n",                 # dots mean nothing in BDAT
        b"MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nBDAT 0 LAST\r\n",
    ])
    got = sink.stop()
    codes = re.findall(rb"^(\d{3}) ", out, re.M)
    assert codes == [b"250", b"250", b"250", b"250", b"250", b"250", b"250", b"250",
                     b"221"], out
    assert got["msgs"] == 2 and got["bytes"] == 9


def test_idle_mode_holds_connections(sink_factory):
    sink = sink_factory()
    p = subprocess.Popen([BLAST, "-s", "127.0.0.1:%d" % sink.port, "-i", "50", "-T", "20"],
                         stdout=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()
        assert kv(first)["idle_established"] == 50
        deadline = time.time() + 10
        conns = 0
        while time.time() < deadline:
            with open(sink.countfile) as f:
                conns = kv(f.read()).get("conns", 0)
            if conns == 50:
                break
            time.sleep(0.05)
        assert conns == 50
    finally:
        p.send_signal(signal.SIGTERM)
        rest = p.communicate(timeout=10)[0]
    assert kv(rest.strip().splitlines()[-1])["idle_lost"] == 0
    got = sink.stop()
    assert got["msgs"] == 0 and got["conns"] == 50


def test_shares_change_on_sighup_without_dropping_connections(sink_factory, tmp_path):
    shares = tmp_path / "shares"
    shares.write_text("4xx=0 5xx=0 delay=0\n")
    sink = sink_factory("-F", str(shares))
    assert blast(sink.port, "-c", "2", "-m", "20")["accepted"] == 20
    shares.write_text("4xx=0 5xx=100 delay=0\n")
    sink.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while time.time() < deadline:
        sink.out.seek(0)
        if "shares: 4xx=0 5xx=100 delay=0" in sink.out.read():
            break
        time.sleep(0.05)
    res = blast(sink.port, "-c", "2", "-m", "20")
    assert res["accepted"] == 0 and res["permfail"] == 20
    got = sink.stop()
    assert got["msgs"] == 20 and got["permfail"] == 20
