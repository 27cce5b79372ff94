"""The layering check (tests/layering.sh, run by `make layering` and so by
`make test`): it passes on the real tree and fails, naming file and line,
on a tree with a forbidden include."""
import os
import subprocess

import pytest

from mtadtest import ROOT

SCRIPT = os.path.join(ROOT, "tests", "layering.sh")


def run(root):
    return subprocess.run(["sh", SCRIPT, root], capture_output=True,
                          text=True, timeout=60)


def tree(tmp_path, files):
    for path, text in files.items():
        p = tmp_path / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path)


def test_real_tree_passes():
    r = run(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every include follows the module rules" in r.stdout


def test_allowed_includes_pass(tmp_path):
    root = tree(tmp_path, {
        "smtpd/a.c": '#include "delivery/delivery.h"\n#include "smtp/smtp.h"\n',
        "delivery/b.c": '#include "delivery/mta.h"\n#include "spool/spool.h"\n',
        "router/c.c": '#include "smtp/smtp.h"\n#include "common/ev.h"\n',
    })
    r = run(root)
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("path,include,why", [
    ("delivery/x.c", "smtpd/smtpd.h", "delivery may not include"),
    ("router/x.c", "config/config.h", "router may not include"),
    ("common/x.c", "smtp/smtp.h", "common may not include"),
    ("smtp/x.c", "spool/spool.h", "smtp may not include"),
    ("smtpd/x.c", "delivery/mta.h", "internal to delivery"),
    ("worker/x.c", "smtpd/smtpd_int.h", "internal to smtpd"),
    ("delivery/x.c", "tlspol/tlspol_int.h", "internal to tlspol"),
    ("tlspol/x.c", "delivery/mta.h", "tlspol may not include"),
    ("newmod/x.c", "common/util.h", "no layering rule"),
])
def test_forbidden_include_fails(tmp_path, path, include, why):
    root = tree(tmp_path, {path: '/* x */\n#include "%s"\n' % include})
    r = run(root)
    assert r.returncode == 1, r.stdout
    assert "layering: FAILED" in r.stdout
    assert why in r.stdout, r.stdout
    if why != "no layering rule":
        assert "%s:2:" % path in r.stdout, r.stdout
