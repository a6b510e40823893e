"""`harness order` and `harness waves` on fake upstreams."""

from __future__ import annotations

import textwrap

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, cli, make_patch

from harness.errors import ConfigError, Exit
from harness.filing import landing
from harness.lane.tracking import Tracking


def _pack(pid, kind="pr", state="planned", depends=(), cls=None, extra=""):
    deps = ", ".join(f'"{d}"' for d in depends)
    return textwrap.dedent(f'''
        [packs.{pid}]
        title = "pack {pid}"
        target = "fake"
        kind = "{kind}"
        state = "{state}"
        depends_on = [{deps}]
    ''') + (f'class = "{cls}"\n' if cls else "") + extra


def _second_patch(lane_repo, tmp_path):
    """Pack 02's patch was cut on top of pack 01's fix: it edits the line 01 changed."""
    further = CORE_FIXED.replace("zip(xs, w)]", "zip(xs, w, strict=True)]")
    lane_repo.write_patch(make_patch(tmp_path, CORE_FIXED, further, subject="core: strict zip"), pack="02",
                          name="0001-strict-zip.patch")


def _checks(out: str) -> dict[tuple[str, str], dict[str, str]]:
    """order's checks table as piped (tab-separated, after its header line ``check\tpack\t...``)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("check\t"))
    header = lines[start].split("\t")
    rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[start + 1:] if line.strip()]
    return {(r["check"], r["pack"]): r for r in rows}


def test_undeclared_dependency_fails_to_apply_and_overlap_is_flagged(lane_repo, tmp_path, capsys):
    lane_repo.write_tracking(_pack("02"))
    _second_patch(lane_repo, tmp_path)
    assert cli("order", *lane_repo.args()) == Exit.USAGE  # overlap outranks the apply failure
    checks = _checks(capsys.readouterr().out)
    assert checks["apply", "02"]["result"] == "FAIL" and "does not apply on fake 1.0" in checks["apply", "02"]["detail"]
    assert checks["apply", "01"]["result"] == "ok"
    assert checks["overlap", "01"]["result"] == "FAIL"
    assert checks["overlap", "01"]["detail"].startswith("packs 01 and 02 both change fake src/fakepkg/core.py "
                                                        "(pack 01 0001-use-own-weight.patch lines 3-9")


def test_declared_dependency_applies_and_orders_the_overlap(lane_repo, tmp_path, capsys):
    lane_repo.write_tracking(_pack("02", depends=["01"]))
    _second_patch(lane_repo, tmp_path)
    assert cli("order", *lane_repo.args()) == Exit.OK
    checks = _checks(capsys.readouterr().out)
    assert checks["apply", "02"]["result"] == "ok" and checks["apply", "02"]["detail"].startswith("2 patch(es) apply")
    assert checks["overlap", "-"]["detail"].startswith("no two unordered packs touch the same lines")


def test_overlap_without_apply_is_usage_error(lane_repo, tmp_path, capsys):
    lane_repo.write_tracking(_pack("02"))
    _second_patch(lane_repo, tmp_path)
    assert cli("order", "--no-apply", *lane_repo.args()) == Exit.USAGE
    checks = _checks(capsys.readouterr().out)
    assert checks["overlap", "01"]["result"] == "FAIL" and "packs 01 and 02" in checks["overlap", "01"]["detail"]
    assert not any(kind == "apply" for kind, _ in checks)  # nothing was applied


def test_landing_order_is_topological_then_by_target_and_id(lane_repo):
    lane_repo.write_tracking(_pack("05", depends=["03"]) + _pack("03") + _pack("02", depends=["05"]))
    order = [p.id for p in landing.landing_order(Tracking.load(lane_repo.root))]
    assert order == ["01", "03", "05", "02"]


def test_class_is_validated(lane_repo):
    lane_repo.write_tracking(_pack("02", cls="cosmetic"))
    with pytest.raises(ConfigError, match=r"\[packs.02\]: key 'class' is 'cosmetic'"):
        Tracking.load(lane_repo.root)


def test_waves_follow_the_article_order_and_dependencies(lane_repo, capsys):
    packs = (
        _pack("02", kind="issue", cls="crash-fix")
        + _pack("03", kind="comment", cls="perf")
        + _pack("04", cls="refactor")
        + _pack("05", kind="bug-report", depends=["04"])
        + _pack("06", cls="crash-fix", depends=["04"])  # a crash fix that needs a refactor waits for it
        + _pack("07", state="absorbed")
        + _pack("08", state="blocked", extra='blocked = "no base"\n')
        + _pack("09", cls="crash-fix", depends=["08"])
        + _pack("10", kind="regression-guard")
    )
    lane_repo.write_tracking(packs)
    lane_repo.root.joinpath("tracking.toml").write_text(
        lane_repo.root.joinpath("tracking.toml").read_text().replace('kind = "pr"  # a pull request',
                                                                     'kind = "pr"\nclass = "feature"', 1))
    waves, skipped = landing.plan_waves(Tracking.load(lane_repo.root))
    assert [[p.id for p in w.packs] for w in waves] == [["02", "03", "01"], ["04", "06", "05"]]
    assert {s.pack.id: s.reason for s in skipped} == {
        "07": "absorbed: absorbed upstream; not filed (regression coverage only)",
        "08": "blocked: no base",
        "09": "depends on 08 (blocked), which is not being filed",
        "10": "kind regression-guard: nothing to file",
    }
    assert cli("waves", "--format", "table", *lane_repo.args()) == Exit.OK
    out = capsys.readouterr().out
    assert "08 (fake): blocked: no base" in out
    assert cli("waves", *lane_repo.args()) == Exit.OK  # piped: the packs left out are rows of their own
    assert "-\tfake\t08\t" in (out := capsys.readouterr().out) and "\tno: blocked: no base\t" in out


def test_chunks_are_two_to_four():
    sizes = {n: [len(c) for c in landing._chunks(list(range(n)))] for n in range(1, 11)}
    assert sizes[5] == [3, 2] and sizes[9] == [3, 3, 3] and sizes[4] == [4] and sizes[1] == [1]
    assert all(all(2 <= s <= 4 for s in v) for n, v in sizes.items() if n > 1)


def test_check_apply_shares_the_series_check(lane_repo, tmp_path, capsys):
    assert cli("check", "--apply", *lane_repo.args()) == Exit.OK
    assert "pack 01: 1 patch(es) apply on fake 1.0" in capsys.readouterr().out
    lane_repo.write_tracking(_pack("02"))
    _second_patch(lane_repo, tmp_path)
    assert cli("check", "--apply", *lane_repo.args()) == Exit.APPLY
    assert "pack 02: 02/0001-strict-zip.patch does not apply" in capsys.readouterr().err


def test_check_apply_remembers_a_series_that_applied_and_prints_progress(lane_repo, tmp_path, capsys, monkeypatch):
    assert cli("check", "--apply", *lane_repo.args()) == Exit.OK
    err = capsys.readouterr().err
    assert "[1/1] pack 01 on fake 1.0: applying 1 patch(es)" in err
    from harness.upstream import pins

    def no_materialize(*args, **kwargs):
        raise AssertionError("materialized although the same series on the same pin applied before")

    monkeypatch.setattr(pins, "materialize", no_materialize)
    assert cli("check", "--apply", *lane_repo.args()) == Exit.OK
    out = capsys.readouterr()
    assert "pack 01: 1 patch(es) apply on fake 1.0" in out.out
    # not presented as a check made now, and the shared cache it came from is named
    assert f"applies (not applied now; remembered in {lane_repo.cache / 'apply-ok'}" in " ".join(out.err.split())
    # another patch is another key: checked again (and here, the materialize it needs is refused)
    lane_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED.replace("weight", "own weight")))
    assert cli("check", "--apply", *lane_repo.args()) == Exit.INTERNAL
    monkeypatch.undo()
    # a series that does not apply is not remembered: each check reports it
    lane_repo.write_patch(make_patch(tmp_path, CORE_FIXED, CORE_FIXED.replace("weight", "own weight")))
    assert cli("check", "--apply", *lane_repo.args()) == Exit.APPLY
    assert cli("check", "--apply", *lane_repo.args()) == Exit.APPLY
