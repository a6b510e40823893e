"""`harness body`: rendering from receipts, the self-contained reproducer, lint, the gh commands, the post gate."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest
from conftest import CORE_BUGGY, REPO, cli, copy_lane_repo, isolated_env, make_lane_repo, make_patch

from harness import filing
from harness.base.store import Store
from harness.errors import ConfigError, Exit
from harness.filing import readiness, standalone
from harness.filing.readiness import ApplyStatus, LaneProblemCode, ReasonCode
from harness.lane import receipts, series
from harness.lane.lanes import Context
from harness.lane.tracking import Tracking

GH = textwrap.dedent('''\
    #!/bin/sh
    printf '%s\\n' "$@" >> "$GH_ARGS_FILE"
    echo "--" >> "$GH_ARGS_FILE"
    if [ "$1" = "gist" ]; then echo "https://gist.github.com/me/abc123"; exit 0; fi
    for a in "$@"; do if [ "$a" = "-" ]; then cat > "$GH_ARGS_FILE.stdin"; fi; done
    echo "https://github.com/acme/fake/pull/77"
''')


class Stdin:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self):
        return self.tty


def _github_repo(lane_repo):
    """The fake target on a github.com repository, with this repository's filing templates."""
    shutil.copytree(REPO / "templates", lane_repo.root / "templates", dirs_exist_ok=True)
    m = lane_repo.root / "upstream" / "fake.toml"
    m.write_text(m.read_text().replace("https://example.invalid/fake", "https://github.com/acme/fake"))


@pytest.fixture(scope="session")
def _ran_once(tmp_path_factory):
    """One real CPU run of both lanes of the fake pack on a github.com repository, shared by the tests below."""
    with isolated_env():
        repo = make_lane_repo(tmp_path_factory.mktemp("filing-ran"))
        _github_repo(repo)
        assert cli("run", "01", "--quiet", *repo.args()) == Exit.OK
    return repo


@pytest.fixture
def ran(_ran_once, tmp_path, capsys):
    """The fake pack with passing receipts for both lanes (a real CPU run), on a github.com repository: a private
    copy of the shared run."""
    capsys.readouterr()
    return copy_lane_repo(_ran_once, tmp_path)


@pytest.fixture
def fake_gh(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    gh = bindir / "gh"
    gh.write_text(GH)
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)
    args_file = tmp_path / "gh-args.txt"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GH_ARGS_FILE", str(args_file))
    return args_file


def _ctx(repo) -> Context:
    return Context(root=repo.root, tracking=Tracking.load(repo.root), store=Store(repo.cache))


def _ready(repo, **kw) -> readiness.Readiness:
    ctx = _ctx(repo)
    return readiness.readiness(ctx, ctx.tracking.pack("01"), **kw)


def _codes(r: readiness.Readiness) -> list[ReasonCode]:
    return [x.code for x in r.reasons]


def _lane_problems(r: readiness.Readiness) -> dict[str, LaneProblemCode]:
    """Each lane that does not count, and why (by code)."""
    return {e.lane.name: e.problem.code for e in r.lanes if e.problem is not None}


# ---------------------------------------------------------------------------------------------- lint

@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("see build01.corp.internal for logs", "internal host name"),
        ("runner at 10.1.2.3 and 192.168.0.4", "private IP address"),
        ("log at /home/alice/run.log", "private path"),
        ("cache in /root/.cache/patchlane", "private path"),
        ("ran from /work/main", "private path"),
        ("baseline in /tmp/pl-ci/builds/x", "private path"),
        ("rendezvous at 127.0.0.1", "private IP address"),
        ("mail dev@example.com", "e-mail address"),
        ("token ghp_" + "a" * 36, "token"),
        ("hf_" + "B" * 30, "token"),
        ("AKIA" + "ABCDEFGHIJKLMNOP", "token"),
        ("lane fix-0.8.1 passed", "internal vocabulary"),
        ("it printed BUG_REPRODUCED", "internal vocabulary"),
        ("Upstream-Status: Pending", "internal vocabulary"),
        ("see pack 05 and tracking.toml", "internal vocabulary"),
        ("the receipt says so", "internal vocabulary"),
    ],
)
def test_lint_finds_private_things_and_our_vocabulary(text, rule):
    [finding] = [f for f in filing.lint(f"ok line\n{text}\n") if f.rule == rule][:1]
    assert finding.line == 2


def test_lint_leaves_public_text_alone():
    text = ("https://github.com/acme/fake/pull/1, torch 2.11.0+cu130, `src/fakepkg/core.py` line 6, 1e-06, a/tmp/b, "
            "TL_DISABLE_TMA_LOWER, the fixed lanes of a highway are not ours but 'lanes' is: see below")
    assert [f.rule for f in filing.lint(text.split(", the fixed")[0])] == []


def test_a_script_may_use_scratch_paths_and_loopback_but_no_private_paths():
    code = 'os.environ["MASTER_ADDR"] = "127.0.0.1"\nrun_dir = "/tmp/r05"\nlane = "fix"\n'
    assert filing.lint(code, body=False) == []
    assert [f.rule for f in filing.lint(code + 'cache = "/root/.cache"\n', body=False)] == ["private path"]


# ---------------------------------------------------------------------------------------------- the body

def test_body_into_a_directory_it_cannot_write_names_the_path_and_leaves_nothing(ran, capsys, tmp_path):
    """#55: body in a read-only checkout exited 70 (an internal error) instead of naming the path."""
    import os

    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root ignores the mode: a file standing where the directory must be
            locked.chmod(0o700)
            blocker = tmp_path / "blocked"
            blocker.write_text("a file, not a directory")
            target = blocker / "01-pr.md"
        else:
            target = locked / "01-pr.md"
        assert cli("body", "01", "-o", str(target), *ran.args()) == Exit.IO
    finally:
        locked.chmod(0o700)
    err = " ".join(capsys.readouterr().err.split())
    assert "cannot write pack 01's body" in err and str(target.parent) in err and "Traceback" not in err
    assert not target.exists()


def test_body_is_built_from_the_patch_and_the_receipts_and_stdout_holds_only_it(ran, capsys):
    assert cli("body", "01", *ran.args()) == Exit.OK
    out = capsys.readouterr()
    body_file = ran.root / "dist" / "filing" / "01-pr.md"
    assert out.out == body_file.read_text()  # `harness body 01 > x.md` holds exactly the body
    body = out.out
    assert body.startswith("core: use each element's own weight")  # the commit message, not tracking prose
    assert "`src/fakepkg/core.py` line 6" in body and "fakepkg 1.0" in body
    assert "| scale([1, 2, 3], [1, 0, 2]) vs the exact result | 1.0 | largest error 3 | CPU |" in body
    assert "| the same | 1.0 + this PR | largest error 0 | CPU |" in body
    assert "Python 3." in body  # the host line comes from the receipt's stamp
    # nothing of ours: no receipt paths or log hashes, no trailers, no lane names
    for ours in ("receipts/", "sha256", "Upstream-Status", "Pack:", "BUG_REPRODUCED", "lane", "### The change"):
        assert ours not in body
    assert "gh pr create --repo acme/fake --title" in out.err and "--head '<fork-owner>:<branch>'" in out.err
    assert "readiness: ready" in out.err
    # the placeholder branch comes with how to make it
    assert "'harness export 01 --base 1.0' writes it signed as you (dist/export/01-1.0/)" in " ".join(out.err.split())


def test_every_figure_traces_to_the_receipt(ran, capsys):
    """Change the figure in the receipt and the body changes with it: nothing is typed anywhere else."""
    [fix] = [p for p in (ran.root / "receipts" / "fake" / "01").iterdir() if p.name.endswith("-fix")]
    data = json.loads((fix / "receipt.json").read_text())
    data["figures"][0]["value"] = 0.25
    (fix / "receipt.json").write_text(json.dumps(data))
    assert cli("body", "01", *ran.args()) == Exit.OK
    assert "| the same | 1.0 + this PR | largest error 0.25 | CPU |" in capsys.readouterr().out


def test_an_evidence_row_that_does_not_resolve_is_named_and_blocks_readiness(ran, capsys):
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('figure = "max_err"\nlabel = "the same"',
                                             'figure = "max_error"\nlabel = "the same"'))
    assert cli("body", "01", *ran.args()) == Exit.OK
    err = capsys.readouterr().err
    assert "evidence row 2 (fix, max_error): no figure 'max_error'" in err
    r = _ready(ran)
    assert not r.ready and _codes(r) == [ReasonCode.EVIDENCE]


def test_a_label_placeholder_missing_from_the_figure_is_a_problem(ran):
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('label = "the same"', 'label = "at {seqlen}"'))
    [problem] = filing.render(ran.root, Tracking.load(ran.root), Tracking.load(ran.root).pack("01")).problems
    assert "placeholder 'seqlen' not in the figure" in problem


def test_values_read_as_a_maintainer_reads_them():
    assert [filing.shown(v) for v in (6.57356e-08, 0.0016606, 0.957307, 682.4, 0.0, True, [510.4, 739.1])] == \
        ["6.6e-8", "1.7e-3", "0.957", "682", "0", "yes", "510-739"]
    assert filing.shown(196608, "B") == "192.0 KiB" and filing.shown(31.53125, "GiB") == "31.5 GiB"


def test_lint_failure_writes_nothing_and_exits_10(ran, capsys):
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('label = "the same"', 'label = "on gpu7.lab.internal in /home/alice"'))
    assert cli("body", "01", *ran.args()) == Exit.LINT
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("pack 01 body:")]
    assert len(lines) == 2 and "internal host name: 'gpu7.lab.internal'" in lines[0] and "'/home/alice'" in lines[1]
    assert not (ran.root / "dist" / "filing" / "01-pr.md").exists()
    r = _ready(ran)  # a body that fails its lint is never ready
    assert not r.ready and r.reasons[0].code == ReasonCode.LINT


def test_a_comment_reads_as_a_comment_on_its_thread(ran, capsys):
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('kind = "pr"  # a pull request', 'kind = "comment"')
                    + '\n[[packs.01.threads]]\nurl = "https://github.com/acme/fake/pull/4"\n'
                      'role = "filing target"\nstate = "open"\n')
    assert cli("body", "01", *ran.args()) == Exit.OK
    out = capsys.readouterr()
    assert "###" not in out.out and "```diff" in out.out  # no PR headings; the change itself, folded
    assert "gh pr comment https://github.com/acme/fake/pull/4 --body-file" in out.err
    path.write_text(path.read_text().replace('state = "open"', 'state = "merged"'))
    assert ReasonCode.THREAD in _codes(_ready(ran))


# ---------------------------------------------------------------------------------------------- the reproducer

def test_small_reproducer_is_pasted_and_runs_without_this_repository(ran, capsys, tmp_path):
    assert cli("body", "01", *ran.args()) == Exit.OK
    body = capsys.readouterr().out
    script = ran.root / "dist" / "filing" / "repro_fake.py"
    text = script.read_text()
    # the helper module's namespace, under a plain name: nothing in the script names our helper modules
    assert "_lane" not in text and "kit = _types.SimpleNamespace(" in text
    assert ("```python" in body) == (len(text.encode()) <= filing.INLINE_LIMIT)
    # Run it as a maintainer would: only the package under test on the path (a copy outside this repository).
    site = tmp_path / "site" / "fakepkg"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "core.py").write_text(CORE_BUGGY)
    alone = tmp_path / "elsewhere" / "repro_fake.py"
    alone.parent.mkdir()
    shutil.copy(script, alone)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site.parent)}  # nothing of ours: plain flags
    assert "HARNESS_" not in text.split('"""', 2)[1]  # the header's commands use flags, not our variables
    assert filing.lint(text, body=False, vocabulary=True) == []  # nor anywhere our dialect: it runs plainly
    assert "python repro_fake.py --unpatched" in text and "python repro_fake.py --patched" in text
    for flag, want in (("--unpatched", "bug-reproduced"), ("--patched", "fix-failed")):
        proc = subprocess.run([sys.executable, str(alone), flag], env=env, capture_output=True, text=True,
                              cwd=alone.parent)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[-1].startswith(want)  # the buggy core under either flag


def test_commands_in_method_notes_use_the_script_s_flags():
    notes = "    HARNESS_RUN_DIR=/tmp/r04 python pack04.py --unpatched   # then --patched\n" \
            "HARNESS_PATCHED=1 HARNESS_BASELINE_SITE=$SITE python x.py --device cuda\nHARNESS_OTHER=1 python y.py\n"
    assert filing.reproducer.plain_flags(notes).splitlines() == [
        "    python pack04.py --unpatched --run-dir /tmp/r04  # then --patched",
        "python x.py --device cuda --patched --baseline-site $SITE",
        "HARNESS_OTHER=1 python y.py"]


def test_large_reproducer_goes_to_a_gist_the_command_creates(ran, capsys, monkeypatch):
    monkeypatch.setattr(filing.body, "INLINE_LIMIT", 10)
    assert cli("body", "01", *ran.args()) == Exit.OK
    out = capsys.readouterr()
    assert f"[`repro_fake.py`]({filing.PLACEHOLDER})" in out.out and "```python" not in out.out
    assert "url=$(gh gist create --public" in out.err and "repro_fake.py" in out.err
    assert f'sed "s|{filing.PLACEHOLDER}|$url|g"' in out.err and "--body-file -" in out.err


def test_amalgamation_inlines_only_what_is_used_and_refuses_clashes(tmp_path):
    helpers = tmp_path / "repros"
    (helpers / "t").mkdir(parents=True)
    (helpers / "_h.py").write_text("import os\n\nUNUSED = 1\nK = 2\n\n\ndef f():\n    return K + g()\n\n\n"
                                   "def g():\n    return 1\n")
    (helpers / "t" / "_t.py").write_text("from _h import f\n\n\ndef h():\n    return f() * 10\n")
    main = helpers / "t" / "pack09_x.py"
    main.write_text('"""Doc."""\nfrom __future__ import annotations\n\nimport sys\n\nfrom _t import h\n\n'
                    'print(h())\n')
    text = standalone.amalgamate(main, [helpers], "New doc")
    assert "UNUSED" not in text and "def g()" in text and "K = 2" in text and "from _t import" not in text
    proc = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True)
    assert proc.stdout.strip() == "30"
    main.write_text("from _t import h\n\n\ndef f():\n    return 0\n\n\nprint(h())\n")
    with pytest.raises(ConfigError, match="'f' is also defined, differently"):
        standalone.amalgamate(main, [helpers], "New doc")


# ---------------------------------------------------------------------------------------------- posting

def test_post_refuses_without_a_terminal(ran, fake_gh, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", Stdin(tty=False))
    assert cli("body", "01", "--post", "--head", "me:fix", *ran.args()) == Exit.USAGE
    assert "stdin is not a terminal" in capsys.readouterr().err
    assert not fake_gh.exists()


def test_post_uploads_the_reproducer_then_files_the_body_with_its_link(ran, fake_gh, capsys, monkeypatch):
    monkeypatch.setattr(filing.body, "INLINE_LIMIT", 10)
    monkeypatch.setattr(sys, "stdin", Stdin(tty=True))
    monkeypatch.setattr("builtins.input", lambda prompt: "01")
    monkeypatch.setenv("USER", "tester")
    assert cli("body", "01", "--post", "--head", "me:fix", *ran.args()) == Exit.OK
    gist, create = [c.strip("\n").split("\n") for c in fake_gh.read_text().split("--\n") if c.strip()]
    assert gist[:3] == ["gist", "create", "--public"] and gist[-1].endswith("repro_fake.py")
    assert create[:4] == ["pr", "create", "--repo", "acme/fake"] and create[-2:] == ["--head", "me:fix"]
    posted = (fake_gh.parent / "gh-args.txt.stdin").read_text()
    assert "(https://gist.github.com/me/abc123)" in posted and filing.PLACEHOLDER not in posted
    entry = Tracking.load(ran.root).doc["packs"]["01"]["filing"]
    assert entry["url"] == "https://github.com/acme/fake/pull/77" and entry["how"] == "gh pr create"
    assert entry["reproducer"] == "https://gist.github.com/me/abc123" and entry["decided_at"].endswith("Z")


def test_post_with_wrong_id_posts_nothing(ran, fake_gh, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", Stdin(tty=True))
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")
    assert cli("body", "01", "--post", "--head", "me:fix", *ran.args()) == Exit.USAGE
    assert "does not match; nothing was posted" in capsys.readouterr().err
    assert not fake_gh.exists() and "filing" not in Tracking.load(ran.root).doc["packs"]["01"]


def test_not_ready_without_receipts_and_post_refused(lane_repo, capsys, monkeypatch):
    _github_repo(lane_repo)
    r = _ready(lane_repo)
    assert _lane_problems(r) == {"bug": LaneProblemCode.NO_RECEIPT, "fix": LaneProblemCode.NO_RECEIPT}
    assert _codes(r).count(ReasonCode.LANE) == 2
    monkeypatch.setattr(sys, "stdin", Stdin(tty=True))
    assert cli("body", "01", "--post", "--head", "me:fix", *lane_repo.args()) == Exit.USAGE
    assert "is not ready to post" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- readiness

def test_ready_when_everything_holds(ran):
    r = _ready(ran)
    assert r.ready and r.filing_base == "1.0" and r.apply.status == readiness.APPLIES


def test_a_pack_switched_from_cpu_to_cuda_is_not_ready_on_receipts_from_a_cpu_host(ran):
    """Its receipts passed on a CPU host: once the lanes require cuda, they say nothing of the GPU."""
    path = ran.root / "tracking.toml"
    assert 'requires = "cpu"' in path.read_text()
    path.write_text(path.read_text().replace('requires = "cpu"', 'requires = "cuda"'))
    r = _ready(ran)
    assert not r.ready and ReasonCode.LANE in _codes(r)
    assert _lane_problems(r) == {"bug": LaneProblemCode.HOST_KIND, "fix": LaneProblemCode.HOST_KIND}
    assert "from a host without a GPU; the lane requires cuda" in r.why()
    # one lane back on the CPU: its receipt counts again
    text = path.read_text()
    i = text.index('name = "bug"')
    path.write_text(text[:i] + 'requires = "cpu"\n' + text[i:])
    assert _lane_problems(_ready(ran)) == {"fix": LaneProblemCode.HOST_KIND}


def test_receipts_of_another_series_are_not_current(ran):
    patch = next((ran.root / "patches" / "fake" / "01").iterdir())
    patch.write_text(patch.read_text().replace("use each element's own weight", "use the element's own weight"))
    r = _ready(ran)
    assert not r.ready and ReasonCode.LANE in _codes(r)
    assert _lane_problems(r) == {"fix": LaneProblemCode.SERIES}  # an unpatched lane does not depend on the series


def test_receipts_of_an_older_reproducer_are_not_current(ran):
    repro = ran.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text() + "# edited\n")
    assert _lane_problems(_ready(ran)) == {"bug": LaneProblemCode.REPRODUCER, "fix": LaneProblemCode.REPRODUCER}


def _as_older_receipts(ran, *keys: str) -> None:
    """Rewrite every receipt of pack 01 as one written before the harness recorded ``keys`` of its reproducer,
    re-sealed (as such a receipt was: complete, only without them)."""
    for rec in receipts.find(ran.root, "fake", "01"):
        data = json.loads(rec.path.read_text())
        for key in keys:
            data["reproducer"].pop(key, None)
        rec.path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        (rec.dir / "SHA256SUMS").unlink()
        receipts.write_manifest(rec.dir)


def test_receipts_that_imported_a_changed_helper_are_not_current(ran):
    for rec in receipts.find(ran.root, "fake", "01"):
        assert "repros/_lane.py" in rec.reproducer.loaded
    assert _ready(ran).ready
    beside = ran.root / "repros" / "fake" / "_shared.py"
    beside.write_text("X = 1\n")  # a helper appears beside the reproducer, which never imports it
    assert _ready(ran).ready
    lane_py = ran.root / "repros" / "_lane.py"
    lane_py.write_text(lane_py.read_text() + "# edited\n")  # one it imported changes
    assert _lane_problems(_ready(ran)) == {"bug": LaneProblemCode.LOADED, "fix": LaneProblemCode.LOADED}
    lane_py.unlink()  # and one it imported that goes away counts too
    assert _lane_problems(_ready(ran)) == {"bug": LaneProblemCode.LOADED, "fix": LaneProblemCode.LOADED}


@pytest.mark.parametrize("helper", ["repros/_lane.py", "repros/fake/_shared.py"], ids=["shared", "beside"])
def test_receipts_without_a_record_of_imports_count_every_helper_they_could_import(ran, helper):
    _as_older_receipts(ran, "loaded")
    for rec in receipts.find(ran.root, "fake", "01"):
        assert "repros/_lane.py" in rec.reproducer.helpers and rec.reproducer.loaded is None
    assert _ready(ran).ready
    path = ran.root / helper
    if path.exists():  # a helper the reproducer imports changes
        path.write_text(path.read_text() + "# edited\n")
    else:  # a helper appears beside the reproducer
        path.write_text("X = 1\n")
    assert _lane_problems(_ready(ran)) == {"bug": LaneProblemCode.HELPERS, "fix": LaneProblemCode.HELPERS}
    path.unlink()  # and a helper that goes away counts too
    if helper == "repros/_lane.py":
        assert _lane_problems(_ready(ran)) == {"bug": LaneProblemCode.HELPERS, "fix": LaneProblemCode.HELPERS}
    else:
        assert _ready(ran).ready


def test_receipts_without_helper_digests_compare_the_reproducer_file_only(ran):
    _as_older_receipts(ran, "loaded", "helpers")  # as receipts written before helpers were pinned
    for rec in receipts.find(ran.root, "fake", "01"):
        assert rec.reproducer.helpers is None and rec.reproducer.loaded is None
    lane_py = ran.root / "repros" / "_lane.py"
    lane_py.write_text(lane_py.read_text() + "# edited\n")
    assert _ready(ran).ready
    repro = ran.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text() + "# edited\n")
    assert _lane_problems(_ready(ran)) == {"bug": LaneProblemCode.REPRODUCER, "fix": LaneProblemCode.REPRODUCER}


def test_apply_check_is_cached_and_no_apply_never_claims_ready(ran):
    fresh = _ready(ran, allow_download=False)  # nothing cached yet
    assert not fresh.ready and _codes(fresh) == [ReasonCode.APPLY] and fresh.apply.status == ApplyStatus.NOT_CHECKED
    assert _ready(ran).ready  # checks (the base is materialized) and caches
    again = _ready(ran, allow_download=False)
    assert again.ready and again.apply.cached


def test_filing_base_comes_from_the_pack_then_the_manifest(lane_repo):
    lane_repo.add_base("1.1", CORE_BUGGY.replace("# multiply", "# scale"))
    # resolved when tracking.toml loads: the pack's key, else the manifest's, else the pack's base
    assert Tracking.load(lane_repo.root).pack("01").filing_base == "1.0"
    m = lane_repo.root / "upstream" / "fake.toml"
    m.write_text('filing_base = "1.1"\n' + m.read_text())
    t = Tracking.load(lane_repo.root)
    ctx = _ctx(lane_repo)
    assert t.pack("01").filing_base == "1.1"
    assert readiness.filing_base(t.pack("01"), ctx.manifest("fake")) == "1.1"
    r = readiness.readiness(ctx, t.pack("01"))
    assert ReasonCode.NO_LANE_ON_BASE in _codes(r)
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('base = "1.0"\nreproducer', 'base = "1.0"\nfiling_base = "1.0"\n'
                                                                          'reproducer'))
    assert Tracking.load(lane_repo.root).pack("01").filing_base == "1.0"
    # a key naming no base of the manifest is refused at load
    path.write_text(path.read_text().replace('filing_base = "1.0"', 'filing_base = "9.9"'))
    with pytest.raises(ConfigError, match="key 'filing_base' is '9.9', not a base of fake.toml"):
        Tracking.load(lane_repo.root)


def test_series_that_does_not_apply_on_the_filing_base_is_not_ready(ran, tmp_path):
    ran.add_base("2.0", CORE_BUGGY.replace("return [x * w[0] for x in xs]", "return [x * w[-1] for x in xs]"))
    m = ran.root / "upstream" / "fake.toml"
    m.write_text('filing_base = "2.0"\n' + m.read_text())
    r = _ready(ran)
    assert ReasonCode.APPLY in _codes(r) and r.apply.status == ApplyStatus.CONFLICT
    # a series ported to that base (patches/<target>/<pack>/<base>/) is the one that counts there
    ported = ran.root / "patches" / "fake" / "01" / "2.0"
    ported.mkdir()
    (ported / "0001-use-own-weight.patch").write_text(make_patch(
        tmp_path, CORE_BUGGY.replace("w[0]", "w[-1]"), CORE_BUGGY.replace("[x * w[0] for x in xs]",
                                                                          "[x * wi for x, wi in zip(xs, w)]")))
    assert series.series_dir(ran.root, "fake", "01", "2.0") == ported
    assert ReasonCode.APPLY not in _codes(_ready(ran))


def test_upstream_absorption_is_never_ready(ran):
    ran.add_base("1.1", CORE_BUGGY.replace("[x * w[0] for x in xs]", "[x * wi for x, wi in zip(xs, w)]"))
    m = ran.root / "upstream" / "fake.toml"
    m.write_text('filing_base = "1.1"\n' + m.read_text())
    r = _ready(ran)
    assert ReasonCode.ABSORBED in _codes(r) and r.apply.status == ApplyStatus.ABSORBED
    m.write_text(m.read_text().replace('filing_base = "1.1"\n', ""))
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text() + '\n[[packs.01.threads]]\nurl = "https://github.com/acme/fake/commit/'
                    + "b" * 40 + '"\nrole = "fixed upstream by"\nstate = "unknown"\n')
    r = _ready(ran)
    assert _codes(r) == [ReasonCode.ABSORBED] and "acme/fake@bbbbbbb (fixed upstream by)" in r.reasons[0].text


def test_evidence_from_a_lane_on_another_base_is_a_problem(ran):
    ran.add_base("1.1", CORE_BUGGY.replace("# multiply", "# scale"))
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('base = "1.0"\nreproducer', 'base = "1.0"\nfiling_base = "1.1"\n'
                                                                        'reproducer'))
    t = Tracking.load(ran.root)
    problems = filing.render(ran.root, t, t.pack("01")).problems
    assert problems == ["evidence row 1 (bug): the lane runs on 1.0, not on the filing base 1.1",
                        "evidence row 2 (fix): the lane runs on 1.0, not on the filing base 1.1"]


def test_all_docs_renders_every_fileable_pack_with_its_reproducer_and_receipts(ran, capsys, monkeypatch):
    monkeypatch.setattr(filing.body, "INLINE_LIMIT", 10)
    assert cli("body", "--all-docs", *ran.args()) == Exit.OK
    docs = ran.root / "docs" / "filings"
    assert capsys.readouterr().out == "docs/filings/01-pr.md\n"
    body = (docs / "01-pr.md").read_text()
    assert "[`repro_fake.py`](repro_fake.py)" in body and filing.PLACEHOLDER not in body
    assert (docs / "repro_fake.py").is_file()
    index = (docs / "README.md").read_text()
    assert "| 01 | pr | 1.0 | [01-pr.md](01-pr.md) | [repro_fake.py](repro_fake.py) |" in index
    assert "`receipts/fake/01/" in index and index.count("receipts/fake/01/") == 2


def test_a_git_base_is_named_once_with_its_commit():
    """'Where, in NVIDIA/Megatron-LM main@d98e8a6 at d98e8a64dd' named the same commit twice."""
    from types import SimpleNamespace

    from harness.filing.parts import base_label

    manifest = SimpleNamespace(repo="https://github.com/acme/fake", distribution="fake")
    base = SimpleNamespace(version="main@d98e8a6", commit="d98e8a64ddf34856e74b", artifact=None)
    assert base_label(manifest, base) == "acme/fake main at d98e8a64dd"
