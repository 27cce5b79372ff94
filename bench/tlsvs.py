"""bench/tlsvs.py - the TLS rows of `make bench`: mtad against Postfix with
STARTTLS inbound, and both directions (issues 12 and 20).

PURPOSE   build/bench/tlsblast (20 sessions, 1 KiB, STARTTLS on every
          connection) -> MTA -> build/bench/smtpsink, mtad and Postfix side
          by side, each with its own sink, per certificate kind (RSA-2048,
          ECDSA P-256: a bench CA of each kind made at set-up with
          openssl(1), a server certificate for the MTAs and one for the
          sink).  Scenarios (row name = scenario/cert):
            tls-in-hs       a new connection and a full handshake per
                            message; the MTA relays in plaintext
            tls-in-resume   the same, each client session offering the
                            TLS session of its previous connection
            tls-in-k100     100 messages per TLS connection
            tls-both        as tls-in-hs, and the MTA relays with STARTTLS
                            to a TLS sink: mtad `delivery.tls: may` +
                            `tls.ca_file` (its connection pool reuses the
                            TLS connections), Postfix as issue 12 says
                            (smtp[d]_tls_security_level=may, both session
                            caches, smtp_tls_CAfile; Postfix's default of
                            no TLS connection reuse: a new connection and a
                            resumed handshake per delivery)
            tls-both-reuse  as tls-both with Postfix's TLS connection
                            reuse on (smtp_tls_connection_reuse = yes,
                            through tlsproxy): issue 20's "connection reuse
                            on the outbound side"
            tls-both-k100   100 messages per inbound connection, outbound
                            TLS with reuse (Postfix as tls-both-reuse)
          Each repetition also drives tlsblast straight into a TLS sink of
          its own with the same sessions and the same handshakes (the raw
          ceiling of the load tools), and records the CPU time of the
          client (its getrusage), of each sink and of each MTA's whole
          process tree, and how busy the box was (/proc/stat), so that a
          row shows whether the tools, not the MTA, were the limit.  The
          sinks count TLS sessions and resumed ones: the row says how the
          MTA's deliveries arrived.  At set-up bench/tls_hs_cost times
          OpenSSL's server side of one full handshake alone; with the tools'
          CPU per message it gives, for the rows with a handshake per
          message, the highest ratio against Postfix this box allows any MTA
          (section(): "What this box allows").
CONTRACT  run(h, mtas, results, notes, shm) is called by harness.main() with
          the harness module; results go under (scenario/cert, "tls", who)
          with who in mtad, postfix, sink (the ceiling).  section(results)
          gives the Markdown for RESULTS.md, targets(results, check) issue
          12's and 20's targets.  Environment (besides the harness's):
            BENCH_TLS_CERTS=rsa,ec   certificate kinds (default both)
          mtad's outbound rows need a build with `delivery.tls` (outbound
          STARTTLS); an older build is probed with `mtad -t` and its
          both-directions rows are left out with a note.
FAILURE   Every process is started through the harness (recorded by pid)
          and stopped by pid in a finally block; every load is bounded by a
          message count and a time limit, every wait by a deadline.
"""
import os
import re
import shutil
import statistics
import subprocess
import time

TOOL = "tls"
TOOLNAME = "tlsblast→smtpsink, STARTTLS"
SESSIONS = 20
SIZE = 1024
# name: inbound messages per connection, clients resume, outbound TLS,
# Postfix's TLS connection reuse
SCENARIOS = [
    ("tls-in-hs", 1, False, False, False),
    ("tls-in-resume", 1, True, False, False),
    ("tls-in-k100", 100, False, False, False),
    ("tls-both", 1, False, True, False),
    ("tls-both-reuse", 1, False, True, True),
    ("tls-both-k100", 100, False, True, True),
]
KINDS = {"rsa": "RSA-2048", "ec": "ECDSA P-256"}
NAMES = [s[0] for s in SCENARIOS]
FLOORS = {}        # kind: OpenSSL's server side of a full handshake, ms (hs_floor)

POSTFIX_TLS = """
# tlsvs: STARTTLS both ways (bench/tlsvs.py)
smtpd_tls_security_level = may
smtpd_tls_chain_files = %(key)s, %(cert)s
smtpd_tls_session_cache_database = btree:${data_directory}/smtpd_scache
smtp_tls_security_level = may
smtp_tls_CAfile = %(ca)s
smtp_tls_session_cache_database = btree:${data_directory}/smtp_scache
smtp_tls_connection_reuse = %(reuse)s
smtpd_tls_loglevel = 0
smtp_tls_loglevel = 0
"""
POSTFIX_TLS_MASTER = """tlsmgr    unix  -       -       n       1000?   1       tlsmgr
tlsproxy  unix  -       -       n       -       0       tlsproxy
"""

H = None          # the harness module, set by run()
BLAST = None


def wanted(only):
    """True when BENCH_ONLY names none, or any TLS row (with or without
    its /cert suffix)."""
    return not only or any(n.split("/")[0] in NAMES for n in only)


def selected(only):
    kinds = [k for k in os.environ.get("BENCH_TLS_CERTS", "rsa,ec").split(",") if k in KINDS]
    out = []
    for sc in SCENARIOS:
        for k in kinds:
            if not only or sc[0] in only or "%s/%s" % (sc[0], k) in only:
                out.append((sc, k))
    return out


# --------------------------------------------------------------- certificates

def _openssl(args, cwd):
    subprocess.run(["openssl"] + args, cwd=cwd, check=True, capture_output=True, timeout=120)


def make_pki(d):
    """A bench CA of each kind and, signed by it, a server certificate for
    the MTAs (bench.mtad.test) and one for the sink (localhost,
    127.0.0.1).  Returns {kind: {ca, mta_cert, mta_key, sink_cert,
    sink_key}} and the CA bundle (both CAs) for the MTAs' clients."""
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    newkey = {"rsa": ["-newkey", "rsa:2048"],
              "ec": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]}
    out = {}
    for kind in KINDS:
        ca_key, ca = "ca-%s.key" % kind, "ca-%s.crt" % kind
        _openssl(["req", "-x509", *newkey[kind], "-nodes", "-keyout", ca_key, "-out", ca,
                  "-days", "30", "-subj", "/CN=mtad bench CA %s" % kind,
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)
        files = {"ca": os.path.join(d, ca)}
        for who, cn, san in (("mta", "bench.mtad.test", "DNS:bench.mtad.test,DNS:bench.postfix.test"),
                             ("sink", "localhost", "DNS:localhost,IP:127.0.0.1")):
            key, csr, crt = ("%s-%s.key" % (who, kind), "%s-%s.csr" % (who, kind),
                             "%s-%s.crt" % (who, kind))
            _openssl(["req", *newkey[kind], "-nodes", "-keyout", key, "-out", csr,
                      "-subj", "/CN=%s" % cn], d)
            ext = os.path.join(d, "%s-%s.ext" % (who, kind))
            with open(ext, "w") as f:
                f.write("subjectAltName=%s\nextendedKeyUsage=serverAuth\n"
                        "basicConstraints=CA:FALSE\n" % san)
            _openssl(["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
                      "-CAcreateserial", "-out", crt, "-days", "30", "-extfile", ext], d)
            # The bench's own throw-away keys: Postfix's smtpd and mtad's
            # master read them as root; 0644 keeps the set-up simple.
            os.chmod(os.path.join(d, key), 0o644)
            files[who + "_cert"] = os.path.join(d, crt)
            files[who + "_key"] = os.path.join(d, key)
        out[kind] = files
    bundle = os.path.join(d, "ca-bundle.crt")
    with open(bundle, "w") as f:
        for kind in KINDS:
            with open(out[kind]["ca"]) as c:
                f.write(c.read())
    for kind in KINDS:
        # the sink serves its certificate and its CA: a client that checks
        # sees the whole chain
        chain = os.path.join(d, "sink-%s-chain.crt" % kind)
        with open(chain, "w") as f:
            for p in (out[kind]["sink_cert"], out[kind]["ca"]):
                with open(p) as c:
                    f.write(c.read())
        out[kind]["sink_chain"] = chain
    return out, bundle


# --------------------------------------------------------------- processes

def counters(path):
    try:
        with open(path) as f:
            return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", f.read())}
    except OSError:
        return {}


class TlsSink:
    """build/bench/smtpsink, with STARTTLS when given a certificate."""

    def __init__(self, port, workdir, cert=None, key=None, label="sink"):
        self.port, self.dir, self.cert, self.key = port, workdir, cert, key
        self.proc = None
        self.countfile = os.path.join(workdir, "%s-%d.count" % (label, port))
        self.outfile = os.path.join(workdir, "%s-%d.out" % (label, port))

    def start(self):
        argv = [H.SINK, "-l", "127.0.0.1:%d" % self.port, "-c", self.countfile, "-i", "20",
                "-j", "2"]
        if self.cert:
            argv += ["-C", self.cert, "-K", self.key]
        self.proc = H.spawn(argv, self.outfile)
        if not H.wait_banner(self.port, 10, self.proc):
            raise RuntimeError("smtpsink on port %d did not start (see %s)" %
                               (self.port, self.outfile))

    def counts(self):
        return counters(self.countfile)

    def count(self):
        return self.counts().get("msgs", 0)

    def cpu(self):
        return H.tree_cpu(self.proc.pid) if self.proc else 0.0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            H.kill_tree(self.proc.pid, 3)
            self.proc.wait(timeout=5)
        self.proc = None


def mtad_tls_config(pki, kind, bundle, outbound):
    text = "tls:\n  cert_file: %s\n  key_file: %s\n" % (pki[kind]["mta_cert"],
                                                      pki[kind]["mta_key"])
    if outbound:
        text += "  ca_file: %s\n" % bundle
    return text


def make_mtad(wd, sinkport, pki, kind, bundle, outbound):
    m = H.Mtad(wd, os.path.join(wd, "queue"), False, sinkport,
               extra=mtad_tls_config(pki, kind, bundle, outbound))
    if outbound:
        # delivery.tls sits in the harness's own delivery: section
        plain = m.write_config

        def write_config():
            plain()
            with open(m.cfg) as f:
                cfg = f.read()
            with open(m.cfg, "w") as f:
                f.write(cfg.replace("\ndelivery:\n", "\ndelivery:\n  tls: may\n", 1))
        m.write_config = write_config
    return m


def mtad_has_outbound_tls(wd, pki, bundle):
    """Does this mtad build know delivery.tls and tls.ca_file?  (`mtad -t`
    on the config the both-directions rows use.)"""
    os.makedirs(wd, exist_ok=True)
    os.chmod(wd, 0o755)
    m = make_mtad(wd, 25, pki, "rsa", bundle, True)
    m.write_config()
    r = subprocess.run([H.MTAD, "-t", "-c", m.cfg], capture_output=True, text=True, timeout=20)
    return r.returncode == 0, (r.stdout + r.stderr).strip()[-300:]


def make_postfix(wd, sinkport, pki, kind, bundle, reuse):
    extra = POSTFIX_TLS % dict(key=pki[kind]["mta_key"], cert=pki[kind]["mta_cert"],
                               ca=bundle, reuse="yes" if reuse else "no")
    return H.Postfix(wd, os.path.join(wd, "queue"), sinkport, main_extra=extra,
                     master_extra=POSTFIX_TLS_MASTER)


# --------------------------------------------------------------- load

def box_cpu():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]), v[3] + v[4]


def blast_argv(port, k, resume, msgs, limit):
    argv = [BLAST, "-s", "127.0.0.1:%d" % port, "-c", str(SESSIONS), "-m", str(msgs),
            "-k", str(k), "-z", str(SIZE), "-T", str(limit)]
    return argv + (["-R"] if resume else [])


def measure(mta, sink, k, resume, msgs):
    """One run: load into mta (or straight into the sink when mta is None),
    wait until the sink has every accepted message; rates, CPU of every
    party, handshakes."""
    port = mta.port if mta else sink.port
    limit = 60 if H.QUICK else 120
    c0, s0 = sink.counts(), sink.cpu()
    m0 = H.tree_cpu(mta.root()) if mta else 0.0
    b0 = box_cpu()
    t0 = time.time()
    argv = blast_argv(port, k, resume, msgs, limit)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=limit + 30)
    wall = time.time() - t0
    kv = {a: b for a, b in re.findall(r"(\w+)=([\d.]+)", r.stdout)}
    res = dict(msgs=msgs, wall=wall, cmd=" ".join(["build/bench/tlsblast"] + argv[1:2] +
                                                  ["127.0.0.1:PORT"] + argv[3:]))
    if "accepted" not in kv:
        res.update(accepted=0, error=(r.stdout + r.stderr).strip()[-300:])
    else:
        res.update(accepted=int(kv["accepted"]), errors=int(kv["errors"]),
                   conns=int(kv["conns"]), resumed_in=int(kv["resumed"]),
                   client_cpu=float(kv["cpu_s"]))
    deadline = time.time() + H.E2E_TIMEOUT
    got = sink.count() - c0.get("msgs", 0)
    while got < res["accepted"] and time.time() < deadline:
        time.sleep(0.01)
        got = sink.count() - c0.get("msgs", 0)
    t_e2e = time.time() - t0
    m1 = H.tree_cpu(mta.root()) if mta else 0.0
    s1 = sink.cpu()
    b1 = box_cpu()
    c1 = sink.counts()
    res["delivered"] = got
    res["e2e_complete"] = got >= res["accepted"] and res["accepted"] > 0
    res["acc_rate"] = res["accepted"] / wall if wall > 0 else 0
    res["e2e_rate"] = got / t_e2e if t_e2e > 0 else 0
    res["mb_s"] = got * SIZE / t_e2e / 1e6 if t_e2e > 0 else 0
    ticks = max(1, b1[0] - b0[0])
    res["busy"] = 100.0 * (1 - (b1[1] - b0[1]) / ticks)
    avail = t_e2e * H.NCPU
    res["client_share"] = 100.0 * res.get("client_cpu", 0) / avail
    if res.get("conns"):
        # what one connection (handshake and SMTP) costs the load client
        res["client_ms_conn"] = 1000.0 * res["client_cpu"] / res["conns"]
    res["sink_share"] = 100.0 * (s1 - s0) / avail
    if got:
        # what the load tools (client and sink) cost per message in this run
        res["tools_ms"] = 1000.0 * (res.get("client_cpu", 0) + s1 - s0) / got
    for key in ("conns", "tls", "tls_resumed", "tls_failed"):
        res["out_" + key] = c1.get(key, 0) - c0.get(key, 0)
    if mta:
        res["mta_cpu"] = m1 - m0
        res["mta_share"] = 100.0 * (m1 - m0) / avail
        res["cpu_per_1000"] = (m1 - m0) / got * 1000 if got else None
        hs = res.get("conns", 0) - res.get("errors", 0) + res["out_tls"]
        res["handshakes"] = hs
        res["hs_per_core_s"] = hs / (m1 - m0) if m1 > m0 else None
        res["rss_kb"] = mta.worker_rss_kb()
    res["load1"] = os.getloadavg()[0]
    return res


def calibrate(mta, sink, k, resume):
    """A short unrecorded trial (also the warm-up: processes, pools, the
    MTAs' session caches) sets the message count to about RUN_SECS."""
    trial = 2000 if k > 1 else 200
    r = measure(mta, sink, k, resume, trial)
    if not r["e2e_complete"]:
        raise RuntimeError("trial run into %s: %d of %d delivered (%s)" % (
            mta.name if mta else "the sink", r["delivered"], r["accepted"],
            r.get("error", "see its log")))
    lo, hi = (2000, 100000) if k > 1 else (100, 20000)
    return int(min(hi, max(lo, r["e2e_rate"] * H.RUN_SECS)))


def describe(who, r):
    return ("%.0f msgs/s e2e, box %.0f%% busy, client %.0f%% sink %.0f%%%s, out: %d conns "
            "%d TLS %d resumed" % (
                r["e2e_rate"], r["busy"], r["client_share"], r["sink_share"],
                (" %s %.0f%% (%.2f ms/msg)" % (who, r["mta_share"], r["cpu_per_1000"] or 0))
                if "mta_share" in r else "", r["out_conns"], r["out_tls"],
                r["out_tls_resumed"])) + ("" if r["e2e_complete"] else " INCOMPLETE")


def run(h, mtas, results, notes, shm):
    global H, BLAST
    H = h
    h.TOOLNAME[TOOL] = TOOLNAME
    only = set(filter(None, os.environ.get("BENCH_ONLY", "").split(",")))
    todo = selected(only)
    if not todo:
        return
    src = os.path.join(h.BUILD, "bench", "tlsblast")
    if not os.access(src, os.X_OK):
        notes.append("TLS rows: %s missing (make first)" % src)
        return
    BLAST = shutil.copy2(src, os.path.dirname(h.SINK))
    base = os.path.join(shm, "tls")
    pki, bundle = make_pki(os.path.join(base, "pki"))
    have_out, why = mtad_has_outbound_tls(os.path.join(base, "probe"), pki, bundle)
    if "mtad" in mtas and not have_out:
        notes.append("TLS: this mtad build has no outbound STARTTLS (`mtad -t` on "
                     "delivery.tls: may: %s): its tls-both rows are not run" % why)
    for kind in sorted({k for sc, k in todo}):
        hs_floor(notes, pki, kind)
    h.log("TLS rows: %s" % ", ".join("%s/%s" % (sc[0], k) for sc, k in todo))
    for n, (sc, kind) in enumerate(todo):
        name, k, resume, outbound, reuse = sc
        row = "%s/%s" % (name, kind)
        running = []
        try:
            wd = os.path.join(base, "%02d-%s-%s" % (n, name, kind))
            os.makedirs(wd)
            os.chmod(wd, 0o755)
            peers = []
            for who in ("mtad", "postfix"):
                if who not in mtas or (who == "mtad" and outbound and not have_out):
                    continue
                d = os.path.join(wd, who)
                os.makedirs(d)
                os.chmod(d, 0o755)
                sink = TlsSink(h.free_port(), d,
                               pki[kind]["sink_chain"] if outbound else None,
                               pki[kind]["sink_key"] if outbound else None)
                sink.start()
                running.append(sink)
                if who == "mtad":
                    mta = make_mtad(d, sink.port, pki, kind, bundle, outbound)
                else:
                    mta = make_postfix(d, sink.port, pki, kind, bundle, reuse)
                try:
                    mta.start()
                except Exception as e:
                    notes.append("%s: %s did not start: %s" % (row, who, str(e)[:300]))
                    h.log(notes[-1])
                    mta.stop()
                    continue
                running.append(mta)
                peers.append((mta, sink))
            if not peers:
                continue
            csink = TlsSink(h.free_port(), wd, pki[kind]["sink_chain"], pki[kind]["sink_key"],
                            label="ceiling")
            csink.start()
            running.append(csink)
            counts = {m.name: calibrate(m, s, k, resume) for m, s in peers}
            cmsgs = calibrate(None, csink, k, resume)
            for rep in range(h.REPS):
                turn = [(None, csink)] + peers
                turn = turn[rep % len(turn):] + turn[:rep % len(turn)]
                for mta, sink in turn:
                    who = mta.name if mta else "sink"
                    r = measure(mta, sink, k, resume, counts[who] if mta else cmsgs)
                    results.setdefault((row, TOOL, who), []).append(r)
                    h.log("%s %s: %d msgs, %s" % (row, who, r["msgs"], describe(who, r)))
            for mta, sink in peers:
                c = sink.counts()
                if outbound:
                    notes.append("%s, %s → sink over the whole row (warm-up included; "
                                 "one plaintext connection is the start-up probe): %d "
                                 "connections, %d TLS sessions (%d resumed), %d failed "
                                 "handshakes, %d messages" % (
                                     row, mta.name, c.get("conns", 0), c.get("tls", 0),
                                     c.get("tls_resumed", 0), c.get("tls_failed", 0),
                                     c.get("msgs", 0)))
                if mta.name == "mtad" and outbound:
                    tail = tls_log_lines(mta.logfile)
                    if tail:
                        notes.append("%s, mtad's log, a delivery: %s" % (row, tail))
        except Exception as e:
            notes.append("%s aborted: %s" % (row, str(e)[:300]))
            h.log(notes[-1])
        finally:
            for obj in reversed(running):
                try:
                    obj.stop()
                except Exception as e:
                    h.log("stop: %s" % e)


def hs_floor(notes, pki, kind):
    """OpenSSL's server side of one full handshake with the MTAs'
    certificate, measured alone (bench/tls_hs_cost: memory BIOs, no kernel,
    no SMTP): the least CPU a server spends on a message that comes with a
    full handshake, in ms, into FLOORS[kind]."""
    prog = os.path.join(H.BUILD, "bench", "tls_hs_cost")
    try:
        r = subprocess.run([prog, pki[kind]["mta_cert"], pki[kind]["mta_key"], "500"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        notes.append("TLS %s: handshake floor not measured: %s" % (kind, e))
        return
    kv = dict(re.findall(r"(\w+)=([\d.]+)", r.stdout))
    if r.returncode != 0 or "server_cpu_ms" not in kv:
        notes.append("TLS %s: handshake floor not measured: %s" %
                     (kind, (r.stdout + r.stderr).strip()[-200:]))
        return
    FLOORS[kind] = float(kv["server_cpu_ms"])
    H.log("TLS %s: OpenSSL's server side of a full handshake, alone: %s ms of CPU" %
          (kind, kv["server_cpu_ms"]))


def tls_log_lines(path):
    """One delivery line of mtad's log that mentions TLS (shows what the
    log says about the outbound session)."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if "tls" in line.lower() and ("deliver" in line or "relay=" in line):
                    return line.strip()[:300]
    except OSError:
        pass
    return ""


# --------------------------------------------------------------- report

def _med(rs, key):
    v = [r.get(key) for r in rs if r.get(key) is not None]
    return statistics.median(v) if v else None


def resumed_share(rs, resume):
    """Inbound sessions resumed, in % of those that could be: with -R every
    client session's first connection has nothing to offer, so those
    (SESSIONS per run) are left out of the count."""
    offered = sum(r.get("conns", 0) - (SESSIONS if resume else 0) for r in rs)
    if not rs or offered <= 0:
        return None
    return 100.0 * sum(r.get("resumed_in", 0) for r in rs) / offered


def _rows(results):
    for sc in SCENARIOS:
        for kind in KINDS:
            row = "%s/%s" % (sc[0], kind)
            if any((row, TOOL, w) in results for w in ("mtad", "postfix", "sink")):
                yield sc, kind, row


def section(results):
    """The TLS table for RESULTS.md ("" when no TLS row was run)."""
    rows = list(_rows(results))
    if not rows:
        return ""
    fmt = H.fmt
    loads = [r["load1"] for (n, t, w), rs in results.items() if t == TOOL for r in rs]
    out = ["## TLS: mtad against Postfix (issues 12 and 20)", "",
           "tlsblast (%d sessions, 1 KiB, STARTTLS on every connection) → MTA → smtpsink; "
           "`in` rows relay in plaintext, `both` rows with STARTTLS to a TLS sink.  "
           "Medians of %d [min–max].  1-minute load average during these rows: %.1f–%.1f "
           "(the machine is shared: other jobs skew the rates, less so the CPU per "
           "message).  How to read the columns: after the table." % (
               SESSIONS, H.REPS, min(loads), max(loads)), "",
           "| scenario/cert | mtad msgs/s e2e | Postfix msgs/s e2e | ratio | "
           "MTA CPU s/1000 msgs mtad / Postfix | handshakes/s per core mtad / Postfix | "
           "inbound resumed mtad / Postfix | outbound TLS / connections at the sink "
           "(resumed) mtad ; Postfix | box busy % mtad / Postfix | CPU share % client / sink "
           "/ MTA: mtad run ; Postfix run | client CPU ms per connection mtad run ; "
           "Postfix run | tools alone msgs/s (× mtad) |",
           "|" + "---|" * 12]

    for sc, kind, row in rows:
        rm = results.get((row, TOOL, "mtad"), [])
        rp = results.get((row, TOOL, "postfix"), [])
        rc = results.get((row, TOOL, "sink"), [])

        def col(rs, key, digits=0):
            return fmt(H.summarize([r.get(key) for r in rs]), digits) if rs else "-"

        ratio = "-"
        em, ep = _med(rm, "e2e_rate"), _med(rp, "e2e_rate")
        if em and ep:
            ratio = "%.1f×" % (em / ep)

        def resumed(rs):
            share = resumed_share(rs, sc[2])
            return "-" if share is None else "%.1f%%" % share

        def outb(rs):
            if not rs:
                return "-"
            return "%d / %d (%d)" % (sum(r["out_tls"] for r in rs), sum(r["out_conns"] for r in rs),
                                     sum(r["out_tls_resumed"] for r in rs))
        cm = _med(rc, "e2e_rate")
        ceil = "%.0f (%.1f×)" % (cm, cm / em) if cm and em else ("%.0f" % cm if cm else "-")
        flag = " (!)" if any(not r["e2e_complete"] for r in rm + rp) else ""
        def share(rs):
            if not rs:
                return "-"
            return "%.0f / %.0f / %.0f" % (_med(rs, "client_share"), _med(rs, "sink_share"),
                                           _med(rs, "mta_share"))
        out.append("| %s%s | %s | %s | %s | %s / %s | %s / %s | %s / %s | %s ; %s | %s / %s | %s | %s ; %s | %s |" % (
            row, flag, col(rm, "e2e_rate"), col(rp, "e2e_rate"), ratio,
            col(rm, "cpu_per_1000", 2), col(rp, "cpu_per_1000", 2),
            col(rm, "hs_per_core_s"), col(rp, "hs_per_core_s"),
            resumed(rm), resumed(rp), outb(rm), outb(rp),
            col(rm, "busy"), col(rp, "busy"), share(rm) + " ; " + share(rp),
            col(rm, "client_ms_conn", 2), col(rp, "client_ms_conn", 2), ceil))
    out.append("")
    out.append(READING)
    out += allows(results)
    return "\n".join(out) + "\n"


def allows(results):
    """The highest ratio this box allows in the rows with a full handshake
    per message, whatever the MTA's own code does: the load client and the
    sinks share the 2 cores with the MTA, and the MTA spends at least
    OpenSSL's server side of each handshake (measured alone)."""
    lines = []
    for sc, kind, row in _rows(results):
        name, k, resume = sc[0], sc[1], sc[2]
        floor = FLOORS.get(kind)
        rm = results.get((row, TOOL, "mtad"), [])
        rp = results.get((row, TOOL, "postfix"), [])
        if k != 1 or resume or not floor or not rm or not rp:
            continue
        tools, pf = _med(rm, "tools_ms"), _med(rp, "e2e_rate")
        if not tools or not pf:
            continue
        hs = floor
        most = H.NCPU * 1000.0 / (tools + hs)
        em = _med(rm, "e2e_rate")
        lines.append("| %s | %.2f | %.2f | %.0f | %.0f | %.1f× | %.1f× |" % (
            row, tools, hs, most, pf, most / pf, em / pf if em else 0))
    if not lines:
        return []
    return ["", "### What this box allows with a full handshake per message", "",
            "The load client, the sinks and the MTA share %d cores.  An MTA that does "
            "a full TLS handshake for each inbound message spends at least OpenSSL's "
            "server side of it (bench/tls_hs_cost: both ends in one process over "
            "memory BIOs, TLS 1.3, X25519, no tickets, only the server's calls "
            "timed), and the tools spend what they spent in mtad's own run.  So no "
            "MTA can relay faster than %d cores / (tools + handshake) here, and "
            "no ratio against Postfix's measured rate can pass the last but one "
            "column, even for an MTA whose own code cost nothing." % (H.NCPU, H.NCPU), "",
            "| scenario/cert | tools' CPU ms per message (client + sink, mtad run) | "
            "OpenSSL server handshake ms | most msgs/s any MTA | Postfix msgs/s | "
            "highest ratio possible | mtad's ratio |", "|---|---|---|---|---|---|---|"] + lines


READING = """- msgs/s e2e: messages counted at the sink / time from the start of the
  load until the sink has them all.  CPU s/1000 msgs: utime+stime of the
  MTA's whole process tree (mtad: master, logd, workers; Postfix: master and
  every daemon, tlsmgr and tlsproxy included) per 1,000 delivered messages;
  with one full handshake per message this is also ms per message with its
  handshake.
- handshakes/s per core: TLS handshakes the MTA did in the run (inbound:
  tlsblast's connections; outbound: TLS sessions counted at the sink, full
  or resumed) / the MTA's CPU seconds - the rate one core would sustain,
  whatever else shared the box.
- inbound resumed: sessions the MTA resumed, in % of the connections that
  offered a session (tls-in-resume: all but each client session's first).
- outbound: TLS sessions / TCP connections the sink counted during the
  recorded runs, resumed ones in brackets: equal figures mean every delivery
  connection was TLS; fewer connections than messages mean connection reuse.
- CPU share: CPU time of the load client (its getrusage), of the MTA's sink
  and of the MTA, in % of the box (2 cores × the run's time); the rest of
  "box busy" is other work on the machine.
- client CPU per connection: the load client's CPU time (getrusage) per
  TCP connection it made: a full (or resumed) TLS client handshake and the
  SMTP exchange around it, the same work whichever MTA it talks to.
- The tools are not the limit when "tools alone" (tlsblast straight into a
  TLS sink, same sessions and handshakes, same time window) is well above the
  MTA's rate, and the client's and sink's CPU shares leave the MTA room;
  on 2 cores shared by client, MTA and sink, the client's handshake CPU is a
  real part of the box (its share is shown), so the per-core and per-message
  CPU figures are the ones that do not depend on it.
"""


def targets(results, check):
    """Issues 12's and 20's TLS targets on this run's figures."""
    def ratio(row):
        m = _med(results.get((row, TOOL, "mtad"), []), "e2e_rate")
        p = _med(results.get((row, TOOL, "postfix"), []), "e2e_rate")
        return m / p if m and p else None
    ran = {row for sc, k, row in _rows(results)}
    for kind in KINDS:
        def has(name):
            return "%s/%s" % (name, kind) in ran
        if has("tls-both"):
            check("[TLS %s] issue 12: tls-both end-to-end >= 10× Postfix" % kind,
                  ratio("tls-both/" + kind), 10.0, unit="×")
        if has("tls-in-hs"):
            row = "tls-in-hs/" + kind
            check("[TLS %s] issue 20: full handshake per message >= 2.5× Postfix" % kind,
                  ratio(row), 2.5, unit="×")
            rs = results.get((row, TOOL, "mtad"), [])
            check("[TLS %s] issue 20: box >= 90%% busy in tls-in-hs (mtad)" % kind,
                  _med(rs, "busy"), 90.0, unit="%")
            if kind == "rsa":
                check("[TLS rsa] issue 20: mtad CPU <= 1.2 ms per message with its handshake",
                      _med(rs, "cpu_per_1000"), 1.2, higher=False, unit=" ms")
            else:
                rsa = _med(results.get(("tls-in-hs/rsa", TOOL, "mtad"), []), "cpu_per_1000")
                check("[TLS ec] issue 20: mtad CPU per message with ECDSA below RSA's",
                      _med(rs, "cpu_per_1000"), rsa, higher=False, unit=" ms")
        if has("tls-in-resume"):
            rs = results.get(("tls-in-resume/" + kind, TOOL, "mtad"), [])
            check("[TLS %s] issue 20: sessions resumed, of the connections that offered one"
                  % kind, resumed_share(rs, True), 95.0, unit="%")
        if has("tls-in-k100"):
            check("[TLS %s] issue 20: 100 messages per TLS connection >= 10× Postfix" % kind,
                  ratio("tls-in-k100/" + kind), 10.0, unit="×")
        if has("tls-both-reuse"):
            check("[TLS %s] issue 20: both directions, outbound connection reuse, "
                  ">= 10× Postfix" % kind, ratio("tls-both-reuse/" + kind), 10.0, unit="×")
