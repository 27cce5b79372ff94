"""bench/mxbench.py - the MX scenario of `make bench` (issue 11).

PURPOSE   smtpblast -> MTA -> smtpsink, 1 KiB, 20 sessions, where the MTA
          finds the sink by DNS: nsd serves the zone sink.example (the
          domain smtpblast's recipients are in), MX 10 mx.sink.example ->
          127.0.0.25, and the sink listens on 127.0.0.25:25.
            1k-s20-mx-static  mtad, routes.default smtp:[127.0.0.25]:25
                              (the static figure, same sink, same window)
            1k-s20-mx         mtad, routes.default mx, dns.servers nsd;
                              Postfix with MX lookups (relayhost empty,
                              smtp_dns_support_level = enabled)
          Every MTA has had a warm-up run, so mtad's cache is warm (TTL
          3600 s) and Postfix's smtp processes and connection cache too;
          the three take turns within each repetition, in rotating order.
POSTFIX   Postfix's resolver is libc's: it reads /etc/resolv.conf and
          always asks port 53.  So nsd listens on 127.0.0.153:53, and
          Postfix is started inside a private mount namespace (unshare -m,
          propagation private) where a resolv.conf naming 127.0.0.153 is
          bind-mounted over /etc/resolv.conf: the machine's own file and
          every other process are untouched.  Its smtp processes are not
          chrooted (master.cf), so they see that file.
CONTRACT  run() is called by harness.main() with the harness module; it
          starts nsd, the sink and the MTAs, records the results under
          the names above and stops everything it started (by pid) before
          returning.  Needs root (port 25 and 53, the mount namespace) -
          the harness already does.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

NAME = "1k-s20-mx"
STATIC = "1k-s20-mx-static"
CALIB = "mx-calibration"            # message counts, never shown
NS_ADDR = "127.0.0.153"
SINK_ADDR = "127.0.0.25"
NSD = shutil.which("nsd") or "/usr/sbin/nsd"

ZONE = """$ORIGIN sink.example.
$TTL 3600
@    IN SOA ns.sink.example. hostmaster.sink.example. 1 3600 600 86400 3600
@    IN NS  ns
ns   IN A   %s
@    IN MX  10 mx
mx   IN A   %s
""" % (NS_ADDR, SINK_ADDR)

NSD_CONF = """server:
    ip-address: %(addr)s@53
    port: 53
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
    name: "sink.example"
    zonefile: "%(dir)s/zone"
"""

POSTFIX_MX = """
# mxbench: next hop by MX, through nsd (see bench/mxbench.py)
relayhost =
smtp_dns_support_level = enabled
smtp_host_lookup = dns
"""

MTAD_MX = """dns:
  servers: ["%s:53"]
""" % NS_ADDR


def dig_mx(h, timeout=15.0):
    """Wait until nsd answers the MX query (a raw UDP query)."""
    import socket
    import struct
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    for label in ("sink", "example"):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 15, 1)
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(0.3)
        try:
            s.sendto(q, (NS_ADDR, 53))
            data, _ = s.recvfrom(4096)
            if data[:2] == q[:2] and (data[3] & 0x0f) == 0 and data[7] > 0:
                return True
        except OSError:
            pass
        finally:
            s.close()
        time.sleep(0.1)
    return False


class Nsd:
    def __init__(self, h, workdir):
        self.h, self.dir = h, workdir
        self.proc = None

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "zone"), "w") as f:
            f.write(ZONE)
        conf = os.path.join(self.dir, "nsd.conf")
        with open(conf, "w") as f:
            f.write(NSD_CONF % dict(addr=NS_ADDR, dir=self.dir))
        self.proc = self.h.spawn([NSD, "-d", "-c", conf],
                                 os.path.join(self.dir, "nsd.out"))
        if not dig_mx(self.h):
            raise RuntimeError("nsd on %s:53 did not answer for sink.example"
                               % NS_ADDR)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.h.kill_tree(self.proc.pid, 2)
        self.proc = None


def run(h, mtas, results, notes, shm):
    """The two rows; h is the harness module (its classes and helpers)."""
    running = []
    base = os.path.join(shm, "mx")
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    try:
        ns = Nsd(h, os.path.join(base, "nsd"))
        ns.start()
        running.append(ns)
        sink = h.Sink("ours", 25, base, host=SINK_ADDR)
        sink.start()
        running.append(sink)
        peers = []

        def mtad(label, route, extra):
            wd = os.path.join(base, label)
            os.makedirs(wd, exist_ok=True)
            os.chmod(wd, 0o755)
            m = h.Mtad(wd, os.path.join(wd, "queue"), False, 25, route=route,
                       extra=extra)
            m.start()
            running.append(m)
            return m
        static = mtad("mtad-static", "smtp:[%s]:25" % SINK_ADDR, "")
        static.name = "mtad-static"     # its own key; renamed below
        mx = mtad("mtad-mx", "mx", MTAD_MX)
        peers.append((static, sink))
        peers.append((mx, sink))
        if "postfix" in mtas and os.access(h.POSTFIX, os.X_OK):
            wd = os.path.join(base, "postfix")
            os.makedirs(wd, exist_ok=True)
            os.chmod(wd, 0o755)
            resolv = os.path.join(wd, "resolv.conf")
            with open(resolv, "w") as f:
                f.write("nameserver %s\noptions attempts:1 timeout:2\n" % NS_ADDR)
            os.chmod(resolv, 0o644)
            wrap = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolv]
            pf = h.Postfix(wd, os.path.join(wd, "queue"), 25,
                           main_extra=POSTFIX_MX, wrap=wrap)
            try:
                pf.start()
                running.append(pf)
                peers.append((pf, sink))
            except Exception as e:
                notes.append("%s: Postfix did not start: %s" % (NAME, str(e)[:300]))
                h.log(notes[-1])
                pf.stop()
        # warm-up: caches, processes, connections
        for m, s in peers:
            r = h.measure(m, s, "ours", 20, 200, 1, 1024)
            if not r["e2e_complete"]:
                raise RuntimeError("%s warm-up (%s): %d of %d delivered; see %s" % (
                    NAME, m.name, r["delivered"], r["accepted"], m.dir))
        # the three take turns within each repetition, so a busy moment of
        # the machine hits the static and the mx figure alike, and the
        # order rotates: whoever runs right after Postfix (whose processes
        # are still winding down) is not always the same
        # the same message count for static and mx (the end-to-end rate
        # of a longer run carries less of the tail): the mx mtad's
        # calibration; Postfix gets its own, as in the other rows
        n = h.calibrate(mx, sink, "ours", 20, 1, 1024)
        results[(CALIB, "ours", "mtad-static")] = [{"msgs": n}]
        results[(CALIB, "ours", "mtad")] = [{"msgs": n}]
        for m, s in peers:
            if m.name == "postfix":
                results[(CALIB, "ours", "postfix")] = [
                    {"msgs": h.calibrate(m, s, "ours", 20, 1, 1024)}]
        reps = h.REPS
        h.REPS = 1
        try:
            for i in range(reps):
                k = i % len(peers)
                h.run_scenario(peers[k:] + peers[:k], "ours", NAME, 20, 1,
                               1024, results, like=CALIB)
        finally:
            h.REPS = reps
            for who in ("mtad-static", "mtad", "postfix"):
                results.pop((CALIB, "ours", who), None)
        rs = results.pop((NAME, "ours", "mtad-static"), None)
        if rs:
            results[(STATIC, "ours", "mtad")] = rs
    finally:
        for obj in reversed(running):
            try:
                obj.stop()
            except Exception as e:
                h.log("stop: %s" % e)


def targets(results, tool, label, check, med):
    """Issue 11's targets, on this run's figures."""
    if tool != "ours":
        return
    mx = med(results, (NAME, tool, "mtad"), "e2e_rate")
    st = med(results, (STATIC, tool, "mtad"), "e2e_rate")
    pf = med(results, (NAME, tool, "postfix"), "e2e_rate")
    check("[%s] mx route end-to-end within 5%% of the static route (warm cache)" % label,
          mx / st if mx is not None and st else None, 0.95, unit="×static")
    check("[%s] mx route end-to-end >= 10× Postfix with MX lookups" % label,
          mx / pf if mx is not None and pf else None, 10.0, unit="×")
