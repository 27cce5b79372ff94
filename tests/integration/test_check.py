"""mtad -t and mtad -n: the configuration as the start will take it."""
import os
import re
import pwd
import subprocess

import pytest

from mtadtest import IS_ROOT, MTAD, USER


def run(*args):
    return subprocess.run([MTAD, *args], capture_output=True, text=True,
                          timeout=60)


def test_t_refuses_what_the_start_refuses(mtad_factory, workdir):
    """A pid file in a directory anyone can change: the start exits 73;
    -t says so too, with the same line (the old -t said "ok")."""
    d = os.path.join(workdir, "open")
    os.mkdir(d)
    os.chmod(d, 0o777)
    m = mtad_factory({"server": {"pid_file": os.path.join(d, "mtad.pid")}})
    t = run("-t", "-c", m.cfg_path)
    start = run("-f", "-c", m.cfg_path)
    assert start.returncode == 73, start.stderr
    assert t.returncode == 73, (t.stdout, t.stderr)
    assert "server.pid_file:" in t.stderr and "ok" not in t.stdout, t
    assert t.stderr.strip() == start.stderr.strip(), (t.stderr, start.stderr)


@pytest.mark.skipif(not IS_ROOT, reason="needs the workers' user")
def test_t_refuses_a_spool_whose_parent_the_workers_user_owns(mtad_factory,
                                                              workdir):
    """The workers' user could swap the spool for a link under root: the
    start refuses it (73), and now -t does too."""
    parent = os.path.join(workdir, "theirs")
    os.mkdir(parent, 0o755)
    pw = pwd.getpwnam(USER)
    os.chown(parent, pw.pw_uid, pw.pw_gid)
    m = mtad_factory({"spool": {"dir": os.path.join(parent, "spool")}})
    t = run("-t", "-c", m.cfg_path)
    start = run("-f", "-c", m.cfg_path)
    assert start.returncode == 73, start.stderr
    assert t.returncode == 73, (t.stdout, t.stderr)
    assert "spool.dir:" in t.stderr, t.stderr
    assert t.stderr.strip() == start.stderr.strip(), (t.stderr, start.stderr)


def test_t_ok_while_mtad_runs(mtad_factory):
    """The checks find the running daemon's own files acceptable (the
    control socket, the pid file, the spool), and bind nothing."""
    m = mtad_factory()
    m.start()
    t = run("-t", "-c", m.cfg_path)
    assert t.returncode == 0, t.stderr
    assert t.stdout.strip().endswith("%s: ok" % m.cfg_path), t.stdout


def show(path):
    r = run("-n", "-c", path)
    assert r.returncode == 0, r.stderr
    return r.stdout


def parse(out):
    """-n's lines as [(dotted key, value text, is default)]."""
    rows = []
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        key, sep, value = line.partition(": ")
        assert sep and " " not in key, line
        default = value.endswith("  # default")
        rows.append((key, value[:-len("  # default")] if default else value,
                     default))
    return rows


def unflatten(rows):
    """The rows as a relay.yaml, each value's text as -n wrote it."""
    out, open_ = [], []
    for key, value, _ in rows:
        parts = key.split(".")
        common = 0
        while (common < len(open_) and common < len(parts) - 1 and
               open_[common] == parts[common]):
            common += 1
        open_ = open_[:common]
        for p in parts[common:-1]:
            out.append("  " * len(open_) + p + ":")
            open_.append(p)
        out.append("  " * len(open_) + "%s: %s" % (parts[-1], value))
    return "\n".join(out) + "\n"


def test_n_prints_every_key_marks_defaults_and_reads_back(mtad_factory,
                                                          workdir):
    """-n: one "section.key: value" line per key of every section, "#
    default" after those the file does not set; put back into a
    relay.yaml, the values give the same configuration, none a default."""
    m = mtad_factory({
        "server": {"listen": ["127.0.0.1:%d" % 2525,
                              {"address": "[::1]:2526",
                               "proxy_protocol": "v2",
                               "proxy_from": ["10.0.0.0/8", "::1/128"]}]},
        "limits": {"max_message_size": "10M", "load": {"refuse": 12.5}},
        "routes": {"static": {"example.org": "discard",
                              ".sub.example": "smtp:[192.0.2.1]:25"}},
        "log": {"level": "debug"},
        "delivery": {"retry": ["90s", "1h"]},
    })
    out = show(m.cfg_path)
    rows = parse(out)
    got = {k: v for k, v, _ in rows}
    default = {k for k, _, d in rows if d}
    assert len(got) == len(rows), "one line per key"
    assert "server.user" in default and "log.level" not in default
    assert "limits.load.queue_only" in default
    assert "limits.load.refuse" not in default
    assert got["limits.max_message_size"] == "10M"
    assert got["limits.load.refuse"] == "12.50"
    assert got["limits.max_recipients"] == "1000"
    assert got["log.level"] == "debug"
    assert got["delivery.retry"] == "[90s, 1h]"
    assert got["server.listen"] == (
        '["127.0.0.1:2525", {address: "[::1]:2526", proxy_protocol: v2, '
        'proxy_from: [10.0.0.0/8, "::1/128"]}]'), got["server.listen"]
    assert got["routes.static"] == (
        '{example.org: discard, .sub.example: "smtp:[192.0.2.1]:25"}')
    for section in ("server", "limits", "relay", "spool", "routes",
                    "delivery", "log", "tls", "dns", "dkim", "metrics",
                    "tlsrpt", "auth", "submission"):
        assert any(k.startswith(section + ".") for k in got), section
    again = os.path.join(workdir, "again.yaml")
    kept = [r for r in rows if r[1] not in ("~", "[]", "{}")]
    with open(again, "w") as f:
        f.write(unflatten(kept))
    rows2 = parse(show(again))
    assert [(k, v) for k, v, _ in rows2] == [(k, v) for k, v, _ in rows]
    assert not [k for k, _, d in rows2 if d and k in dict(
        (r[0], 1) for r in kept)]


def test_n_escapes_control_characters(mtad_factory):
    """What the file holds reaches a terminal escaped (YAML's "\\e" is
    an ESC byte in the value)."""
    m = mtad_factory()
    with open(m.cfg_path, "a") as f:
        f.write('tlsrpt:\n  organization: "Ex\\e[2Jample # Co"\n')
    out = show(m.cfg_path)
    assert "\x1b" not in out
    assert 'tlsrpt.organization: "Ex\\x1b[2Jample # Co"\n' in out, out


def test_n_invalid_config(mtad_factory):
    m = mtad_factory({"limits": {"max_recipients": "many"}})
    r = run("-n", "-c", m.cfg_path)
    assert r.returncode == 1 and "limits.max_recipients" in r.stderr
    assert r.stdout == ""


def test_every_key_is_documented_in_the_man_page_and_the_example(
        mtad_factory):
    """relay.yaml(5) is the reference and packaging/relay.yaml.example the
    annotated file: every key -n knows (the parser's own tables) has its
    entry in both, so a new key cannot ship undocumented.  A key is found
    under its section's heading (.SH SECTION, a "section:" block)."""
    m = mtad_factory({})
    keys = [k for k, _, _ in parse(run("-n", "-c", m.cfg_path).stdout)]
    assert len(keys) > 60, keys
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "relay.yaml.5")) as f:
        man = f.read().replace("\\-", "-").replace("\\_", "_")
    with open(os.path.join(root, "packaging", "relay.yaml.example")) as f:
        example = f.read()
    missing = []
    for key in keys:
        section, _, rest = key.partition(".")
        leaf = rest.rpartition(".")[2]
        head = "\n.SH " + section.upper() + "\n"
        assert head in man, head
        body = man.split(head, 1)[1].split("\n.SH ", 1)[0]
        if not re.search(r"^\.BR? (%s|%s)[: ]" % (re.escape(rest),
                                                   re.escape(leaf)), body, re.M):
            missing.append("relay.yaml(5) " + key)
        block = re.search(r"^#? ?%s:\n((?:#?[ \t].*\n|#\n|\n)*)" %
                          re.escape(section), example, re.M)
        if block is None or not re.search(r"^\s*#?\s*%s:" % re.escape(leaf),
                                          block.group(1), re.M):
            missing.append("relay.yaml.example " + key)
    assert not missing, "\n".join(missing)
