"""TLS-RPT (RFC 8460) end to end: the master's day table (kept in
<routes dir>/tlsrpt.state across restarts), `mtactl tls report`, and the
report mail: `_smtp._tls.<domain>` TXT looked up in a real nsd, the
RFC 8460 JSON gzip'd inside a multipart/report; report-type="tlsrpt"
delivered to the rua= mailto: address (a sink), decompressed and checked
here.  The outcomes themselves come from the TLS client (tests below
deliver to a STARTTLS sink and to one that breaks the handshake)."""
import base64
import ctypes
import email
import email.policy
import gzip
import json
import os
import re
import signal
import socket
import struct
import time

import pytest

from mtadtest import (ZONE, ZONE_TEXT, Nsd, make_message, make_test_ca,
                      send, tls_server_context, wait_for)

REPORTS = "tls-reports@reports.test"

# _smtp._tls records: rpt (mailto and https), nohttps (https only: none
# sent), two (two records: none sent, RFC 8460 3)
TLSRPT_ZONE = ZONE_TEXT + """
_smtp._tls.rpt   IN TXT "v=TLSRPTv1; rua=mailto:%s,https://reports.test/x"
_smtp._tls.one   IN TXT "v=TLSRPTv1;" " rua=mailto:%s"
_smtp._tls.broken IN TXT "v=TLSRPTv1; rua=mailto:%s"
_smtp._tls.nohttps IN TXT "v=TLSRPTv1; rua=https://reports.test/x"
_smtp._tls.two   IN TXT "v=TLSRPTv1; rua=mailto:a@reports.test"
_smtp._tls.two   IN TXT "v=TLSRPTv1; rua=mailto:b@reports.test"
""" % (REPORTS, REPORTS, REPORTS)


@pytest.fixture(scope="module")
def rpt_dns(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tlsrpt-dns"))
    nsd = Nsd(d, zone_text=TLSRPT_ZONE).start()
    yield nsd
    nsd.stop()


def today():
    """Today's UTC day number; waits out the last 30 s of a day, so that a
    test's "today" is mtad's too."""
    while time.time() % 86400 > 86400 - 30:
        time.sleep(1)
    return int(time.time() // 86400)


def day_str(day):
    return time.strftime("%Y-%m-%d", time.gmtime(day * 86400))


def start(mtad_factory, rpt_dns, sink, enabled=True, **over):
    cfg = {"tlsrpt": {"enabled": enabled, "organization": "Test Org",
                      "contact": "ops@mx.test.example",
                      "sender": "tlsrpt@mx.test.example"},
           "routes": {"static": {"reports.test": sink.route}},
           "dns": {"servers": [rpt_dns.addr], "timeout": "1s",
                   "attempts": 1}}
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    return mtad_factory(cfg)


def seed(m, text):
    """The state file the master reads at start (format: tlspol/tlspol.h)."""
    path = os.path.join(m.dir, "tlsrpt.state")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("mtad-tlsrpt 1\n" + text)
    return path


def report(m, *args):
    r = m.ctl("tls", "report", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def mail_report(msg):
    """(headers, parsed JSON) of a report the sink received."""
    parsed = email.message_from_bytes(msg.data, policy=email.policy.compat32)
    assert parsed.get_content_type() == "multipart/report"
    assert parsed.get_param("report-type") == "tlsrpt"
    parts = parsed.get_payload()
    assert [p.get_content_type() for p in parts] == [
        "text/plain", "application/tlsrpt+gzip"]
    att = parts[1]
    assert att["Content-Transfer-Encoding"] == "base64"
    fn = att.get_filename()
    assert fn.endswith(".json.gz"), fn
    raw = gzip.decompress(base64.b64decode(att.get_payload()))
    return parsed, fn, json.loads(raw)


def test_report_command_shows_counts_that_survive_a_restart(
        mtad_factory, sink_factory, rpt_dns):
    sink = sink_factory()
    m = start(mtad_factory, rpt_dns, sink)
    d = today()
    seed(m, "P %d sts rpt.%s 7 2\n"
                   "s version:%%20STSv1\ns mode:%%20enforce\n"
                   "s mx:%%20mx.rpt.%s\n"
                   "d certificate-expired mx.rpt.%s 127.0.0.9 2 -\n"
                   "P %d no-policy-found other.test 3 0\n"
                   % (d, ZONE, ZONE, ZONE, d))
    m.start()
    out = report(m)
    assert "today: %s (UTC)\nenabled: yes\n" % day_str(d) in out
    assert ("domain rpt.%s day=%s type=sts success=7 failure=2\n"
            "  policy-string: version: STSv1\n"
            "  policy-string: mode: enforce\n"
            "  policy-string: mx: mx.rpt.%s\n"
            "  failure result=certificate-expired mx=mx.rpt.%s "
            "ip=127.0.0.9 count=2\n" % (ZONE, day_str(d), ZONE, ZONE)) in out
    assert ("domain other.test day=%s type=no-policy-found success=3 "
            "failure=0\n" % day_str(d)) in out
    # one domain
    one = report(m, "other.test")
    assert "other.test" in one and "rpt." not in one
    assert "domain " not in report(m, "nothing.test")
    # bad arguments
    r = m.ctl("tls", "report", "a", "b")
    assert r.returncode == 2 and "usage" in r.stderr
    # a restart reads them again
    m.stop()
    m.start()
    assert "type=sts success=7 failure=2\n" in report(m)
    assert sink.received() == []        # nothing sent before the day ends
    # a state file that is not ours is refused, and said so
    m.stop()
    seed(m, "P 1 bogus\n")
    m.start()
    assert "domain " not in report(m)
    m.wait_log("tlsrpt: tlsrpt.state: bad TLS-RPT record line")


def test_send_mails_the_rfc8460_report_to_the_rua_address(
        mtad_factory, sink_factory, rpt_dns):
    sink = sink_factory()
    m = start(mtad_factory, rpt_dns, sink)
    d = today()
    seed(m, "P %d sts rpt.%s 7 2\n"
            "s version:%%20STSv1\ns mode:%%20testing\n"
            "s mx:%%20mx.rpt.%s\ns mx:%%20*.backup.%s\ns max_age:%%20600\n"
            "d certificate-expired mx.rpt.%s 127.0.0.9 2 -\n"
            "P %d no-policy-found rpt.%s 4 1\n"
            "d starttls-not-supported mx2.rpt.%s 127.0.0.10 1 -\n"
            "P %d no-policy-found nohttps.%s 1 0\n"
            "P %d no-policy-found two.%s 1 0\n"
            "P %d no-policy-found norecord.%s 1 0\n"
            % (d, ZONE, ZONE, ZONE, ZONE, d, ZONE, ZONE, d, ZONE, d, ZONE,
               d, ZONE))
    m.start()
    before = time.time()
    r = m.ctl("tls", "report", "--send")
    assert r.returncode == 0, r.stderr
    assert "4 reports handed to a worker" in r.stdout, r.stdout
    got = sink.wait_for(1, timeout=30)
    msg = got[0]
    assert msg.mail_from == "tlsrpt@mx.test.example"
    assert msg.rcpt_tos == [REPORTS]
    hdr, fn, rep = mail_report(msg)
    dom = "rpt." + ZONE
    assert hdr["TLS-Report-Domain"] == dom
    assert hdr["TLS-Report-Submitter"] == "mx.test.example"
    assert hdr["TLS-Required"] == "No"
    assert hdr["From"] == "tlsrpt@mx.test.example"
    assert hdr["To"] == REPORTS
    assert " ".join(hdr["Subject"].split()) == (
        "Report Domain: %s Submitter: mx.test.example Report-ID: <%s>"
        % (dom, rep["report-id"]))
    start_s = d * 86400
    end_s = int(fn.split("!")[3].split(".")[0])
    assert fn.startswith("mx.test.example!%s!%d!" % (dom, start_s)), fn
    assert before - 5 <= end_s <= time.time() + 1   # today's: ends now
    assert rep["organization-name"] == "Test Org"
    assert rep["contact-info"] == "ops@mx.test.example"
    assert rep["date-range"]["start-datetime"] == time.strftime(
        "%Y-%m-%dT00:00:00Z", time.gmtime(start_s))
    assert rep["date-range"]["end-datetime"] == time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(end_s))
    pols = {p["policy"]["policy-type"]: p for p in rep["policies"]}
    assert sorted(pols) == ["no-policy-found", "sts"]
    sts = pols["sts"]
    assert sts["policy"]["policy-domain"] == dom
    assert sts["policy"]["policy-string"] == [
        "version: STSv1", "mode: testing", "mx: mx.rpt." + ZONE,
        "mx: *.backup." + ZONE, "max_age: 600"]
    assert sts["policy"]["mx-host"] == ["mx.rpt." + ZONE, "*.backup." + ZONE]
    assert sts["summary"] == {"total-successful-session-count": 7,
                              "total-failure-session-count": 2}
    assert sts["failure-details"] == [{
        "result-type": "certificate-expired", "receiving-ip": "127.0.0.9",
        "receiving-mx-hostname": "mx.rpt." + ZONE,
        "failed-session-count": 2}]
    npf = pols["no-policy-found"]
    assert npf["summary"] == {"total-successful-session-count": 4,
                              "total-failure-session-count": 1}
    assert npf["failure-details"][0]["result-type"] == \
        "starttls-not-supported"
    # the others: https only, two records, no record: logged, not sent
    text = m.wait_log("no report sent: _smtp._tls.two.%s: 2 v=TLSRPTv1 "
                      "records" % ZONE)
    assert ("tlsrpt: nohttps.%s: no report sent: _smtp._tls.nohttps.%s: "
            "only https: reporting URIs (not supported)" % (ZONE, ZONE)) in text
    m.wait_log("tlsrpt: norecord.%s: no report sent: _smtp._tls.norecord.%s "
               "TXT: no record" % (ZONE, ZONE))
    assert "(1 https: reporting URI left out)" in m.log_text()
    # handed over means forgotten (the only counts left may be those of
    # the report's own delivery, to reports.test)
    def forgotten(text):
        return all("domain %s.%s " % (x, ZONE) not in text
                   for x in ("rpt", "nohttps", "two", "norecord"))
    assert forgotten(report(m))
    # and saved so: the state file was rewritten (root's, 0600), and a
    # restart does not bring the sent counts back
    path = os.path.join(m.dir, "tlsrpt.state")

    def saved():
        with open(path) as f:
            text = f.read()
        return text.startswith("mtad-tlsrpt 1\n") and "." + ZONE not in text
    wait_for(saved, 10, what="the state file saved without the sent days")
    st = os.stat(path)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o600
    m.stop()
    m.start()
    assert forgotten(report(m))
    assert len(sink.received()) == 1


def test_a_finished_day_is_sent_by_itself(mtad_factory, sink_factory,
                                          rpt_dns):
    """Counts of a day that ended (a restart over midnight) go out at the
    master's next tick, without --send, with the whole day as range."""
    sink = sink_factory()
    m = start(mtad_factory, rpt_dns, sink)
    d = today() - 1
    seed(m, "P %d no-policy-found one.%s 5 0\n" % (d, ZONE))
    m.start()
    msg = sink.wait_for(1, timeout=30)[0]
    _, fn, rep = mail_report(msg)
    assert fn == "mx.test.example!one.%s!%d!%d.json.gz" % (
        ZONE, d * 86400, d * 86400 + 86399)
    assert rep["date-range"] == {
        "start-datetime": day_str(d) + "T00:00:00Z",
        "end-datetime": day_str(d) + "T23:59:59Z"}
    assert rep["policies"][0]["summary"][
        "total-successful-session-count"] == 5
    wait_for(lambda: "domain one.%s " % ZONE not in report(m), 10,
             what="the sent day forgotten")


def test_disabled_sends_nothing(mtad_factory, sink_factory, rpt_dns):
    sink = sink_factory()
    m = start(mtad_factory, rpt_dns, sink, enabled=False)
    m.start()
    assert "enabled: no\n" in report(m)
    r = m.ctl("tls", "report", "--send")
    assert r.returncode == 1 and "tlsrpt.enabled is off" in r.stderr


def test_bad_sender_is_a_config_error(mtad_factory, sink_factory, rpt_dns):
    sink = sink_factory()
    m = start(mtad_factory, rpt_dns, sink)
    m.cfg["tlsrpt"]["sender"] = "Reports <r@x.example>"
    m.write_config()
    r = m.ctl("check")
    assert r.returncode == 1
    assert "tlsrpt.sender: not a plain address" in r.stderr + r.stdout


# ---- outcomes recorded by the TLS client ----

def tls_sink(sink_factory, ca, **kw):
    s = sink_factory(**kw)
    chain, key = ca.issue(["127.0.0.1"])
    s.tls_context = tls_server_context(chain, key)
    s.close_after_data = True       # one TLS session per message
    return s


def test_tls_outcomes_are_counted_shown_kept_and_reported(
        mtad_factory, sink_factory, rpt_dns, workdir):
    d = os.path.join(workdir, "ca")
    os.makedirs(d)
    os.chmod(d, 0o755)
    ca = make_test_ca(d)
    d2 = os.path.join(workdir, "other")
    os.makedirs(d2)
    os.chmod(d2, 0o755)
    other = make_test_ca(d2, "Other CA")
    reports = sink_factory()
    good = tls_sink(sink_factory, ca)                # STARTTLS works
    broken = tls_sink(sink_factory, ca)              # 220, then junk
    broken.tls_break = True
    plain = sink_factory()                           # no STARTTLS
    untrusted = tls_sink(sink_factory, other)        # a CA we do not know
    rpt, brk = "rpt." + ZONE, "broken." + ZONE
    pln, unt = "plain." + ZONE, "untrusted." + ZONE
    m = start(mtad_factory, rpt_dns, reports,
              tls={"ca_file": ca.cert},
              routes={"static": {"reports.test": reports.route,
                                 rpt: good.route, brk: broken.route,
                                 pln: plain.route, unt: untrusted.route}})
    m.start()
    m.ctl("tls", "policy", "set", unt, "verify", check=True)
    today()
    for i in range(3):
        send(m, "a@src.test", ["x%d@%s" % (i, rpt)], make_message(i))
    good.wait_for(3)
    for i in range(2):
        send(m, "a@src.test", ["y%d@%s" % (i, brk)], make_message(i))
    broken.wait_for(2)                  # in plaintext, after the failure
    send(m, "a@src.test", ["z@%s" % pln], make_message(9))
    plain.wait_for(1)
    qid = send(m, "a@src.test", ["w@%s" % unt], make_message(10))
    m.wait_log("%s: to=<w@%s>" % (qid, unt))
    assert untrusted.received() == []

    def shows(needle):
        return lambda: needle in report(m)
    wait_for(shows("domain %s day=%s type=no-policy-found success=3 "
                   "failure=0\n" % (rpt, day_str(today()))), 10,
             what="3 TLS sessions to %s counted" % rpt)
    wait_for(shows("domain %s day=%s type=no-policy-found success=0 "
                   "failure=2\n" % (brk, day_str(today()))), 10,
             what="2 broken handshakes with %s counted" % brk)
    # the junk comes with the 220 or after it: two reasons, one type
    counts = re.findall(r"  failure result=validation-failure mx=127\.0\.0\.1 "
                        r"ip=127\.0\.0\.1 count=(\d+) reason=",
                        report(m, brk))
    assert sum(int(n) for n in counts) == 2, report(m, brk)
    wait_for(shows("domain %s day=%s type=no-policy-found success=0 "
                   "failure=1\n  failure result=starttls-not-supported "
                   "mx=127.0.0.1 ip=127.0.0.1 count=1\n" % (
                       pln, day_str(today()))), 10,
             what="STARTTLS not offered by %s counted" % pln)
    wait_for(shows("  failure result=certificate-not-trusted mx=127.0.0.1 "
                   "ip=127.0.0.1 count="), 10,
             what="the untrusted certificate of %s counted" % unt)
    out = report(m, unt)
    assert "domain %s " % unt in out and "success=0" in out, out
    assert "domain %s " % rpt not in out
    m.ctl("tls", "policy", "del", unt, check=True)
    # counted by the workers, saved by the master at stop, read at start
    m.stop()
    m.start()
    out = report(m)
    assert "domain %s day=%s type=no-policy-found success=3 failure=0\n" % (
        rpt, day_str(today())) in out, out
    assert "domain %s day=%s type=no-policy-found success=0 failure=2\n" % (
        brk, day_str(today())) in out, out
    # the reports: rpt and broken have a rua=, plain and untrusted none
    r = m.ctl("tls", "report", "--send")
    assert r.returncode == 0, r.stderr
    got = {}

    def two_reports():
        for msg in reports.received():
            hdr, _, rep = mail_report(msg)
            got[hdr["TLS-Report-Domain"]] = rep
        return rpt in got and brk in got
    wait_for(two_reports, 30, what="reports for %s and %s" % (rpt, brk))
    (pol,) = got[rpt]["policies"]
    assert pol["policy"] == {"policy-type": "no-policy-found",
                             "policy-string": [], "policy-domain": rpt}
    assert pol["summary"] == {"total-successful-session-count": 3,
                              "total-failure-session-count": 0}
    assert "failure-details" not in pol
    (pol,) = got[brk]["policies"]
    assert pol["summary"] == {"total-successful-session-count": 0,
                              "total-failure-session-count": 2}
    dets = pol["failure-details"]
    for det in dets:
        assert det["result-type"] == "validation-failure"
        assert det["receiving-ip"] == "127.0.0.1"
        assert det["receiving-mx-hostname"] == "127.0.0.1"
        assert det["failure-reason-code"], det
    assert sum(det["failed-session-count"] for det in dets) == 2, dets
    m.wait_log("tlsrpt: %s: no report sent: _smtp._tls.%s TXT: no record"
               % (pln, pln))


# ---- a worker that lies: what a compromised worker can write ----------

CHAN_TLSRPT_ADD = 8                     # common/chan.h


def worker_chan(m):
    """A copy of a worker's end of its channel to the master (taken with
    pidfd_getfd(2)): the test writes what a compromised worker could."""
    worker = [p for p in m.children()
              if "worker" in open("/proc/%d/cmdline" % p).read()][0]
    seq = set()
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[4] == "0005":      # SOCK_SEQPACKET
                seq.add(parts[6])
    fd = None
    for name in os.listdir("/proc/%d/fd" % worker):
        link = os.readlink("/proc/%d/fd/%s" % (worker, name))
        if link.startswith("socket:[") and link[8:-1] in seq:
            fd = int(name)
    assert fd is not None, "no channel among the worker's descriptors"
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(worker)
    try:
        mine = libc.syscall(438, pidfd, fd, 0)      # SYS_pidfd_getfd
        assert mine >= 0, os.strerror(ctypes.get_errno())
    finally:
        os.close(pidfd)
    return socket.socket(fileno=mine)


def started_with_chan(mtad_factory, sink_factory, rpt_dns):
    """A started mtad, today's day number and a worker's channel."""
    m = start(mtad_factory, rpt_dns, sink_factory())
    m.start()
    return m, today(), worker_chan(m)


def chan_add(sock, text):
    payload = text.encode()
    sock.send(struct.pack("=II", CHAN_TLSRPT_ADD, len(payload)) + payload)


def test_a_worker_cannot_plant_far_days(mtad_factory, sink_factory, rpt_dns):
    """Counts of a day a worker cannot have seen (a future one, one long
    gone) are refused: they would never be reported, so they would stay
    in the table and its state file for ever; a state file that holds
    some has them dropped when read back."""
    sink = sink_factory()
    m = start(mtad_factory, rpt_dns, sink)
    d = today()
    seed(m, "P %d sts old.test 5 0\nP %d sts future.test 6 0\n"
            "P %d sts kept.test 7 0\nP %d sts yesterday.test 8 0\n"
            % (d - 30, d + 400, d, d - 1))
    m.start()
    out = report(m)
    assert "domain kept.test day=%s" % day_str(d) in out, out
    assert "domain yesterday.test day=%s" % day_str(d - 1) in out, out
    assert "old.test" not in out and "future.test" not in out, out
    m.wait_log("tlsrpt.state: 2 policies of days other than today and "
               "yesterday dropped")
    sock = worker_chan(m)
    try:
        chan_add(sock, "P %d sts planted.test 1 0\n" % (d + 3650))
        chan_add(sock, "P %d sts stale.test 1 0\n" % (d - 2))
        chan_add(sock, "P %d sts fresh.test 2 0\n" % d)
    finally:
        sock.close()
    wait_for(lambda: "fresh.test" in report(m), 10, what="today's counts")
    out = report(m)
    assert "planted.test" not in out and "stale.test" not in out, out
    text = m.wait_log("TLS-RPT record of day %d (accepted: %d..%d)"
                      % (d + 3650, d - 1, d))
    # one line for the day, not one per bad message
    assert "stale.test" not in text and text.count("TLS-RPT record of day") == 1
    # and what is saved no longer holds them
    path = os.path.join(m.dir, "tlsrpt.state")
    wait_for(lambda: "fresh.test" in open(path).read(), 10,
             what="the state file saved")
    saved = open(path).read()
    assert "old.test" not in saved and "future.test" not in saved
    assert "planted.test" not in saved


def test_a_worker_over_its_quota_is_cut_off_with_one_line(
        mtad_factory, sink_factory, rpt_dns):
    """A worker may add at most its share of the table a day (two workers,
    two days held: a quarter of TLS_RPT_MAX_POLICIES each): past it, what
    it sends is dropped, with one log line for the episode."""
    m, d, sock = started_with_chan(mtad_factory, sink_factory, rpt_dns)
    try:
        n = 0
        for batch in range(5):          # 5 x 1,000 > 2,048
            chan_add(sock, "".join("P %d no-policy-found j%d.test 1 0\n"
                                   % (d, n + i) for i in range(1000)))
            n += 1000
        chan_add(sock, "P %d no-policy-found after.test 1 0\n" % d)
    finally:
        sock.close()
    m.wait_log("is over its quota for today (2048 new policies")
    # messages are taken in order: the ones after the line were dropped
    out = report(m)
    got = out.count("domain j")
    assert got == 3000, got             # the message that crossed it counts
    assert "after.test" not in out
    time.sleep(0.5)
    assert m.log_text().count("is over its quota") == 1


def test_a_flooding_worker_does_not_hold_the_control_socket(
        mtad_factory, sink_factory, rpt_dns):
    """A worker's channel full of valid counts and a control request
    waiting behind it: the master answers the request after a few loop
    turns of at most MASTER_CHAN_BATCH messages, not after the whole flood
    (reading until EAGAIN, it took every message first, and a worker that
    kept the channel full kept the master from its control socket).  The
    master is stopped while the flood and the request are queued, so the
    order is the kernel's, not a race; the report it answers with tells
    how many messages it had taken."""
    import subprocess
    from mtadtest import MTACTL
    sink = sink_factory()
    m = start(mtad_factory, rpt_dns, sink)
    m.start()
    d = today()
    sock = worker_chan(m)
    # room for thousands of queued messages (root: past wmem_max)
    sock.setsockopt(socket.SOL_SOCKET, 32, 16 << 20)     # SO_SNDBUFFORCE
    sock.setblocking(False)
    payload = ("P %d no-policy-found flood.test 1 0\n" % d).encode()
    pkt = struct.pack("=II", CHAN_TLSRPT_ADD, len(payload)) + payload
    sent = 0
    os.kill(m.pid, signal.SIGSTOP)
    try:
        try:
            while sent < 5000:
                sock.send(pkt)
                sent += 1
        except BlockingIOError:
            pass
        ctl = subprocess.Popen([MTACTL, "-c", m.cfg_path, "tls", "report",
                                "flood.test"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)                 # its request is in the socket
    finally:
        os.kill(m.pid, signal.SIGCONT)
        sock.close()
    out, err = ctl.communicate(timeout=30)
    assert ctl.returncode == 0, err
    assert sent >= 2000, sent

    def taken(text):
        g = re.search(r"domain flood\.test day=\S+ type=no-policy-found "
                      r"success=(\d+)", text)
        return int(g.group(1)) if g else 0
    before = taken(out)
    # a few turns of 32 at most, far from the whole flood
    assert before <= 32 * 10, (before, sent)
    wait_for(lambda: taken(report(m, "flood.test")) == sent, 20,
             what="the rest of the flood taken on later turns")


def test_a_worker_sending_bad_messages_gets_few_master_lines(
        mtad_factory, sink_factory, rpt_dns):
    """300 messages of no known type on a worker's channel: the master
    drops each, and logs the 1st, 2nd, 4th ... (9 lines), not one line
    of its own (root's word in the log) per message a worker made up.
    A valid message sent after them shows they were all taken."""
    m, d, sock = started_with_chan(mtad_factory, sink_factory, rpt_dns)
    try:
        for _ in range(300):
            sock.send(struct.pack("=II", 999, 0))
        chan_add(sock, "P %d sts after.test 1 0\n" % d)
    finally:
        sock.close()
    wait_for(lambda: "after.test" in report(m), 10, what="the valid message")
    text = m.wait_log("unknown message type (256 so far)")
    assert text.count("message on the channel dropped") == 9, text[-3000:]
