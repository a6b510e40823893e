"""``harness stack``: a target's carried packs as the one package a training image installs, checked together.

The fake upstream carries pack 01 (scale uses each element's own weight) and pack 02, a change elsewhere in the same
file that wraps ``scale`` so it takes the first weight again: each passes alone, and together 02 undoes 01's fix.
The stack must name that pair, drop a pack upstream absorbed, give the same bytes twice, and carry a manifest a
fresh environment reads with importlib.metadata.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import CORE_BUGGY, cli, make_patch

from harness.errors import Exit

# pack 02: appended after total(); alone (on the buggy base) it changes nothing scale returns
WRAPPED = CORE_BUGGY + textwrap.dedent('''\


    _scale = scale


    def scale(xs, w):
        return _scale(xs, [w[0]] * len(xs))
''')

PACK02 = textwrap.dedent('''
    [packs.02]
    title = "scale: one weight for all, via a wrapper"
    target = "fake"
    kind = "pr"
    state = "{state}"
    files = ["src/fakepkg/core.py"]
    depends_on = []
    requires = "cpu"
    base = "1.0"
    reproducer = "repros/fake/pack02.py"

    [[packs.02.lanes]]
    name = "fix"
    base = "1.0"
    patched = true
    expect = "FIX_VALIDATED"
    timeout = 60
''')

REPRO02 = textwrap.dedent('''\
    import os
    import _lane

    _lane.stamp("fakepkg", "fakepkg.core")
    from fakepkg import core
    ok = hasattr(core, "_scale")
    _lane.verdict("FIX_VALIDATED" if ok and os.environ.get("HARNESS_PATCHED") == "1" else "FIX_FAILED")
''')


def _with_pack02(repo, tmp_path, state: str = "planned"):
    repo.write_tracking(extra=PACK02.format(state=state))
    (repo.root / "repros" / "fake" / "pack02.py").write_text(REPRO02)
    text = make_patch(tmp_path / "p02", CORE_BUGGY, WRAPPED, subject="core: wrap scale").replace("Pack: 01", "Pack: 02")
    repo.write_patch(text, pack="02", name="0001-core-wrap-scale.patch")
    return repo


def _json(capsys) -> dict:
    out = capsys.readouterr()
    assert out.out, out.err
    return json.loads(out.out)


def test_two_packs_that_pass_alone_and_fail_together_are_named(lane_repo, tmp_path, capsys):
    _with_pack02(lane_repo, tmp_path)
    (tmp_path / "p02").mkdir(exist_ok=True)
    capsys.readouterr()
    code = cli("stack", "check", "fake", "--json", *lane_repo.args())
    doc = _json(capsys)
    assert code == Exit.MISMATCH, doc
    assert doc["packs"] == ["01", "02"]
    lanes = {(c["pack"], c["lane"]): c for c in doc["lanes"]}
    broken = lanes[("01", "fix")]
    assert broken["stacked"] == "mismatch" and broken["alone"] == "pass" and broken["composition_failure"] is True
    assert "pack 02 in src/fakepkg/core.py" in broken["meets"]
    assert lanes[("02", "fix")]["stacked"] == "pass"
    # the check's receipts stay out of receipts/: readiness judges each pack alone
    assert not (lane_repo.root / "receipts").exists() or not any((lane_repo.root / "receipts").rglob("receipt.json"))
    stacked = list((lane_repo.root / "stacks" / "fake" / "1.0" / "receipts").rglob("receipt.json"))
    assert stacked, "the stack check keeps its receipts"
    rec = json.loads(next(p for p in stacked if "/01/" in str(p)).read_text())
    assert [p["file"].rsplit("/", 1)[-1] for p in rec["patches"]] == ["0001-use-own-weight.patch",
                                                                      "0001-core-wrap-scale.patch"]


def test_a_pack_absorbed_upstream_leaves_the_stack(lane_repo, tmp_path, capsys):
    _with_pack02(lane_repo, tmp_path, state="absorbed")
    capsys.readouterr()
    assert cli("stack", "check", "fake", "--json", *lane_repo.args()) == Exit.OK
    doc = _json(capsys)
    assert doc["packs"] == ["01"] and doc["left_out"] == [{"pack": "02", "why": "state absorbed"}]


def test_the_stack_wheel_is_the_same_bytes_twice_and_carries_its_manifest(lane_repo, tmp_path, capsys):
    _with_pack02(lane_repo, tmp_path)
    shas = []
    for n in (1, 2):
        capsys.readouterr()
        out = tmp_path / f"out{n}"
        assert cli("stack", "build", "fake", "--json", "-o", str(out), "--index", str(tmp_path / "index"),
                   "--cache", str(tmp_path / f"cache{n}"), "--root", str(lane_repo.root)) == Exit.OK
        doc = _json(capsys)
        shas.append(doc["sha256"])
    assert shas[0] == shas[1]  # two fresh caches, two builds, one set of bytes
    manifest = doc["manifest"]
    assert manifest["version"].startswith("1.0+pl.") and [p["id"] for p in manifest["packs"]] == ["01", "02"]
    assert manifest["packs"][0]["series"][0]["sha256"] and manifest["left_out"] == []
    wheel = doc["wheel"]
    assert wheel.endswith(f"fakepkg-{manifest['version']}-py3-none-any.whl")
    assert (tmp_path / "index" / "fakepkg" / "index.html").read_text().count(".whl#sha256=") == 1
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    wheel], check=True)
    read = subprocess.run([sys.executable, "-c", "import importlib.metadata as m, json; "
                           "d = m.distribution('fakepkg'); print(d.version); "
                           "print(json.loads(d.read_text('patchlane-stack.json'))['series_key'])"],
                          env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True, check=True)
    version, key = read.stdout.split()
    assert version == manifest["version"] and key == manifest["series_key"]


def test_stack_diff_says_which_packs_came_and_went(lane_repo, tmp_path, capsys):
    docs = []
    for n, state in ((1, "absorbed"), (2, "planned")):
        _with_pack02(lane_repo, tmp_path, state=state)
        capsys.readouterr()
        assert cli("stack", "build", "fake", "--json", "-o", str(tmp_path / f"o{n}"), *lane_repo.args()) == Exit.OK
        docs.append(tmp_path / f"o{n}" / "m.json")
        docs[-1].write_text(json.dumps(_json(capsys)["manifest"]))
    capsys.readouterr()
    assert cli("stack", "diff", str(docs[0]), str(docs[1]), "--json") == Exit.OK
    found = _json(capsys)
    assert found["added"] == ["02"] and found["removed"] == [] and found["rerun"] == ["02"]


@pytest.mark.parametrize("target,why", [("nope", "no manifest for target 'nope'")])
def test_an_unknown_target_is_one_line(lane_repo, capsys, target, why):
    assert cli("stack", "build", target, *lane_repo.args()) == Exit.USAGE
    assert why in capsys.readouterr().err


def test_a_lane_with_stack_false_is_left_out_of_the_check_with_its_reason(lane_repo, tmp_path, capsys):
    """The composition failure of 01's fix lane, opted out: the check says why, runs nothing for it, and passes."""
    _with_pack02(lane_repo, tmp_path)
    path = lane_repo.root / "tracking.toml"
    text = path.read_text()
    lane = 'name = "fix"\nbase = "1.0"\npatched = true\n'
    assert lane in text
    path.write_text(text.replace(lane, lane + 'stack = false\nstack_reason = "compares with the series alone"\n', 1))
    capsys.readouterr()
    assert cli("stack", "check", "fake", "--json", *lane_repo.args()) == Exit.OK
    lanes = {(c["pack"], c["lane"]): c for c in _json(capsys)["lanes"]}
    assert lanes[("01", "fix")]["stacked"] == "opted out"
    assert lanes[("01", "fix")]["reason"] == "compares with the series alone"
    assert lanes[("02", "fix")]["stacked"] == "pass"
    assert not list((lane_repo.root / "stacks").rglob("*-fix/receipt.json")) or all(
        "/01/" not in str(p) for p in (lane_repo.root / "stacks").rglob("receipt.json"))


@pytest.mark.parametrize(("keys", "finding"), [
    ('stack = false\n', "key 'stack' is false: say why"),
    ('stack_reason = "x"\n', "key 'stack_reason' goes with stack = false"),
    ('stak = false\n', "unknown key 'stak'"),
])
def test_a_stack_opt_out_without_a_reason_is_refused(lane_repo, capsys, keys, finding):
    path = lane_repo.root / "tracking.toml"
    text = path.read_text()
    lane = 'name = "fix"\nbase = "1.0"\npatched = true\n'
    path.write_text(text.replace(lane, lane + keys, 1))
    assert cli("status", "01", *lane_repo.args()) == Exit.USAGE
    assert finding in capsys.readouterr().err
