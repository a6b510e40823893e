"""A target's contribution policy ([policy] in its manifest), exports that file as a person, and the
upstream's own checks run on the lines a series touches.

The checks' tools come from a wheel built here (``fakelint``: a linter, a formatter and a tool that
breaks) installed offline through pip's ``--find-links``; only the test marked ``network`` uses PyPI.
"""

from __future__ import annotations

import base64
import hashlib
import json
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, cli, make_patch
from test_git_bases import _add_git_base, _upstream

from harness.base.store import Store
from harness.errors import ConfigError, Exit, IdentityError
from harness.filing import export
from harness.upstream import git, linters, pins

TESTER = "Tess Tester <tess@example.invalid>"

# python -m fakelint FILE...: one finding per line that holds "return" (pylint's line format)
LINT = textwrap.dedent('''\
    import sys

    for path in sys.argv[1:]:
        for n, line in enumerate(open(path), 1):
            if "return" in line:
                print(f"{path}:{n}:4: FL001: a return statement")
    sys.exit(1)
''')
# python -m fakelint.fmt FILE...: rewrites in place: the docstring in capitals, "zip(" spaced as "zip ("
FMT = textwrap.dedent('''\
    import sys

    for path in sys.argv[1:]:
        text = open(path).read()
        text = text.replace('"""Scaling helpers."""', '"""SCALING HELPERS."""').replace("zip(", "zip (")
        open(path, "w").write(text)
''')
BROKEN = 'import sys\nprint("fakelint: cannot read its config", file=sys.stderr)\nsys.exit(2)\n'


def _wheel(dest: Path) -> Path:
    """fakelint-1.0-py3-none-any.whl, built by hand (a wheel is a zip with a dist-info)."""
    files = {"fakelint/__init__.py": "", "fakelint/__main__.py": LINT, "fakelint/fmt.py": FMT,
             "fakelint/broken.py": BROKEN,
             "fakelint-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakelint\nVersion: 1.0\n",
             "fakelint-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("fakelint-1.0.dist-info/RECORD,,")
    path = dest / "fakelint-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr("fakelint-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _check(name: str, module: str, kind: str, config: str = "") -> str:
    return textwrap.dedent(f'''
        [[policy.checks]]
        name = "{name}"
        package = "fakelint==1.0"
        module = "{module}"
        args = []
        files = '^src/.*\\.py$'
        kind = "{kind}"
        config = "{config}"
    ''')


def _policy(signoff: bool = True, checks: str = "") -> str:
    return textwrap.dedent(f'''
        [policy]
        signoff = {str(signoff).lower()}
        pr_template = ".github/pull_request_template.md"
        source = "made up for the tests"
    ''') + checks


@pytest.fixture(autouse=True)
def person(tmp_path, monkeypatch):
    """A HOME of the test's own with no git identity in it (the runner's config must not leak in)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


@pytest.fixture
def filed(lane_repo, tmp_path, monkeypatch):
    """The fake upstream with a git base "main", a [policy] asking for sign-off, and an offline index."""
    mirrors, sha = _upstream(tmp_path, CORE_BUGGY)
    _add_git_base(lane_repo, "main", sha)
    lane_repo.mirrors, lane_repo.main_sha = mirrors, sha
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    lane_repo.wheels = wheels
    _set_policy(lane_repo, _policy())
    return lane_repo


def _set_policy(repo, policy: str) -> None:
    path = repo.root / "upstream" / "fake.toml"
    text = path.read_text().split("\n[policy]")[0]
    path.write_text(text + policy)


def _export(repo, out: Path, *extra: str) -> int:
    return cli("export", "01", "--base", "main", "-o", str(out), "--git-mirrors", str(repo.mirrors), *extra,
               *repo.args())


def _message(patch: Path) -> str:
    return patch.read_text().split("\n---\n")[0]


# --------------------------------------------------------------------------- the policy table

def test_the_real_manifests_record_a_policy_and_megatron_asks_for_sign_off():
    root = Path(__file__).resolve().parent.parent
    megatron = pins.load_manifest(root, "megatron-lm").policy
    assert megatron.signoff and megatron.contributing == "docs/developer/contribute.md"
    assert {c.name: c.package for c in megatron.checks}["isort"] == "isort==5.13.2"
    assert pins.load_manifest(root, "mamba").policy.checks == ()
    for target in pins.list_targets(root):
        assert pins.load_manifest(root, target).policy.source  # every fact says where it was read


def test_an_unknown_policy_key_is_warned_about(filed, capsys):
    _set_policy(filed, _policy(checks=_check("lint", "fakelint", "lint")).replace(
        "signoff = true", "signoff = true\nsign_off = true").replace('kind = "lint"', 'kind = "lint"\nfile = "x"'))
    assert cli("list", *filed.args()) == Exit.OK
    err = capsys.readouterr().err
    assert "[policy]: unknown key 'sign_off'" in err and "[[policy.checks]] #1: unknown key 'file'" in err


@pytest.mark.parametrize("package", ["fakelint>=1.0", "fakelint==1.*", "fakelint", "fakelint==1.0,<2",
                                     "not a requirement"])
def test_a_check_whose_package_is_not_pinned_exactly_is_refused(filed, package):
    _set_policy(filed, _policy(checks=_check("lint", "fakelint", "lint").replace("fakelint==1.0", package)))
    with pytest.raises(ConfigError, match=r"\[\[policy.checks\]\] #1: package .* must be a PyPI requirement pinned "
                                          "exactly"):
        pins.load_manifest(filed.root, "fake")


def test_a_bad_regex_a_bad_kind_and_a_path_outside_the_tree_are_refused(filed):
    for old, new, said in (("files = '^src/.*\\.py$'", "files = '(['", "key 'files' is not a valid regex"),
                           ('kind = "lint"', 'kind = "style"', "key 'kind' is 'style'"),
                           ('config = ""', 'config = "../pyproject.toml"', "must be a plain relative path")):
        _set_policy(filed, _policy(checks=_check("lint", "fakelint", "lint").replace(old, new)))
        with pytest.raises(ConfigError, match=said):
            pins.load_manifest(filed.root, "fake")


# --------------------------------------------------------------------------- who files

def test_export_with_an_identity_is_authored_and_signed_off_by_it_last(filed, tmp_path, capsys):
    subject = ("core: use each element's own weight\n\nscale() multiplied by w[0].\n\n"
               "Co-authored-by: Ada Other <ada@example.invalid>")
    filed.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED, subject=subject))
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", TESTER, "--json") == Exit.OK
    result = json.loads(capsys.readouterr().out)
    assert (result["author"], result["identity_from"], result["signed_off"]) == (TESTER, "--identity", True)
    [patch] = sorted(out.glob("*.patch"))
    head = _message(patch)
    assert f"\nFrom: {TESTER}\n" in head and "patch-lane" not in patch.read_text()
    assert "Upstream-Status" not in head and "\nPack:" not in head
    assert head.splitlines()[-2:] == ["Co-authored-by: Ada Other <ada@example.invalid>", f"Signed-off-by: {TESTER}"]


def test_the_identity_comes_from_the_persons_git_config(filed, person, tmp_path, capsys):
    (person / ".gitconfig").write_text("[user]\n\tname = Gita Config\n\temail = gita@example.invalid\n")
    out = tmp_path / "filed"
    assert _export(filed, out, "--json") == Exit.OK
    result = json.loads(capsys.readouterr().out)
    assert result["author"] == "Gita Config <gita@example.invalid>"
    assert result["identity_from"] == "git config user.name/user.email"
    [patch] = out.glob("*.patch")
    assert _message(patch).endswith("\nSigned-off-by: Gita Config <gita@example.invalid>")


def test_no_identity_where_sign_off_is_required_stops_with_one_line(filed, tmp_path, capsys):
    out = tmp_path / "filed"
    assert _export(filed, out) == Exit.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fake requires a Signed-off-by" in err[0]
    assert "--identity" in err[0] and "git config --global user.name" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("who, said", [
    ("Patch Lane <patch-lane@users.noreply.github.com>", "placeholder"),
    ("patch-lane <patch-lane@invalid>", "placeholder"),
    ("Bob <bob-at-example>", "does not look like an email address"),
    ("bob@example.invalid", "is not 'Name <email>'"),
    ("<bob@example.invalid>", "no name"),
])
def test_a_placeholder_or_malformed_identity_is_refused(filed, tmp_path, capsys, who, said):
    assert _export(filed, tmp_path / "filed", "--identity", who) == Exit.USAGE
    assert said in capsys.readouterr().err and not (tmp_path / "filed").exists()


def test_a_placeholder_in_the_git_config_is_refused_too(filed, person, tmp_path, capsys):
    (person / ".gitconfig").write_text("[user]\n\tname = Patch Lane\n\temail = patch-lane@users.noreply.github.com\n")
    assert _export(filed, tmp_path / "filed") == Exit.USAGE
    assert "placeholder" in capsys.readouterr().err


def test_a_target_without_sign_off_gets_the_author_but_no_trailer(filed, tmp_path):
    _set_policy(filed, _policy(signoff=False))
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", TESTER) == Exit.OK
    [patch] = out.glob("*.patch")
    assert f"\nFrom: {TESTER}\n" in _message(patch) and "Signed-off-by" not in patch.read_text()


@pytest.mark.parametrize("message, want", [
    ("subject\n", f"subject\n\nSigned-off-by: {TESTER}\n"),
    ("subject\n\nbody line\n", f"subject\n\nbody line\n\nSigned-off-by: {TESTER}\n"),
    (f"subject\n\nSigned-off-by: {TESTER}\nAcked-by: A <a@example.invalid>\n",
     f"subject\n\nAcked-by: A <a@example.invalid>\nSigned-off-by: {TESTER}\n"),
    ("subject\n\nFixes: the thing\n\n\n", f"subject\n\nFixes: the thing\nSigned-off-by: {TESTER}\n"),
])
def test_the_senders_sign_off_goes_last(message, want):
    assert export.signed_off(message, export.parse_identity(TESTER)) == want


def test_the_stored_series_keeps_its_own_identity(filed, tmp_path):
    before = {p: p.read_bytes() for p in (filed.root / "patches").rglob("*.patch")}
    assert _export(filed, tmp_path / "filed", "--identity", TESTER) == Exit.OK
    assert {p: p.read_bytes() for p in (filed.root / "patches").rglob("*.patch")} == before


# --------------------------------------------------------------------------- the upstream's checks

def test_a_lint_finding_counts_only_on_a_line_the_series_touches(filed, tmp_path, capsys):
    # fakelint flags lines 6 (changed by the series) and 10 (upstream's, untouched) of core.py
    _set_policy(filed, _policy(checks=_check("fakelint", "fakelint", "lint")))
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", TESTER) == Exit.LINT
    err = capsys.readouterr().err
    assert "src/fakepkg/core.py:6: fakelint: FL001: a return statement" in err
    assert "core.py:10" not in err and not out.exists()  # nothing written when a check fails


def test_report_only_exits_0_and_still_lists_the_findings(filed, tmp_path, capsys):
    _set_policy(filed, _policy(checks=_check("fakelint", "fakelint", "lint") + _check("fakefmt", "fakelint.fmt",
                                                                                         "format")))
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", TESTER, "--report-only", "--json") == Exit.OK
    result = json.loads(capsys.readouterr().out)
    assert [(f["path"], f["line"], f["tool"]) for f in result["findings"]] == [
        ("src/fakepkg/core.py", 6, "fakefmt"), ("src/fakepkg/core.py", 6, "fakelint")]
    assert [f["message"] for f in result["findings"]][0] == "would reformat line 6"  # not line 1's docstring
    assert {c["name"]: c["files"] for c in result["checks"]} == {"fakelint": ["src/fakepkg/core.py"],
                                                                 "fakefmt": ["src/fakepkg/core.py"]}
    assert len(list(out.glob("*.patch"))) == 1
    # without --json the findings are listed on stderr, file:line first
    assert _export(filed, out, "--identity", TESTER, "--report-only") == Exit.OK
    assert "src/fakepkg/core.py:6: fakefmt: would reformat line 6" in capsys.readouterr().err


def test_the_tool_environment_is_cached_by_package_and_python(filed, tmp_path, monkeypatch):
    _set_policy(filed, _policy(checks=_check("fakelint", "fakelint", "lint")))
    assert _export(filed, tmp_path / "a", "--identity", TESTER, "--report-only") == Exit.OK
    [env] = (filed.cache / "tools").iterdir()
    assert env.name.startswith("fakelint-1.0-py3.")
    for wheel in filed.wheels.iterdir():  # no index any more: a second export must not install again
        wheel.unlink()
    assert _export(filed, tmp_path / "b", "--identity", TESTER, "--report-only") == Exit.OK
    assert [p.name for p in (filed.cache / "tools").iterdir()] == [env.name]


def test_a_tool_that_cannot_be_installed_leaves_no_environment(filed, tmp_path, capsys):
    _set_policy(filed, _policy(checks=_check("fakelint", "fakelint", "lint").replace("fakelint==1.0",
                                                                                       "fakelint==9.9")))
    assert _export(filed, tmp_path / "x", "--identity", TESTER) == Exit.PIN
    assert "cannot install fakelint==9.9" in capsys.readouterr().err
    assert [p.name for p in (filed.cache / "tools").iterdir()] == []


def test_a_tool_that_fails_without_a_finding_is_an_error_not_a_pass(filed, tmp_path, capsys):
    _set_policy(filed, _policy(checks=_check("fakebroken", "fakelint.broken", "lint")))
    assert _export(filed, tmp_path / "x", "--identity", TESTER, "--report-only") == Exit.LINT
    err = capsys.readouterr().err
    assert "fakebroken (fakelint==1.0) failed (exit 2)" in err and "cannot read its config" in err


def test_a_check_whose_config_file_is_missing_from_the_tree_is_a_config_error(filed, tmp_path, capsys):
    _set_policy(filed, _policy(checks=_check("fakelint", "fakelint", "lint", config=".fakelintrc")))
    assert _export(filed, tmp_path / "x", "--identity", TESTER) == Exit.USAGE
    assert "reads .fakelintrc, which the patched tree does not have" in capsys.readouterr().err


def test_trailing_whitespace_and_a_missing_final_newline_are_flagged_for_every_target(filed, tmp_path, capsys):
    _set_policy(filed, _policy(signoff=False))
    new = CORE_FIXED.replace("def total(xs):", "def total(xs):  ").rstrip("\n")
    filed.write_patch(make_patch(tmp_path, CORE_BUGGY, new))
    assert _export(filed, tmp_path / "x", "--identity", TESTER) == Exit.LINT
    err = capsys.readouterr().err
    assert "src/fakepkg/core.py:9: whitespace: trailing whitespace" in err
    assert "src/fakepkg/core.py:10: whitespace: no newline at end of file" in err
    assert "core.py:6:" not in err  # a touched line without either


def test_touched_lines_read_hunks_by_their_counts(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "a.txt").write_text("one\n-- gone\nthree\n")
    repo = git.repo(work)
    git.init_snapshot(work, "base")
    # a removed "-- " line and an added "++ " line read "--- gone" / "+++ added": content, not file headers
    (work / "a.txt").write_text("one\n++ added\nthree\nfour\n")
    repo.run("commit", "-q", "-am", "change")
    assert linters.touched_lines(repo, "pristine") == {"a.txt": {2, 4}}
    assert list(linters.whitespace(repo, "pristine")) == []


@pytest.mark.network
def test_a_real_pinned_formatter_from_pypi_flags_only_the_series_lines(tmp_path):
    """black 24.4.2 from PyPI, as TransformerEngine pins it, on a two-commit repository."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "m.py").write_text("x = [1,2]\n\n\ndef f():\n    return 1\n")
    git.init_snapshot(work, "base")
    repo = git.repo(work)
    (work / "m.py").write_text("x = [1,2]\n\n\ndef f():\n    return 1\n\n\ndef g(a,b):\n    return a\n")
    repo.run("commit", "-q", "-am", "add g")
    check = pins.Check(name="black", package="black==24.4.2", module="black", args=("--quiet",), files=r"\.py$",
                       kind="format")
    env = linters.tool_env(check, Store(tmp_path / "store"))
    touched = linters.touched_lines(repo, "pristine")
    found = linters.run_check(check, env, repo, touched)
    assert [(f.path, f.line) for f in found] == [("m.py", 8)]  # line 1's "[1,2]" is upstream's own
    assert repo.is_clean()


def test_an_identity_must_name_a_person():
    with pytest.raises(IdentityError):
        export.parse_identity("Patch Lane <patch-lane@users.noreply.github.com>")
    assert str(export.parse_identity("  Ana  B <ana@example.invalid> ")) == "Ana  B <ana@example.invalid>"
