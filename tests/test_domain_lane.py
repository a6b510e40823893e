"""Domain lanes (issue 43): a widening change's declared domain, swept one process per point.

The kit (repros/kit/_domain.py) runs a point script per point; here the point script is a fake "kernel" whose
points succeed, decline, miss their reference, or crash for real (os.abort(), a segmentation fault through ctypes,
an uncaught exception at "launch"). Every crash is named with its reason and fails the lane without poisoning the
other points. The declaration's schema names the file and key at fault; the harness gives a domain lane the
declaration and records it in the receipt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import cli, copy_lane_repo, isolated_env, make_lane_repo

from harness.base.store import Store
from harness.errors import ConfigError, Exit
from harness.filing import body as filing_body
from harness.filing import readiness
from harness.filing.readiness import ReasonCode
from harness.lane.lanes import Context
from harness.lane.receipts import find
from harness.lane.tracking import Tracking

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "repros" / "kit" / "_domain.py"

# A fake kernel: what a point does is its "mode" axis. "size" is a second axis, to name points by.
POINT = textwrap.dedent('''\
    import argparse, ctypes, json, os
    p = argparse.ArgumentParser()
    p.add_argument("--point")
    p.add_argument("--expect")
    p.add_argument("--probe", action="store_true")
    a = p.parse_args()
    pt = json.loads(a.point)
    mode = pt["mode"]
    if a.probe:  # the bound lifted: what the fake kernel does beyond it
        mode = {"decline": "launch", "wide": "ok", "nolift": "nolift"}.get(mode, mode)
    if mode == "nolift":
        print("PROBE_UNAVAILABLE no bound to lift", flush=True)
        raise SystemExit(3)

    def emit(**kw):
        print("DOMAIN_POINT " + json.dumps(kw), flush=True)

    if mode == "ok":
        emit(outcome="matched", errors={"out": 0.001, "dq": 0.002}, tol=0.03, base="declined")
    elif mode == "old":
        emit(outcome="matched", errors={"out": 0.001}, tol=0.03, base="admitted")
    elif mode == "decline":
        emit(outcome="declined", base="declined")
    elif mode == "regress":
        emit(outcome="declined", base="admitted")
    elif mode == "mismatch":
        emit(outcome="mismatch", errors={"out": 0.5}, tol=0.03, base="declined")
    elif mode == "abort":
        os.abort()
    elif mode == "segv":
        ctypes.string_at(0)
    elif mode == "launch":
        print("compiling the kernel", flush=True)
        raise RuntimeError("InternalError: Failed to set the allowed dynamic shared memory size to 245760")
    elif mode == "silent":
        pass
''')


def declaration(points: list[tuple[str, str]], bound: bool = False) -> str:
    return json.dumps({"axes": ["mode", "size"], "devices": ["cpu"],
                       "points": [{"values": {"mode": m, "size": i}, "expect": e, "note": "",
                                   **({"bound": True} if bound and e == "decline" else {})}
                                  for i, (m, e) in enumerate(points)]})


def run_kit(tmp_path: Path, points: list[tuple[str, str]], patched: bool = True, jobs: int = 3,
            probe: bool = False):
    script = tmp_path / "point.py"
    script.write_text(POINT)
    env = dict(os.environ, HARNESS_PATCHED="1" if patched else "0", PYTHONPATH=str(ROOT / "repros"))
    env.pop("HARNESS_LANE", None)
    done = subprocess.run([sys.executable, str(KIT), "--distribution", "pytest", "--module", "json",
                           "--point-script", str(script), "--domain", declaration(points, bound=probe),
                           "--jobs", str(jobs), *(["--probe-declines"] if probe else [])],
                          capture_output=True, text=True, env=env, timeout=120)
    tags: dict[str, list[dict]] = {}
    for line in done.stdout.splitlines():
        tag, _, payload = line.partition(" ")
        if tag.isupper() and payload.startswith("{"):
            tags.setdefault(tag, []).append(json.loads(payload))
    points_seen = {json.dumps(f["point"], sort_keys=True): f for f in tags.get("FIGURE", [])
                   if f["name"] == "domain_point"}
    return done, tags, points_seen


def fig(points_seen: dict, mode: str, size: int) -> dict:
    return points_seen[json.dumps({"mode": mode, "size": size}, sort_keys=True)]


def test_points_that_match_or_decline_validate_the_fix(tmp_path):
    done, tags, seen = run_kit(tmp_path, [("ok", "admit"), ("old", "admit"), ("decline", "decline")])
    assert done.returncode == 0, done.stderr
    assert [s for s in tags if s in ("FIX_VALIDATED", "FIX_FAILED")] == ["FIX_VALIDATED"]
    assert fig(seen, "ok", 0)["value"] == "matched" and fig(seen, "ok", 0)["max_error"] == 0.002
    assert fig(seen, "decline", 2)["value"] == "declined" and fig(seen, "decline", 2)["ok"] is True
    summary = next(f for f in tags["FIGURE"] if f["name"] == "domain_summary")
    assert (summary["points"], summary["matched"], summary["declined"], summary["crashed"]) == (3, 2, 1, 0)
    assert summary["newly_admitted"] == 1  # "old" was admitted by the base already
    assert "[3/3]" in done.stderr  # progress on stderr


def test_every_crash_is_named_and_fails_the_lane_without_poisoning_the_others(tmp_path):
    points = [("abort", "admit"), ("ok", "admit"), ("segv", "admit"), ("launch", "admit"), ("decline", "decline"),
              ("silent", "admit")]
    done, tags, seen = run_kit(tmp_path, points)
    assert done.returncode == 1  # the lane's verdict is a crash, whatever the other points did
    assert fig(seen, "abort", 0)["value"] == "crashed"
    assert "SIGABRT" in fig(seen, "abort", 0)["reason"]
    assert "SIGSEGV" in fig(seen, "segv", 2)["reason"]
    assert "dynamic shared memory size to 245760" in fig(seen, "launch", 3)["reason"]
    assert "no DOMAIN_POINT line" in fig(seen, "silent", 5)["reason"]
    # the points beside them ran as if alone
    assert fig(seen, "ok", 1)["value"] == "matched" and fig(seen, "decline", 4)["value"] == "declined"
    crashed = tags["FIX_FAILED"][0]["crashed"]
    assert [c.split(":")[0] for c in crashed] == ["mode=abort,size=0", "mode=segv,size=2", "mode=launch,size=3",
                                                  "mode=silent,size=5"]
    assert "output of crashed point mode=launch,size=3" in done.stdout  # its tail is in the log
    assert "4 point(s) crashed" in done.stderr


@pytest.mark.parametrize("mode,expect,why", [
    ("mismatch", "admit", "missed its reference"),
    ("decline", "admit", "declared admitted, but the change declined it"),
    ("ok", "decline", "declared declined, but the build admitted it"),
    ("regress", "decline", "the base admitted it"),
])
def test_a_point_that_misbehaves_fails_the_fix(tmp_path, mode, expect, why):
    done, tags, seen = run_kit(tmp_path, [("ok", "admit"), (mode, expect)])
    assert done.returncode == 0
    assert "FIX_VALIDATED" not in tags
    failures = tags["FIX_FAILED"][0]["failures"]
    assert len(failures) == 1 and failures[0].startswith(f"mode={mode},size=1: ") and why in failures[0]
    assert fig(seen, mode, 1)["ok"] is False


def test_the_base_declining_a_point_to_admit_is_the_bug(tmp_path):
    done, tags, _ = run_kit(tmp_path, [("decline", "admit"), ("old", "admit"), ("decline", "decline")],
                            patched=False)
    assert done.returncode == 0
    assert "BUG_REPRODUCED" in tags and tags["BUG_REPRODUCED"][0]["admit_points_declined"] == 1
    done, tags, _ = run_kit(tmp_path, [("old", "admit")], patched=False)
    assert "BUG_ABSENT" in tags


def test_a_crash_on_the_base_fails_its_lane_too(tmp_path):
    done, tags, seen = run_kit(tmp_path, [("decline", "admit"), ("segv", "admit")], patched=False)
    assert done.returncode == 1 and "BUG_REPRODUCED" not in tags
    assert fig(seen, "segv", 1)["value"] == "crashed"


# ------------------------------------------------------------------------------------------ the declaration

def probes(tags: dict) -> dict[str, dict]:
    return {f["point"]["mode"]: f for f in tags.get("FIGURE", []) if f["name"] == "domain_probe"}


def test_a_bound_decline_that_fails_beyond_the_bound_is_backed(tmp_path):
    done, tags, _ = run_kit(tmp_path, [("ok", "admit"), ("decline", "decline")], probe=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FIX_VALIDATED" in tags and "FIX_FAILED" not in tags
    got = probes(tags)["decline"]
    assert got["value"] == "crashed" and got["backed"] is True
    assert "dynamic shared memory size to 245760" in got["why"]  # the real error, recorded
    control = next(f for f in tags["FIGURE"] if f["name"] == "domain_probe_control")
    assert control["value"] == "matched" and control["point"] == {"mode": "ok", "size": 0}
    summary = next(f for f in tags["FIGURE"] if f["name"] == "domain_probe_summary")
    assert (summary["points"], summary["backed"], summary["crashed"]) == (1, 1, 1)


@pytest.mark.parametrize("mode,why", [
    ("wide", "ran and matched its reference without the bound"),  # the bound refuses what the code handles
    ("nolift", "could not lift the bound"),  # a crash that proves nothing
])
def test_a_bound_decline_the_code_handles_or_cannot_probe_is_not_backed(tmp_path, mode, why):
    done, tags, _ = run_kit(tmp_path, [("ok", "admit"), (mode, "decline")], probe=True)
    assert done.returncode == 0
    assert "FIX_VALIDATED" not in tags
    assert probes(tags)[mode]["backed"] is False
    (failure,) = tags["FIX_FAILED"][0]["failures"]
    assert failure.startswith(f"mode={mode},size=1: ") and why in failure


def test_a_probe_whose_control_fails_proves_nothing(tmp_path):
    done, tags, _ = run_kit(tmp_path, [("abort", "admit"), ("decline", "decline")], probe=True)
    assert done.returncode == 0
    assert "FIX_VALIDATED" not in tags and "domain_probe" not in {f["name"] for f in tags.get("FIGURE", [])}
    assert "control mode=abort,size=0 did not match" in tags["FIX_FAILED"][0]["failures"][0]


def test_a_probe_without_bound_declines_or_on_the_base_is_refused(tmp_path):
    done, tags, _ = run_kit(tmp_path, [("ok", "admit"), ("decline", "decline")], probe=False)
    assert "domain_probe" not in {f["name"] for f in tags.get("FIGURE", [])}  # a plain sweep probes nothing
    script = tmp_path / "point.py"
    env = dict(os.environ, HARNESS_PATCHED="1", PYTHONPATH=str(ROOT / "repros"))
    env.pop("HARNESS_LANE", None)
    plain = subprocess.run([sys.executable, str(KIT), "--distribution", "pytest", "--module", "json",
                            "--point-script", str(script), "--domain", declaration([("ok", "admit")]),
                            "--probe-declines"], capture_output=True, text=True, env=env, timeout=120)
    assert "no decline grid says bound = true" in plain.stdout
    base = subprocess.run([sys.executable, str(KIT), "--distribution", "pytest", "--module", "json",
                           "--point-script", str(script), "--domain", declaration([("ok", "admit")]),
                           "--probe-declines"], capture_output=True, text=True, timeout=120,
                          env=dict(env, HARNESS_PATCHED="0"))
    assert base.returncode != 0 and "run it on the patched build" in base.stderr


DOMAIN = '''
[packs.01.domain]
axes = ["mode", "size"]
devices = ["cpu"]
not_shown = ["sm_80"]
point = "repros/fake/domain_point.py"
summary = "sizes the change admits"

[[packs.01.domain.admits]]
mode = ["ok"]
size = [1, 2]

[[packs.01.domain.declines]]
mode = ["decline"]
size = [3]
note = "beyond the bound"
'''

DOMAIN_LANES = '''
[[packs.01.lanes]]
name = "domain-fix"
base = "1.0"
patched = true
domain = true
expect = "FIX_VALIDATED"
args = ["--distribution", "fakepkg", "--module", "fakepkg"]
timeout = 60

[[packs.01.lanes]]
name = "domain-bug"
base = "1.0"
patched = false
domain = true
expect = "BUG_REPRODUCED"
args = ["--distribution", "fakepkg", "--module", "fakepkg"]
timeout = 60
'''

# the fake upstream's point: admitted and matched on the patched build, declined on the base
REPO_POINT = textwrap.dedent('''\
    import argparse, json, os
    p = argparse.ArgumentParser()
    p.add_argument("--point")
    p.add_argument("--expect")
    p.add_argument("--probe", action="store_true")
    a = p.parse_args()
    pt = json.loads(a.point)
    if a.probe and pt["mode"] == "decline":
        raise RuntimeError("launch failed: too much shared memory")
    from fakepkg.core import scale
    fixed = scale([1.0, 2.0], [1.0, 0.0]) == [1.0, 0.0]
    if pt["mode"] == "ok" and fixed:
        out = {"outcome": "matched", "errors": {"out": 0.0}, "tol": 0.01}
    else:
        out = {"outcome": "declined"}
    print("DOMAIN_POINT " + json.dumps(out))
''')


def domain_repo(lane_repo, domain: str = DOMAIN, lanes: str = DOMAIN_LANES):
    (lane_repo.root / "repros" / "kit").mkdir(exist_ok=True)
    (lane_repo.root / "repros" / "kit" / "_domain.py").write_text(KIT.read_text())
    (lane_repo.root / "repros" / "fake" / "domain_point.py").write_text(REPO_POINT)
    lane_repo.write_tracking(extra=domain + lanes)
    return lane_repo


def test_the_declaration_loads_as_points(lane_repo):
    domain_repo(lane_repo)
    d = Tracking.load(lane_repo.root).packs["01"].domain
    assert d is not None and d.axes == ("mode", "size") and d.devices == ("cpu",)
    assert [(p.name, p.expect) for p in d.points()] == [("mode=ok,size=1", "admit"), ("mode=ok,size=2", "admit"),
                                                         ("mode=decline,size=3", "decline")]


@pytest.mark.parametrize("change,key", [
    (("size = [3]\nnote", "sise = [3]\nnote"), "sise"),  # an axis misspelt in a grid
    (('devices = ["cpu"]', 'devices = ["h100"]'), "devices"),  # not a device
    (('point = "repros/fake/domain_point.py"', 'point = "repros/fake/nope.py"'), "point"),
    (('summary = "sizes the change admits"', 'summary = "x"\nclaim = "y"'), "claim"),  # not a key of the schema
    (("mode = [\"decline\"]\nsize = [3]", "mode = [\"ok\"]\nsize = [2]"), "both"),  # admitted and declined
    (('size = [1, 2]', 'size = []'), "size"),
])
def test_a_bad_declaration_names_the_file_and_key(lane_repo, change, key):
    domain_repo(lane_repo, DOMAIN.replace(*change))
    with pytest.raises(ConfigError) as exc:
        Tracking.load(lane_repo.root)
    text = str(exc.value)
    assert str(lane_repo.root / "tracking.toml") in text and "[packs.01] .domain" in text and key in text


def test_a_domain_lane_needs_a_declaration(lane_repo):
    domain_repo(lane_repo, domain="")
    with pytest.raises(ConfigError, match=r"domain = true but there is no \[domain\] to sweep"):
        Tracking.load(lane_repo.root)


def test_a_domain_lane_runs_the_declared_points_and_records_them(lane_repo):
    domain_repo(lane_repo)
    assert cli("run", "01", "--quiet", "--lane", "domain-fix", "--lane", "domain-bug", *lane_repo.args()) == 0
    recs = {r.lane: r for r in find(lane_repo.root, "fake", "01")}
    fix, bug = recs["domain-fix"], recs["domain-bug"]
    assert str(fix.verdict) == "pass" and str(bug.verdict) == "pass"
    assert fix.reproducer.path == "repros/fake/domain_point.py"
    recorded = json.loads(fix.reproducer.args[fix.reproducer.args.index("--domain") + 1])
    assert [p["values"] for p in recorded["points"]] == [{"mode": "ok", "size": 1}, {"mode": "ok", "size": 2},
                                                         {"mode": "decline", "size": 3}]
    outcomes = {json.dumps(f.data["point"], sort_keys=True): f.data["value"] for f in fix.figures
                if f.data["name"] == "domain_point"}
    assert sorted(outcomes.values()) == ["declined", "matched", "matched"]
    assert {f.data["value"] for f in bug.figures if f.data["name"] == "domain_point"} == {"declined"}


# ------------------------------------------------------------------------------------------ readiness and body

REPO_POINT_FAULTY = REPO_POINT.replace('print("DOMAIN_POINT " + json.dumps(out))', '''\
if os.environ.get("FAKE_DOMAIN") == "mismatch" and out["outcome"] == "matched":
    out = {"outcome": "mismatch", "errors": {"out": 0.5}, "tol": 0.01}
print("DOMAIN_POINT " + json.dumps(out))''')
assert REPO_POINT_FAULTY != REPO_POINT


@pytest.fixture(scope="module")
def _domain_ran(tmp_path_factory):
    """The fake pack with a domain, on a github.com repository, every lane run once (real CPU runs)."""
    with isolated_env():
        repo = make_lane_repo(tmp_path_factory.mktemp("domain-ran"))
        shutil.copytree(ROOT / "templates", repo.root / "templates", dirs_exist_ok=True)
        m = repo.root / "upstream" / "fake.toml"
        m.write_text(m.read_text().replace("https://example.invalid/fake", "https://github.com/acme/fake"))
        domain_repo(repo)
        (repo.root / "repros" / "fake" / "domain_point.py").write_text(REPO_POINT_FAULTY)
        assert cli("run", "01", "--quiet", *repo.args()) == Exit.OK
    return repo


@pytest.fixture
def domain_ran(_domain_ran, tmp_path):
    return copy_lane_repo(_domain_ran, tmp_path)


def _ready(repo) -> readiness.Readiness:
    ctx = Context(root=repo.root, tracking=Tracking.load(repo.root), store=Store(repo.cache))
    return readiness.readiness(ctx, ctx.tracking.pack("01"))


def _domain_reasons(r: readiness.Readiness) -> list[str]:
    return [x.text for x in r.reasons if x.code == ReasonCode.DOMAIN]


def test_ready_once_the_domain_lane_shows_the_domain(domain_ran):
    r = _ready(domain_ran)
    assert r.ready, r.why()
    body = filing_body.render(domain_ran.root, Tracking.load(domain_ran.root), Tracking.load(domain_ran.root)
                              .pack("01")).body
    assert "| What this PR admits (mode, size; 3 points on CPU, cpu, each in a process of its own) |" in body
    assert ("| admitted: forward and backward against a float64 reference | 2: mode ok; size 1, 2 | "
            "largest error 0 (tolerance 0.01) |") in body
    assert ("| declined, as without this PR: beyond the bound | 1: (decline, 3) | declined (1 of 1 declined "
            "without this PR too) |") in body
    assert "| devices | shown on cpu | not shown on sm_80 |" in body


def test_not_ready_while_the_domain_lane_is_missing(domain_ran):
    for rec in (domain_ran.root / "receipts" / "fake" / "01").iterdir():
        if rec.name.endswith("-domain-fix"):
            shutil.rmtree(rec)
    r = _ready(domain_ran)
    assert _domain_reasons(r) == ["domain lane domain-fix: no receipt"]
    assert ReasonCode.LANE not in [x.code for x in r.reasons]  # named once, as the domain's
    rendered = filing_body.render(domain_ran.root, Tracking.load(domain_ran.root),
                                  Tracking.load(domain_ran.root).pack("01"))
    assert "What this PR admits" not in rendered.body  # no receipt, no claim
    assert any("domain-fix has no receipt; the body does not claim the domain" in p for p in rendered.problems)


def test_not_ready_while_the_domain_lane_fails(domain_ran, monkeypatch):
    monkeypatch.setenv("FAKE_DOMAIN", "mismatch")
    assert cli("run", "01", "--quiet", "--lane", "domain-fix", *domain_ran.args()) == Exit.MISMATCH
    r = _ready(domain_ran)
    assert _domain_reasons(r) == ["domain lane domain-fix: latest receipt is mismatch, not pass"]
    body = filing_body.render(domain_ran.root, Tracking.load(domain_ran.root),
                              Tracking.load(domain_ran.root).pack("01")).body
    assert "What this PR admits" not in body


def test_not_ready_while_the_domain_lane_swept_another_declaration(domain_ran):
    domain_repo(domain_ran, DOMAIN.replace("size = [1, 2]", "size = [1, 2, 4]"))
    (domain_ran.root / "repros" / "fake" / "domain_point.py").write_text(REPO_POINT_FAULTY)
    r = _ready(domain_ran)
    assert _domain_reasons(r) == [f"domain lane {name}: latest receipt swept another declaration than today's "
                                  "[domain] of patches/fake/01/pack.toml (its points or devices changed since)"
                                  for name in ("domain-fix", "domain-bug")]


def test_not_ready_without_a_patched_domain_lane(domain_ran):
    domain_repo(domain_ran, lanes=DOMAIN_LANES.split("[[packs.01.lanes]]\nname = \"domain-bug\"")[0])
    (domain_ran.root / "repros" / "fake" / "domain_point.py").write_text(REPO_POINT_FAULTY)
    text = (domain_ran.root / "tracking.toml").read_text().replace('name = "domain-fix"\nbase = "1.0"\npatched = true',
                                                                  'name = "domain-fix"\nbase = "1.0"\npatched = false')
    (domain_ran.root / "tracking.toml").write_text(text.replace('name = "domain-fix"\nbase = "1.0"\npatched = false\n'
                                                                'domain = true\nexpect = "FIX_VALIDATED"',
                                                                'name = "domain-fix"\nbase = "1.0"\npatched = false\n'
                                                                'domain = true\nexpect = "BUG_REPRODUCED"'))
    r = _ready(domain_ran)
    assert any("no patched domain lane (domain = true) runs on the filing base 1.0" in t for t in _domain_reasons(r))


def test_harness_check_names_the_file_and_key_of_a_bad_declaration(lane_repo, capsys):
    domain_repo(lane_repo, DOMAIN.replace('not_shown = ["sm_80"]', 'not_shown = ["sm_80", "cpu"]'))
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "tracking.toml [packs.01] .domain: keys 'devices' and 'not_shown' both name cpu" in err


PROBE_LANE = '''
[[packs.01.lanes]]
name = "probe-fix"
base = "1.0"
patched = true
domain = true
expect = "FIX_VALIDATED"
args = ["--distribution", "fakepkg", "--module", "fakepkg", "--probe-declines"]
timeout = 60
'''


def test_a_bound_decline_needs_a_probe_lane_and_the_body_says_what_it_showed(domain_ran):
    bound = DOMAIN.replace('note = "beyond the bound"', 'note = "beyond the bound"\nbound = true')
    domain_repo(domain_ran, bound)
    (domain_ran.root / "repros" / "fake" / "domain_point.py").write_text(REPO_POINT_FAULTY)
    r = _ready(domain_ran)
    assert any("declines 1 point(s) by the change's own bound (bound = true), and no patched domain lane with "
               "--probe-declines runs on 1.0" in t for t in _domain_reasons(r))
    domain_repo(domain_ran, bound, DOMAIN_LANES + PROBE_LANE)
    (domain_ran.root / "repros" / "fake" / "domain_point.py").write_text(REPO_POINT_FAULTY)
    assert cli("run", "01", "--quiet", *domain_ran.args()) == Exit.OK
    probe = next(rec for rec in find(domain_ran.root, "fake", "01") if rec.lane == "probe-fix")
    assert str(probe.verdict) == "pass"
    (backed,) = [f.data for f in probe.figures if f.data["name"] == "domain_probe"]
    assert backed["point"] == {"mode": "decline", "size": 3} and backed["backed"] is True
    assert "too much shared memory" in backed["why"]
    r = _ready(domain_ran)
    assert r.ready, r.why()
    body = filing_body.render(domain_ran.root, Tracking.load(domain_ran.root),
                              Tracking.load(domain_ran.root).pack("01")).body
    assert ("| declined, as without this PR: beyond the bound | 1: (decline, 3) | declined (1 of 1 declined "
            "without this PR too); with the bound lifted: 1 failed to run |") in body


def test_bound_belongs_to_a_decline_grid(lane_repo):
    domain_repo(lane_repo, DOMAIN.replace("size = [1, 2]", "size = [1, 2]\nbound = true"))
    with pytest.raises(ConfigError, match=r"admits\[0\]: key 'bound' belongs to a decline grid"):
        Tracking.load(lane_repo.root)


def test_a_declaration_without_bound_reads_as_before(lane_repo):
    """Adding the key changed no receipt's declaration: a pack that sets no bound sweeps the same JSON."""
    domain_repo(lane_repo)
    decl = json.loads(Tracking.load(lane_repo.root).packs["01"].domain.declaration())
    assert all("bound" not in p for p in decl["points"])
