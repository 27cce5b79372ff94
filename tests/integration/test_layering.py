"""The module checks `make test` runs: the layering check
(tests/layering.sh, `make layering`: includes and calls against the graph
of mk/modules.mk) and the size check (tests/size.sh, `make size`).  Each
passes on the real tree and fails, naming what is wrong, on a tree with a
forbidden include, a forbidden call or a file over 1,000 lines: planted in
a small tree of its own, or in a copy of the real one (never in the real
tree)."""
import os
import subprocess

import pytest

from mtadtest import BUILD, ROOT, make_in, tree_copy

SCRIPT = os.path.join(ROOT, "tests", "layering.sh")
SIZE = os.path.join(ROOT, "tests", "size.sh")
GRAPH = os.path.join(ROOT, "mk", "modules.mk")


def run(root, build=None):
    args = ["sh", SCRIPT, root] + ([build] if build else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def size(root):
    return subprocess.run(["sh", SIZE, root], capture_output=True, text=True,
                          timeout=60)


def tree(tmp_path, files, graph=None):
    """A tree of FILES with the real module graph (or GRAPH's text)."""
    files = dict(files)
    if graph is None:
        with open(GRAPH) as f:
            graph = f.read()
    files["mk/modules.mk"] = graph
    for path, text in files.items():
        p = tmp_path / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path)


def lines(n):
    return "".join("int x%d;\n" % i for i in range(n))


def make(root, target, *opts):
    return make_in(root, *opts, target)


@pytest.fixture
def copy(tmp_path):
    return tree_copy(str(tmp_path / "tree"))


def plant(root, path, text):
    with open(os.path.join(root, path), "a") as f:
        f.write(text)


# ---- the real tree --------------------------------------------------------

def test_real_tree_passes():
    r = run(ROOT, BUILD)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every include follows the module rules" in r.stdout
    assert "every call follows the module rules" in r.stdout


def test_real_tree_sizes_pass():
    r = size(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every C file has at most 1000 lines" in r.stdout


def test_make_test_runs_both_checks():
    r = make(ROOT, "test", "-n")        # prints, runs nothing but make
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sh tests/layering.sh . %s\n" % os.path.basename(BUILD) in r.stdout
    assert "sh tests/size.sh .\n" in r.stdout, r.stdout
    assert "sh tests/conventions.sh .\n" in r.stdout, r.stdout


def test_real_tree_has_no_issue_numbers_in_c_sources():
    r = subprocess.run(["sh", os.path.join(ROOT, "tests", "conventions.sh"),
                        ROOT], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_planted_issue_number_fails_make_size(copy):
    plant(copy, "common/planted.c", "/* as issue 12 asked */\nint x;\n")
    r = make(copy, "size")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "common/planted.c:1:" in r.stdout, r.stdout
    assert "conventions: FAILED" in r.stdout


# ---- includes -------------------------------------------------------------

def test_allowed_includes_pass(tmp_path):
    root = tree(tmp_path, {
        "smtpd/a.c": '#include "delivery/delivery.h"\n#include "smtp/smtp.h"\n',
        "delivery/b.c": '#include "delivery/mta.h"\n#include "spool/spool.h"\n',
        "router/c.c": '#include "smtp/smtp.h"\n#include <common/ev.h>\n'
                      '#include <openssl/ssl.h>\n#include <stdio.h>\n',
        # a seam_ line of the real graph: this one file may use more
        "mtactl/tls_check.c": '#include "delivery/mta.h"\n',
    })
    r = run(root)
    assert r.returncode == 0, r.stdout
    assert "calls not checked" in r.stdout


@pytest.mark.parametrize("path,include,why", [
    ("delivery/x.c", '"smtpd/smtpd.h"', "delivery may not include"),
    ("router/x.c", '"config/config.h"', "router may not include"),
    ("common/x.c", '"smtp/smtp.h"', "common may not include"),
    ("smtp/x.c", '"spool/spool.h"', "smtp may not include"),
    ("smtpd/x.c", '"delivery/mta.h"', "internal to delivery"),
    ("worker/x.c", '"smtpd/smtpd_int.h"', "internal to smtpd"),
    ("worker/x.c", '"../smtpd/smtpd_int.h"', "worker may not include"),
    # the same through the compiler's -I. with <...>
    ("worker/x.c", "<smtpd/smtpd_int.h>", "internal to smtpd"),
    ("delivery/x.c", "<smtpd/smtpd.h>", "delivery may not include"),
    ("delivery/x.c", '"tlspol/tlspol_int.h"', "internal to tlspol"),
    ("tlspol/x.c", '"delivery/mta.h"', "tlspol may not include"),
    # a seam_ line names one file: mtactl's other files keep the contract
    ("mtactl/x.c", '"delivery/mta.h"', "internal to delivery"),
    ("newmod/x.c", '"common/util.h"', "no layering rule"),
])
def test_forbidden_include_fails(tmp_path, path, include, why):
    root = tree(tmp_path, {path: '/* x */\n#include %s\n' % include})
    r = run(root)
    assert r.returncode == 1, r.stdout
    assert "layering: FAILED" in r.stdout
    assert why in r.stdout, r.stdout
    if why != "no layering rule":
        assert "%s:2:" % path in r.stdout, r.stdout


def test_planted_bracket_include_fails_make_layering(copy):
    # the bypass: <...> finds the header through -I. as "..." does
    plant(copy, "worker/planted.c", "#include <smtpd/smtpd_int.h>\n")
    r = make(copy, "layering")
    assert r.returncode != 0, r.stdout + r.stderr
    assert ("worker/planted.c:1: smtpd/smtpd_int.h is internal to smtpd/"
            in r.stdout), r.stdout + r.stderr
    assert "layering: FAILED" in r.stdout


# ---- calls ----------------------------------------------------------------

@pytest.mark.parametrize("path,code,why", [
    # smtp sits below config: the call passes every include rule (no
    # header is included) and links in mtad, yet breaks the layers
    ("smtp/xtext.c", "int smtp_planted(void);\n"
     "int smtp_planted(void) { return config_ncpu(); }\n",
     "lib/libsmtp.a[xtext.o]: smtp may not use config (it calls config_ncpu)"),
    # a program is held to its deps_ line too: sendmail may not use spool
    ("sendmail/planted.c", "int sm_planted(void);\n"
     "int sm_planted(void) { return spool_id_valid(\"x\"); }\n",
     "obj-sendmail/planted.o: sendmail may not use spool "
     "(it calls spool_id_valid)"),
    # one name, two libraries: which one a program gets is link order
    ("smtp/planted.c", "int config_ncpu(void) { return 1; }\n",
     "config_ncpu is defined by both smtp and config"),
])
def test_planted_call_fails_make_layering(copy, path, code, why):
    plant(copy, path, "\nint config_ncpu(void);\n"
          "int spool_id_valid(const char *);\n" + code)
    r = make(copy, "layering")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "every include follows the module rules" in r.stdout, r.stdout
    assert why in r.stdout, r.stdout + r.stderr
    assert "layering: FAILED" in r.stdout


def test_missing_objects_fail(tmp_path):
    root = tree(tmp_path, {"common/a.c": '#include "common/util.h"\n'})
    r = run(root, str(tmp_path / "nobuild"))
    assert r.returncode == 1, r.stdout
    assert "has no objects of common" in r.stdout, r.stdout


# ---- the graph ------------------------------------------------------------

@pytest.mark.parametrize("change,why", [
    (("deps_config   := dkim router smtp proxy dns bclass common",
      "deps_config   := dkim router proxy dns bclass common"),
     "deps_config lists router but not smtp, which router uses"),
    (("deps_smtp     := common", "deps_smtp     := common router"),
     "smtp and router use each other"),
    (("deps_dns      := common", "deps_dns      := common nosuch"),
     "deps_dns names nosuch, which has no deps_ line"),
    (("spool router smtp", "spool smtp router"),
     "MODS puts smtp before router, which uses it"),
])
def test_inconsistent_graph_fails(tmp_path, change, why):
    with open(GRAPH) as f:
        graph = f.read()
    assert change[0] in graph
    root = tree(tmp_path, {"common/a.c": '#include "common/util.h"\n'},
                graph.replace(change[0], change[1]))
    r = run(root)
    assert r.returncode == 1, r.stdout
    assert why in r.stdout, r.stdout


# ---- sizes ----------------------------------------------------------------

def test_size_limit_is_1000_lines(tmp_path):
    root = tree(tmp_path, {"common/a.c": lines(1000),
                           "tests/unit/test_big.c": lines(3000)})
    r = size(root)
    assert r.returncode == 0, r.stdout
    plant(root, "common/a.c", "int one_more;\n")
    r = size(root)
    assert r.returncode == 1, r.stdout
    assert "common/a.c: 1001 lines (at most 1000)" in r.stdout, r.stdout
    assert "size: FAILED" in r.stdout


def test_planted_long_file_fails_make_size(copy):
    plant(copy, "common/planted.c", lines(1001))
    r = make(copy, "size")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "common/planted.c: 1001 lines (at most 1000)" in r.stdout, r.stdout


# ---- documents ------------------------------------------------------------

def test_readme_is_short_and_its_links_resolve():
    """README.md is the first page, not the manual (at most 300 lines);
    every relative link in it and in docs/*.md names a file that exists."""
    import re
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert readme.count("\n") <= 300, readme.count("\n")
    assert "make run" in readme and "make test" in readme
    docs = [os.path.join(ROOT, "README.md")] + [
        os.path.join(ROOT, "docs", n) for n in os.listdir(os.path.join(ROOT, "docs"))
        if n.endswith(".md")] + [os.path.join(ROOT, "bench", "README.md")]
    missing = []
    for doc in docs:
        with open(doc) as f:
            text = f.read()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(doc), target))
            if not os.path.exists(path):
                missing.append("%s: %s" % (os.path.relpath(doc, ROOT), target))
    assert not missing, missing
