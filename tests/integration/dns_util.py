"""Real DNS for the tests: Debian's nsd, authoritative for a test zone on a
127.0.0.1 port, plus two misbehaving servers (one answers SERVFAIL to
everything, one never answers).

Use from pytest:

    from dns_util import dns_servers          # fixture (module scope)

    def test_x(dns_servers):
        dns_servers.nsd        # "127.0.0.1:PORT" of nsd (zone ZONE)
        dns_servers.servfail   # "127.0.0.1:PORT" answering SERVFAIL
        dns_servers.silent     # "127.0.0.1:PORT" never answering

    from dns_util import signed_dns           # fixture (module scope)

    def test_y(signed_dns):
        signed_dns.resolver    # unbound, validating: answers carry AD=1
        signed_dns.nsd         # the signed zone straight from nsd (AD=0)
        # "bogus.mtad.test" has broken signatures: SERVFAIL via unbound

or by hand: `with Nsd(tmpdir) as ns: ns.addr ...`.  The signed variant
(SignedDns) signs the zone with fresh keys (ldns-keygen, ldns-signzone),
serves it with a second nsd, and runs unbound as a validating resolver on
another loopback port with the zone's DS as trust anchor and a stub zone
pointing at that nsd; it is ready only once an SOA answer comes back with
AD=1.  nsd gets its config,
zone and pid file in a temp dir, runs in the foreground (-d), is started
and stopped by its PID, and is ready only when it answers an SOA query
(start() raises on timeout).  Names are under ZONE ("mtad.test", RFC 2606);
every MX host has its own 127.0.0.x address so a test can see which host a
lookup (or later a delivery) chose.
"""
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

import pytest

def sbin(name):
    """A Debian daemon binary: /usr/sbin is not on every user's PATH."""
    return shutil.which(name) or os.path.join("/usr/sbin", name)


NSD = sbin("nsd")
ZONE = "mtad.test"

# The test zone.  What each name is for:
#   multi      MX 10 mx1, 10 mx2 (equal), 20 mx3     -> .11 .12 .13
#   one        MX 10 mx.one                          -> .21 (TLSA on it)
#   nullmx     MX 0 .                                (RFC 7505)
#   alias      CNAME multi; alias2 CNAME alias       (CNAME chain to an MX)
#   cnamehost  MX 10 mxalias.cnamehost, a CNAME to real.cnamehost -> .31
#   aonly      A 127.0.0.41, no MX                   (implicit MX)
#   dual       MX 10 mx.dual: A 127.0.0.52 and AAAA ::1
#   v6only     MX 10 mx.v6only: AAAA ::1 only
#   badhost    MX 10 nohost (NXDOMAIN host)
#   short      MX 10 mx.one with TTL 2               (cache expiry)
#   many       MX 10 m1..m4, each with 2 addresses   (address limit)
#   txt        TXT "v=STSv1; id=20261201"
#   anything else: NXDOMAIN
ZONE_TEXT = """$ORIGIN mtad.test.
$TTL 300
@          IN SOA ns.mtad.test. hostmaster.mtad.test. 1 3600 600 86400 60
@          IN NS  ns
ns         IN A   127.0.0.1
multi      IN MX  10 mx1.multi
multi      IN MX  10 mx2.multi
multi      IN MX  20 mx3.multi
mx1.multi  IN A   127.0.0.11
mx2.multi  IN A   127.0.0.12
mx3.multi  IN A   127.0.0.13
one        IN MX  10 mx.one
mx.one     IN A   127.0.0.21
_25._tcp.mx.one IN TLSA 3 1 1 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
nullmx     IN MX  0 .
alias      IN CNAME multi
alias2     IN CNAME alias
cnamehost  IN MX  10 mxalias.cnamehost
mxalias.cnamehost IN CNAME real.cnamehost
real.cnamehost IN A 127.0.0.31
aonly      IN A   127.0.0.41
dual       IN MX  10 mx.dual
mx.dual    IN A   127.0.0.52
mx.dual    IN AAAA ::1
v6only     IN MX  10 mx.v6only
mx.v6only  IN AAAA ::1
badhost    IN MX  10 nohost
short 2    IN MX  10 mx.one
many       IN MX  10 m1.many
many       IN MX  10 m2.many
many       IN MX  10 m3.many
many       IN MX  10 m4.many
m1.many    IN A   127.0.0.61
m1.many    IN A   127.0.0.62
m2.many    IN A   127.0.0.63
m2.many    IN A   127.0.0.64
m3.many    IN A   127.0.0.65
m3.many    IN A   127.0.0.66
m4.many    IN A   127.0.0.67
m4.many    IN A   127.0.0.68
txt        IN TXT "v=STSv1; id=20261201"
"""


def free_udp_port(host="127.0.0.1"):
    """A port free for both UDP and TCP on host (nsd binds both)."""
    for _ in range(200):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            u.bind((host, 0))
            port = u.getsockname()[1]
            try:
                t.bind((host, port))
            except OSError:
                continue
            return port
        finally:
            u.close()
            t.close()
    raise RuntimeError("no free UDP+TCP port on %s" % host)


def build_query(name, qtype, qid=None, ad=False):
    """A DNS query packet (RD=1, and AD=1 when ad) for name/qtype."""
    qid = random.randrange(65536) if qid is None else qid
    q = struct.pack(">HHHHHH", qid, 0x0120 if ad else 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", qtype, 1)


def query(addr, name, qtype, timeout=1.0, ad=False):
    """Send one query over UDP; the raw answer, or None on timeout."""
    host, port = addr.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        pkt = build_query(name, qtype, ad=ad)
        s.sendto(pkt, (host, int(port)))
        try:
            data, _ = s.recvfrom(65535)
        except socket.timeout:
            return None
        return data if data[:2] == pkt[:2] else None
    finally:
        s.close()


def question_end(pkt):
    """Offset just past the (uncompressed) question of a query, or None."""
    i = 12
    while i < len(pkt) and pkt[i] != 0:
        if pkt[i] & 0xc0:
            return None
        i += pkt[i] + 1
    i += 5
    return i if i <= len(pkt) else None


def rcode(answer):
    return answer[3] & 0x0f


class Nsd:
    """nsd authoritative for ZONE on 127.0.0.1:port, in its own dir."""

    def __init__(self, workdir, zone_text=ZONE_TEXT, zone=ZONE):
        self.dir = workdir
        self.zone = zone
        self.zone_text = zone_text
        self.port = None
        self.proc = None

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def _write(self):
        zf = os.path.join(self.dir, "zone")
        with open(zf, "w") as f:
            f.write(self.zone_text)
        conf = os.path.join(self.dir, "nsd.conf")
        with open(conf, "w") as f:
            f.write("""server:
    ip-address: 127.0.0.1@%(port)d
    port: %(port)d
    do-ip6: no
    username: ""
    chroot: ""
    database: ""
    zonesdir: "%(dir)s"
    zonelistfile: "%(dir)s/zone.list"
    xfrdfile: "%(dir)s/xfrd.state"
    xfrdir: "%(dir)s"
    pidfile: "%(dir)s/nsd.pid"
    logfile: "%(dir)s/nsd.log"
    server-count: 1
    verbosity: 1
    hide-version: yes
remote-control:
    control-enable: no
zone:
    name: "%(zone)s"
    zonefile: "%(zf)s"
""" % {"port": self.port, "dir": self.dir, "zone": self.zone, "zf": zf})
        return conf

    def start(self, timeout=20.0):
        last = None
        for _ in range(3):          # another process may take the port
            self.port = free_udp_port()
            conf = self._write()
            check = subprocess.run([sbin("nsd-checkconf"), conf],
                                   capture_output=True, text=True)
            if check.returncode != 0:
                raise RuntimeError("nsd.conf: %s" % check.stderr)
            self.log = open(os.path.join(self.dir, "nsd.stderr"), "w")
            self.proc = subprocess.Popen([NSD, "-d", "-c", conf],
                                         stdout=self.log, stderr=self.log)
            try:
                self._wait_ready(timeout)
                return self
            except RuntimeError as e:
                last = e
                self.stop()
        raise last

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("nsd exited with %s: %s" % (
                    self.proc.returncode, self._logs()))
            ans = query(self.addr, self.zone, 6, timeout=0.2)
            if ans is not None and rcode(ans) == 0 and ans[7] > 0:
                return
            time.sleep(0.05)
        raise RuntimeError("nsd on %s not answering for %s after %.0fs: %s" % (
            self.addr, self.zone, timeout, self._logs()))

    def _logs(self):
        out = []
        for n in ("nsd.stderr", "nsd.log"):
            p = os.path.join(self.dir, n)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    out.append(f.read()[-2000:])
        return " | ".join(out)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class ServfailServer:
    """Answers every UDP query with SERVFAIL (rcode 2), question echoed.
    Counts the queries it saw (for the joining test)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def _run(self):
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            if len(data) < 12:
                continue
            end = question_end(data)
            if end is None:
                continue
            self.count += 1
            flags = 0x8000 | (data[2] & 0x01) << 8 | 0x80 | 2   # QR RD RA SERVFAIL
            self.sock.sendto(data[:2] + struct.pack(">HHHHH", flags, 1, 0, 0, 0)
                             + data[12:end], peer)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            raise RuntimeError("SERVFAIL server thread did not stop")
        self.sock.close()


class SilentServer:
    """A bound UDP (and TCP, listening) port that never answers: lookups
    against it can only time out.  Queries pile up unread in the kernel."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def stop(self):
        self.sock.close()


class DnsServers:
    def __init__(self, workdir):
        self.nsd_server = Nsd(workdir).start()
        self.servfail_server = ServfailServer()
        self.silent_server = SilentServer()
        self.nsd = self.nsd_server.addr
        self.servfail = self.servfail_server.addr
        self.silent = self.silent_server.addr

    def stop(self):
        self.nsd_server.stop()
        self.servfail_server.stop()
        self.silent_server.stop()


@pytest.fixture(scope="module")
def dns_servers():
    d = tempfile.mkdtemp(prefix="mtad-dns-", dir="/dev/shm")
    servers = DnsServers(d)
    try:
        yield servers
    finally:
        servers.stop()
        shutil.rmtree(d, ignore_errors=True)


class Unbound:
    """Debian's unbound as a validating resolver on 127.0.0.1:port that
    sends every query for ZONE to the given nsd (a stub zone) and holds
    the zone's DS as its trust anchor, so validated answers carry AD=1."""

    def __init__(self, workdir, stub_addr, anchor_file, zone=ZONE):
        self.dir = workdir
        self.stub = stub_addr.replace(":", "@")
        self.anchor = anchor_file
        self.zone = zone
        self.port = None
        self.proc = None

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def _write(self):
        conf = os.path.join(self.dir, "unbound.conf")
        with open(conf, "w") as f:
            f.write("""server:
    interface: 127.0.0.1@%(port)d
    port: %(port)d
    do-ip6: no
    username: ""
    chroot: ""
    directory: "%(dir)s"
    pidfile: "%(dir)s/unbound.pid"
    use-syslog: no
    logfile: "%(dir)s/unbound.log"
    verbosity: 1
    val-log-level: 2
    num-threads: 1
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    local-zone: "test." nodefault
    module-config: "validator iterator"
    trust-anchor-file: "%(anchor)s"
    qname-minimisation: no
remote-control:
    control-enable: no
stub-zone:
    name: "%(zone)s"
    stub-addr: %(stub)s
""" % {"port": self.port, "dir": self.dir, "anchor": self.anchor,
       "zone": self.zone, "stub": self.stub})
        return conf

    def start(self, timeout=20.0):
        last = None
        for _ in range(3):
            self.port = free_udp_port()
            conf = self._write()
            check = subprocess.run([sbin("unbound-checkconf"), conf],
                                   capture_output=True, text=True)
            if check.returncode != 0:
                raise RuntimeError("unbound.conf: %s%s" % (check.stdout,
                                                            check.stderr))
            self.log = open(os.path.join(self.dir, "unbound.stderr"), "w")
            self.proc = subprocess.Popen(
                [sbin("unbound"), "-d", "-c", conf], stdout=self.log,
                stderr=self.log)
            try:
                self._wait_ready(timeout)
                return self
            except RuntimeError as e:
                last = e
                self.stop()
        raise last

    def _wait_ready(self, timeout):
        """Ready when it answers for the zone's SOA with AD=1 (so the
        trust anchor and the signatures work, not only the socket)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("unbound exited with %s: %s" % (
                    self.proc.returncode, self._logs()))
            ans = query(self.addr, self.zone, 6, timeout=0.5, ad=True)
            if ans is not None and rcode(ans) == 0 and ans[3] & 0x20:
                return
            time.sleep(0.05)
        raise RuntimeError("unbound on %s gave no validated answer for %s "
                           "after %.0fs: %s" % (self.addr, self.zone, timeout,
                                                self._logs()))

    def _logs(self):
        out = []
        for n in ("unbound.stderr", "unbound.log"):
            p = os.path.join(self.dir, n)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    out.append(f.read()[-2000:])
        return " | ".join(out)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()
        self.proc = None


def sign_zone(workdir, zone_text=ZONE_TEXT, zone=ZONE, bogus=()):
    """Sign zone_text with a fresh KSK and ZSK (ldns-keygen, ldns-signzone).
    Returns (signed zone text, path of a trust-anchor file with the KSK's
    DS).  Names in bogus get their RRSIGs' signature bytes flipped, so a
    validator must refuse them."""
    def keygen(*extra):
        r = subprocess.run(["ldns-keygen", "-a", "ECDSAP256SHA256", *extra,
                            zone], cwd=workdir, capture_output=True,
                           text=True, check=True)
        return r.stdout.strip()
    ksk = keygen("-k")
    zsk = keygen()
    zf = os.path.join(workdir, "zone.unsigned")
    with open(zf, "w") as f:
        f.write(zone_text)
    subprocess.run(["ldns-signzone", "-o", zone, "-f",
                    os.path.join(workdir, "zone.signed"), zf, zsk, ksk],
                   cwd=workdir, capture_output=True, text=True, check=True)
    with open(os.path.join(workdir, "zone.signed")) as f:
        signed = f.read()
    if bogus:
        lines = []
        for line in signed.splitlines():
            f = line.split()
            if len(f) > 4 and f[3] == "RRSIG" and f[0].rstrip(".") in [
                    "%s.%s" % (b, zone) for b in bogus]:
                sig = f[-1]
                f[-1] = ("B" if sig[0] != "B" else "C") + sig[1:]
                line = "\t".join(f)
            lines.append(line)
        signed = "\n".join(lines) + "\n"
    anchor = os.path.join(workdir, "anchor.ds")
    shutil.copy(os.path.join(workdir, ksk + ".ds"), anchor)
    return signed, anchor


class SignedDns:
    """The test zone signed, served by nsd, validated by unbound: point
    dns.servers at .resolver and answers for ZONE carry AD=1 (names in
    bogus fail validation: SERVFAIL)."""

    def __init__(self, workdir, bogus=("bogus",)):
        zone_text = ZONE_TEXT + "bogus      IN MX  10 mx.one\n"
        os.makedirs(os.path.join(workdir, "nsd"), exist_ok=True)
        os.makedirs(os.path.join(workdir, "unbound"), exist_ok=True)
        signed, anchor = sign_zone(workdir, zone_text, bogus=bogus)
        self.nsd_server = Nsd(os.path.join(workdir, "nsd"), signed).start()
        try:
            self.unbound = Unbound(os.path.join(workdir, "unbound"),
                                   self.nsd_server.addr, anchor).start()
        except Exception:
            self.nsd_server.stop()
            raise
        self.resolver = self.unbound.addr
        self.nsd = self.nsd_server.addr

    def stop(self):
        self.unbound.stop()
        self.nsd_server.stop()


@pytest.fixture(scope="module")
def signed_dns():
    d = tempfile.mkdtemp(prefix="mtad-dnssec-", dir="/dev/shm")
    servers = SignedDns(d)
    try:
        yield servers
    finally:
        servers.stop()
        shutil.rmtree(d, ignore_errors=True)
