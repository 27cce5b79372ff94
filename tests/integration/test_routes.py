"""mtactl route add/del/get/list/import/export through the real binary.

Each test writes a relay.yaml (conftest's Mtad, not started) whose
routes.db lives in the test's temp directory, and runs
`build/mtactl -c relay.yaml route ...` against it.
"""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MTACTL = os.path.join(ROOT, os.environ.get("MTAD_BUILD", "build"), "mtactl")


def route(m, *args, stdin=None):
    return subprocess.run([MTACTL, "-c", m.cfg_path, "route", *args],
                          capture_output=True, text=True, timeout=30,
                          input=stdin)


def ok(m, *args, stdin=None):
    r = route(m, *args, stdin=stdin)
    assert r.returncode == 0, "route %s: rc=%d out=%r err=%r" % (
        " ".join(args), r.returncode, r.stdout, r.stderr)
    return r.stdout


def test_add_get_del(mtad_factory):
    m = mtad_factory()
    default = m.cfg["routes"]["default"]
    out = ok(m, "add", "example.org", "smtp:[10.0.0.1]:25")
    assert "example.org -> smtp:[10.0.0.1]:25" in out
    assert os.path.exists(m.cfg["routes"]["db"])

    out = ok(m, "get", "example.org")
    assert out == ("example.org -> smtp:[10.0.0.1]:25 "
                   "(matched domain key 'example.org')\n")
    out = ok(m, "get", "someone@Example.ORG")
    assert out == ("someone@Example.ORG -> smtp:[10.0.0.1]:25 "
                   "(matched domain key 'example.org')\n")
    out = ok(m, "get", "someone@example.net")
    assert out == ("someone@example.net -> %s (no key matched; "
                   "routes.default)\n" % default)

    ok(m, "del", "example.org")
    out = ok(m, "get", "someone@example.org")
    assert "(no key matched; routes.default)" in out
    r = route(m, "del", "example.org")
    assert r.returncode == 1
    assert "no such key 'example.org'" in r.stderr


def test_lookup_order_shown_by_get(mtad_factory):
    m = mtad_factory()
    ok(m, "add", "alice@a.b.example.org", "maildir:/tmp/alice")
    ok(m, "add", "a.b.example.org", "smtp:[10.0.0.2]:25")
    ok(m, "add", ".b.example.org", "smtp:[10.0.0.3]:25")
    ok(m, "add", ".example.org", "smtp:[10.0.0.4]:25")
    want = {
        "alice@a.b.example.org": "maildir:/tmp/alice (matched address key "
                                 "'alice@a.b.example.org')",
        "bob@a.b.example.org": "smtp:[10.0.0.2]:25 (matched domain key "
                               "'a.b.example.org')",
        "bob@c.b.example.org": "smtp:[10.0.0.3]:25 (matched wildcard key "
                               "'.b.example.org')",
        "bob@x.example.org": "smtp:[10.0.0.4]:25 (matched wildcard key "
                             "'.example.org')",
        "bob@example.org": "%s (no key matched; routes.default)"
                           % m.cfg["routes"]["default"],
    }
    for addr, tail in want.items():
        assert ok(m, "get", addr) == "%s -> %s\n" % (addr, tail)


def test_malformed_route_is_refused_with_reason(mtad_factory):
    m = mtad_factory()
    r = route(m, "add", "example.org", "smtpx:[10.0.0.1]:25")
    assert r.returncode == 1
    assert "unknown route type 'smtpx'" in r.stderr
    r = route(m, "add", "example.org", "reject:450", "4.7.1", "no")
    assert r.returncode == 1
    assert "reject needs a 5xx reply code, got '450'" in r.stderr
    r = route(m, "add", "bad key", "discard")
    assert r.returncode == 1
    assert "space or control character in key" in r.stderr
    assert ok(m, "list") == ""


def test_list_is_sorted_lowercase_and_tab_separated(mtad_factory):
    m = mtad_factory()
    ok(m, "add", "Zeta.Example", "discard")
    ok(m, "add", "alpha.example", "smtp:mx.alpha.example:2525")
    # an unquoted multi-word route is joined with single blanks
    ok(m, "add", "USER@beta.example", "reject:550", "5.1.1", "no", "such",
       "user")
    assert ok(m, "list") == (
        "alpha.example\tsmtp:mx.alpha.example:2525\n"
        "user@beta.example\treject:550 5.1.1 no such user\n"
        "zeta.example\tdiscard\n")


def test_import_reasons_carry_no_control_byte_and_nul_is_refused(
        mtad_factory, workdir):
    """route import names a bad line without its control bytes (a key is
    checked before it is quoted: an escape sequence in a routes file does
    not reach the terminal), and a NUL inside a line is refused, not taken
    as the end of the line (which imported a shorter route than written)."""
    m = mtad_factory()
    ok(m, "add", "keep.example", "discard")
    bad = os.path.join(workdir, "ctl.routes")
    with open(bad, "wb") as f:
        f.write(b"\x1b]0;owned\x07.example\n"
                b"nul.example smtp:[10.0.0.1]:25\x00, smtp:[10.6.6.6]:25\n")
    r = subprocess.run([MTACTL, "-c", m.cfg_path, "route", "import", bad],
                       capture_output=True, timeout=60)
    assert r.returncode == 1, r
    assert b"\x1b" not in r.stderr and b"\x07" not in r.stderr, r.stderr
    assert b"ctl.routes:1: bad key: space or control character in key" \
        in r.stderr, r.stderr
    assert b"ctl.routes:2: NUL byte in line" in r.stderr, r.stderr
    assert ok(m, "list") == "keep.example\tdiscard\n"


def test_import_is_all_or_nothing_and_names_lines(mtad_factory, workdir):
    m = mtad_factory()
    ok(m, "add", "keep.example", "discard")
    bad = os.path.join(workdir, "bad.routes")
    with open(bad, "w") as f:
        f.write("# routes\n"
                "\n"
                "one.example smtp:[10.0.0.1]:25\n"
                "two.example smtpx:nope\n"
                "three.example\n"
                "four.example   discard\n")
    r = route(m, "import", bad)
    assert r.returncode == 1
    assert "%s:4: bad route for 'two.example': unknown route type 'smtpx'" \
        % bad in r.stderr
    assert "%s:5: missing route after key 'three.example'" % bad in r.stderr
    assert "nothing imported" in r.stderr
    assert ok(m, "list") == "keep.example\tdiscard\n"

    good = os.path.join(workdir, "good.routes")
    with open(good, "w") as f:
        f.write("# comment\n"
                "  one.example\tsmtp:[10.0.0.1]:25, smtp:[10.0.0.2]:2525  \n"
                "\n"
                "Two.Example reject:550 5.7.1 go away\n")
    out = ok(m, "import", good)
    assert "imported 2 routes" in out
    assert ok(m, "list") == (
        "keep.example\tdiscard\n"
        "one.example\tsmtp:[10.0.0.1]:25, smtp:[10.0.0.2]:2525\n"
        "two.example\treject:550 5.7.1 go away\n")

    ok(m, "import", "--replace", good)
    assert "keep.example" not in ok(m, "list")


def test_export_import_round_trip(mtad_factory):
    a = mtad_factory(subdir="a")
    b = mtad_factory(subdir="b")
    ok(a, "add", "x@one.example", "maildir:/var/mail/x")
    ok(a, "add", "one.example", "smtp:[::1]:2525,smtp:[IPv6:::1]:2526")
    ok(a, "add", ".two.example", "defer:451 4.3.0 later")
    ok(a, "add", "three.example", "discard")
    exported = ok(a, "export")
    assert exported.startswith("#")
    assert "one.example smtp:[::1]:2525,smtp:[IPv6:::1]:2526\n" in exported

    out = ok(b, "import", "-", stdin=exported)
    assert "imported 4 routes" in out
    assert ok(b, "list") == ok(a, "list")
    assert ok(b, "export").splitlines()[1:] == exported.splitlines()[1:]


def test_usage_errors_exit_2(mtad_factory):
    m = mtad_factory()
    for args in ([], ["frob"], ["add", "example.org"], ["del"],
                 ["get", "a", "b"], ["list", "x"], ["import"]):
        r = route(m, *args)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert "usage" in r.stderr


def test_running_mtad_sees_route_changes_without_reload(mtad_factory):
    """The worker's next RCPT lookup sees a route written by mtactl."""
    m = mtad_factory({"routes": {"static": {"static.example": "discard"}}})
    m.start()
    # routes.static was written into the db at start
    assert "static.example\tdiscard\n" in ok(m, "list")
    s = m.smtp()
    try:
        s.ehlo("client.example")
        assert s.mail("sender@client.example")[0] == 250
        assert s.rcpt("u@blocked.example")[0] == 250

        ok(m, "add", "blocked.example", "reject:550 5.7.1 blocked by route")
        code, msg = s.rcpt("v@blocked.example")
        assert (code, msg) == (550, b"5.7.1 blocked by route")
        code, msg = s.rcpt("w@sub.blocked.example")
        assert code == 250, (code, msg)       # exact domain key only

        ok(m, "add", "w@sub.blocked.example", "defer:451 4.3.2 not now")
        code, msg = s.rcpt("W@Sub.Blocked.Example")
        assert (code, msg) == (451, b"4.3.2 not now")

        ok(m, "del", "blocked.example")
        assert s.rcpt("x@blocked.example")[0] == 250
        s.rset()
    finally:
        s.close()
    assert m.proc.poll() is None
