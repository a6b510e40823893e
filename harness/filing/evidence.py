"""The evidence table of a body: ``pack.toml's [[evidence]]`` rows resolved against the lanes' latest receipts,
plus the hosts and builds they ran on. Never typed: every figure is read from a receipt."""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from harness.lane import receipts, suite, suite_env, suite_reasons
from harness.lane.tracking import EvidenceRow, Pack
from harness.lane.tracking import domain as domain_model
from harness.upstream import pins
from harness.upstream.github import repo_slug


def number(v: float) -> str:
    if v == 0:
        return "0"
    if not math.isfinite(v):
        return str(v)
    if abs(v) < 1e-2 or abs(v) >= 1e6:
        mantissa, exp = f"{v:.1e}".split("e")
        return f"{mantissa}e{int(exp)}"
    return f"{v:.3g}"


def shown(v, unit: str | None = None) -> str:
    """A figure value as a maintainer reads it: 6.6e-8, 0.957, 31.5 GiB, 682 ms, 192.0 KiB, yes/no."""
    if isinstance(v, bool):
        text = "yes" if v else "no"
    elif isinstance(v, (int, float)) and unit == "B":
        from harness.base.ui import human_bytes

        return human_bytes(v)
    elif isinstance(v, int):
        text = str(v)
    elif isinstance(v, float):
        text = number(v)
    elif v is None:
        text = "n/a"
    elif isinstance(v, (list, tuple)):
        if len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            text = f"{shown(v[0])}-{shown(v[1])}"
        else:
            text = ", ".join(shown(x) for x in v)
    elif isinstance(v, dict):
        text = ", ".join(f"{k} {shown(x)}" for k, x in v.items())
    else:
        text = str(v)
    return f"{text} {unit}" if unit and not isinstance(v, (bool, str)) else text


class _Shown:
    def __init__(self, value, unit):
        self.value, self.unit = value, unit

    def __format__(self, spec: str) -> str:
        return format(self.value, spec) if spec else shown(self.value, self.unit)


class _FigureFormatter(string.Formatter):
    """``{key}``, ``{key.sub}`` (into dicts) over one figure; ``{value}`` carries the figure's unit."""

    def get_field(self, field_name, args, kwargs):
        head, *rest = field_name.split(".")
        if head not in kwargs:
            raise KeyError(head)
        obj = kwargs[head]
        for part in rest:
            if not isinstance(obj, dict) or part not in obj:
                raise KeyError(field_name)
            obj = obj[part]
        return _Shown(obj, _unit(field_name, kwargs)), field_name


_SUFFIX_UNITS = (("_bytes", "B"), ("_ms", "ms"), ("_gib", "GiB"), ("_seconds", "s"))


def _unit(field_name: str, figure: dict) -> str | None:
    """``value`` carries the figure's unit; other keys name theirs by suffix (``result_bytes``, ``baseline_ms``)."""
    if field_name == "value":
        return figure.get("unit")
    last = field_name.rsplit(".", 1)[-1]
    return next((unit for suffix, unit in _SUFFIX_UNITS if last.endswith(suffix) or last == suffix[1:]), None)


_FORMATTER = _FigureFormatter()


@dataclass
class EvidenceRowResult:
    row: EvidenceRow
    label: str
    result: str
    host: str | None
    build: str
    receipt: receipts.Receipt | None
    bench: dict | None = None  # the benchmark file's header, for a row read from one


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def evaluate(row: EvidenceRow, rec: receipts.Receipt | None, pool: list[dict] | None = None
             ) -> tuple[dict | None, str | None]:
    """The placeholders of ``row`` from ``rec`` (the picked figure's keys plus counts), or a problem. ``pool``: the
    figures of a benchmark file instead of a receipt's."""
    if pool is not None:
        pass
    elif rec is None:
        return None, "no receipt"
    elif row.figure == VERDICT_FIGURE:  # the sentinel the run ended with, its details as the figure's keys
        last = rec.sentinels[-1] if rec.sentinels else None
        pool = [] if last is None else [{**rec.sentinel_details.get(last, {}), "name": VERDICT_FIGURE, "value": last}]
    else:
        pool = [f.data for f in rec.figures]
    figs = [f for f in pool if f.get("name") == row.figure and all(f.get(k) == v for k, v in row.where)]
    if not figs:
        where = ", ".join(f"{k} = {v!r}" for k, v in row.where)
        return None, f"no figure '{row.figure}'" + (f" with {where}" if where else "") + \
            f" in {rec.dir.name if rec is not None else row.bench}"
    if row.pick != "first":
        values = [f.get("value") for f in figs]
        if not all(_numeric(v) for v in values):
            return None, f"pick = '{row.pick}' needs numeric values of '{row.figure}'"
        picked = (max if row.pick == "max" else min)(figs, key=lambda f: f["value"])
    else:
        picked = figs[0]
    fields = dict(picked)
    name_key = next((k for k in ("tensor", "case", "param", "name") if k in picked), "name")
    fields.update(
        count=len(figs),
        n_ok=sum(f.get("ok") is True for f in figs),
        n_finite=sum(f.get("finite") is True for f in figs),
        n_bitwise=sum(f.get("bitwise_equal") is True for f in figs),
        n_true=sum(f.get("value") is True for f in figs),
        not_bitwise=", ".join(f"{f.get(name_key)} {shown(f.get('value'))}" for f in figs
                              if f.get("bitwise_equal") is False) or "none",
    )
    return fields, None


# An evidence row's figure name that reads the run's last sentinel instead of a FIGURE line: its details
# (what the reproducer observed, e.g. the error text) become the placeholders, its name ``{value}``.
VERDICT_FIGURE = "@verdict"


def resolve_row(row: EvidenceRow, rec: receipts.Receipt | None, pool: list[dict] | None = None
                ) -> tuple[str, str, str | None]:
    """(label, result, problem) of an evidence or performance row against ``rec`` (or a benchmark file's figures,
    ``pool``); result "(no result)" on a problem."""
    fields, problem = evaluate(row, rec, pool)
    label, result = row.label, "(no result)"
    if fields is not None:
        try:
            label = _FORMATTER.format(row.label, **fields)
            result = _FORMATTER.format(row.show, **fields)
        except (KeyError, ValueError, TypeError) as exc:
            problem = f"placeholder {exc} not in the figure (keys: {', '.join(sorted(fields))})"
    return label, result, problem


def bench_figures(root: Path, manifest: pins.Manifest, pack: Pack, base_name: str, row: EvidenceRow
                  ) -> tuple[list[dict], dict, str | None]:
    """(figures, the file's header, problem) of a benchmark file an evidence row reads (``bench``). The file must
    describe the filing base's commit and today's series for it (its ``series_sha256``, over every patch file).
    Files of ``tools/kernel_registers.py`` give one figure ``registers`` per kernel and architecture: ``value``
    (configs whose registers, stack and spills are the same before and after the change), ``configs``,
    ``trap_only`` (configs that only trap there), and the ranges ``reg``, ``spill_stores``, ``spill_loads``
    (bytes) over the configs that compile."""
    import hashlib
    import json


    path = root / row.bench
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [], {}, f"{row.bench}: cannot read: {exc}"
    base = manifest.bases.get(base_name)
    commit = getattr(base, "commit", None)
    if commit and data.get("base_commit") != commit:
        return [], data, f"{row.bench} was measured at {str(data.get('base_commit'))[:10]}, not at the filing base"
    series_dir = root / "patches" / pack.target / pack.id
    series_dir = series_dir / base_name if (series_dir / base_name).is_dir() else series_dir
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(series_dir.glob("*.patch")))).hexdigest()
    if digest != data.get("series_sha256"):
        return [], data, f"{row.bench} measured another series than today's for {base_name}"
    if data.get("tool") != "tools/kernel_registers.py":
        return [], data, f"{row.bench}: no figures are read from files of {data.get('tool')!r}"
    groups: dict[tuple, dict[str, dict]] = {}
    for r in data.get("rows", []):
        key = (r["kernel"], r.get("shape"), r["arch"], json.dumps(r.get("config"), sort_keys=True))
        groups.setdefault(key, {})[r["build"]] = r
    per: dict[tuple, list[tuple[dict, dict]]] = {}
    for (kernel, shape, arch, _), builds in groups.items():
        if "base" in builds and "patched" in builds:
            per.setdefault((kernel, shape, arch), []).append((builds["base"], builds["patched"]))
    figures = []
    measured = ("reg", "stack", "spill_stores", "spill_loads", "trap_only")
    for (kernel, shape, arch), pairs in per.items():
        compiled = [b for b, _ in pairs if not b.get("trap_only")]

        def span(key: str, rows: list[dict] = compiled) -> list[int] | None:
            values = [r[key] for r in rows if isinstance(r.get(key), int)]
            return [min(values), max(values)] if values else None

        figures.append({"name": "registers", "kernel": kernel, "shape": shape, "arch": arch,
                        "value": sum(all(b.get(k) == p.get(k) for k in measured) for b, p in pairs),
                        "configs": len(pairs), "trap_only": sum(bool(b.get("trap_only")) for b, _ in pairs),
                        "reg": span("reg"), "spill_stores": span("spill_stores"), "spill_loads": span("spill_loads")})
    return figures, data, None


def host_key(rec: receipts.Receipt) -> tuple:
    h = rec.host or receipts.Host({})
    return (h.gpu, h.compute_capability, h.driver, h.torch_cuda if h.gpu else None, h.torch, h.triton,
            h.host_python, _platform(h))


def _platform(h: receipts.Host) -> str:
    plat = h.platform or ""
    system = plat.split("-", 1)[0] or "?"
    machine = next((p for p in ("x86_64", "aarch64", "arm64") if p in plat), "")
    glibc = re.search(r"glibc(\d+\.\d+)", plat)
    return " ".join(x for x in (system, machine, f"(glibc {glibc.group(1)})" if glibc else "") if x)


def _host_short(rec: receipts.Receipt) -> str:
    gpu = rec.host.gpu if rec.host is not None else None
    return re.sub(r"^NVIDIA\s+", "", gpu) if gpu else "CPU"


def _host_long(rec: receipts.Receipt) -> str:
    h = rec.host or receipts.Host({})
    parts = []
    if h.gpu:
        extra = ", ".join(x for x in (f"compute capability {h.compute_capability}" if h.compute_capability
                                      else "", f"driver {h.driver}" if h.driver else "") if x)
        parts.append(f"{h.gpu}" + (f" ({extra})" if extra else ""))
        if h.torch_cuda:
            parts.append(f"CUDA {h.torch_cuda}")
    else:
        parts.append(f"no GPU, {_platform(h)}")
    for value, name in ((h.torch, "torch"), (h.triton, "triton"), (h.host_python, "Python")):
        if value:
            parts.append(f"{name} {value}")
    return ", ".join(parts)


@dataclass
class Evidence:
    text: str
    problems: list[str] = field(default_factory=list)
    receipts: list[receipts.Receipt] = field(default_factory=list)
    typed: list[str] = field(default_factory=list)  # figures typed into a row's ``show`` that its receipt lacks


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])", re.I)


def typed_figures(row: EvidenceRow) -> list[str]:
    """The numbers written into ``row.show`` itself (outside its placeholders): figures typed by hand. Every one
    counts, also one that a field of today's receipt happens to equal: the next receipt would not change it, so
    the body would go on saying it whatever was measured."""
    literal = "".join(text for text, *_ in string.Formatter().parse(row.show))
    return [m.group(0) for m in _NUMBER.finditer(literal)]


def evidence(root: Path, manifest: pins.Manifest, pack: Pack, change_name: str, dep_subjects: list[str]) -> Evidence:
    if not pack.evidence:
        return Evidence("", [f"no evidence declared ([[evidence]] in {pack.declared_in})"])
    results: list[EvidenceRowResult] = []
    problems: list[str] = []
    typed: list[str] = []
    used: dict[Path, receipts.Receipt] = {}
    latest = receipts.latest_by_lane(root, pack.target, pack.id)
    base_name = pack.filing_base or manifest.filing_base or pack.base or manifest.default_base
    for i, row in enumerate(pack.evidence, 1):
        if row.bench:  # a benchmark file, measured on the filing base without a lane
            pool, data, problem = bench_figures(root, manifest, pack, base_name, row)
            label, result, resolve_problem = resolve_row(row, None, pool) if problem is None else \
                (row.label, "(no result)", problem)
            if resolve_problem or problem:
                problems.append(f"evidence row {i} ({row.bench}): {resolve_problem or problem}")
            typed += [f"evidence row {i} ({row.bench}): '{n}' is typed into its show: name the figure that holds it "
                      "as a {placeholder}" for n in typed_figures(row)]
            version = getattr(manifest.bases.get(base_name), "version", base_name)
            results.append(EvidenceRowResult(row, label, result, None, f"{version} and {version} + {change_name}",
                                             None, bench=data))
            continue
        rec = latest.get(row.lane)
        label, result, problem = resolve_row(row, rec)
        if problem:
            problems.append(f"evidence row {i} ({row.lane}, {row.figure}): {problem}")
        typed += [f"evidence row {i} ({row.lane}, {row.figure}): '{n}' is typed into its show: name the figure "
                  "that holds it as a {placeholder}" for n in typed_figures(row)]
        build = "?"
        if rec is not None:
            if rec.path is not None:
                used[rec.path] = rec
            patched = rec.patched if row.build is None else row.build == "change"
            build = str(rec.base.version or rec.base.name or "?") + (f" + {change_name}" if patched else "")
        results.append(EvidenceRowResult(row, label, result, None, build, rec))
    suite_row = _suite_row(pack, latest, change_name, root, manifest, problems)
    if suite_row is not None:
        results.append(suite_row)
        if suite_row.receipt is not None and suite_row.receipt.path is not None:
            used[suite_row.receipt.path] = suite_row.receipt
    # one short name per distinct host, numbered when two distinct hosts share a GPU name
    names: dict[tuple, str] = {}
    for r in results:
        if r.receipt is None:
            continue
        key = host_key(r.receipt)
        if key not in names:
            short = _host_short(r.receipt)
            taken = [n for n in names.values() if n == short or n.startswith(short + " (")]
            names[key] = short if not taken else f"{short} ({len(taken) + 1})"
        r.host = names[key]
    for r in results:
        if r.bench is not None:
            r.host = f"CPU, ptxas (triton {r.bench.get('triton')})" if r.bench.get("tool") == \
                "tools/kernel_registers.py" else "CPU"
    lines = ["| what | build | result | host |", "| --- | --- | --- | --- |"]
    for r in results:
        cells = (r.label, r.build, r.result, r.host or "-")
        lines.append("| " + " | ".join(table_cell(c) for c in cells) + " |")
    notes = []
    hosts = {}
    for r in results:
        if r.receipt is not None and r.host not in hosts:
            hosts[r.host] = _host_long(r.receipt)
    if hosts:
        notes.append("Hosts: " + "; ".join(f"**{name}**: {desc}" for name, desc in hosts.items()) + ".")
    bases: dict[str, str] = {}
    runtimes: dict[tuple[str, ...], None] = {}
    for r in results:
        if r.receipt is None:
            continue
        b = r.receipt.base
        version = str(b.version or b.name)
        if b.artifact:
            bases.setdefault(version, f"`{version}` is {manifest.distribution} {version} as published "
                                      f"(`{b.artifact}`)")
        elif b.commit:
            bases.setdefault(version, f"`{version}` is {repo_slug(manifest.repo) or manifest.repo} at "
                                      f"{b.commit[:10]}")
        reqs = r.receipt.runtime_requires
        if reqs:
            runtimes.setdefault(tuple(reqs), None)
    if bases:
        after = (", after " + ", ".join(dep_subjects)) if dep_subjects else ""
        notes.append("Builds: " + "; ".join(bases.values()) + f"; `+ {change_name}` is that build with "
                     + ("this PR" if change_name == "this PR" else "the change below") + " applied" + after + ".")
    extras = sorted({b for r in results for lane in pack.lanes if lane.name == r.row.lane for b in lane.extra_builds
                     if f"{b[0]}@{b[1]}" not in lane.from_ci or _ran_with(root, r.receipt, b)})
    if extras:
        described = []
        for target, extra in extras:
            other = pins.load_manifest(root, target)
            described.append(f"{other.distribution} {other.base(extra).version} as published")
        notes.append("Also on the path: " + ", ".join(described) + ".")
    shown: list[set[str]] = []
    for reqs in sorted(runtimes, key=len):  # smallest first: a set that extends one already shown names its extras
        under = next((seen for seen in shown if seen <= set(reqs)), None)
        if under is None:
            notes.append("Installed with it: " + ", ".join(f"`{r}`" for r in reqs) + ".")
        else:
            notes.append("Some runs also installed: " + ", ".join(f"`{r}`" for r in reqs if r not in under) + ".")
        shown.append(set(reqs))
    # hosts, builds and installed packages are looked up, not read: folded under the table
    text = "\n".join(lines)
    if pack.evidence_note:
        text += "\n\n" + pack.evidence_note.strip()
    if notes:
        text += ("\n\n<details><summary>Hosts and builds</summary>\n\n" + "\n\n".join(notes)
                 + "\n\n</details>")
    return Evidence(text.strip(), problems, list(used.values()), typed)


def _ran_with(root: Path, receipt: receipts.Receipt | None, build: tuple[str, str]) -> bool:
    """Whether a suite receipt's recorded environment holds the release of ``build`` (TARGET, BASE): a build the
    upstream CI's environment adds is named only once a receipt shows it was there."""
    env = ((receipt.sentinel_details.get(suite.RECORDED) or {}).get(suite_env.ENV_KEY)
           if receipt is not None else None)
    if not isinstance(env, dict):
        return False
    other = pins.load_manifest(root, build[0])
    return suite_env.packages(env).get(other.distribution) == other.base(build[1]).version


def _suite_row(pack: Pack, latest: dict[str, receipts.Receipt], change_name: str, root: Path | None = None,
               manifest: pins.Manifest | None = None, problems: list[str] | None = None) -> EvidenceRowResult | None:
    """The row stating the upstream suite's result at the filing base (``pack.toml's [[suites]]``), computed from
    the suite lanes' latest receipts, per reason (``suite_reasons_text``)."""
    chosen = [lane for lane in pack.lanes if lane.suite and lane.base == pack.filing_base]
    if not chosen:
        return None
    details = {lane.name: latest[lane.name].sentinel_details.get(suite.RECORDED) for lane in chosen
               if lane.name in latest}
    if not any(details.values()):  # never run: no row (readiness says why, reason 'suite')
        return None
    merged = suite.merge([(lane.name, lane.patched) for lane in chosen], details)
    comparison = suite_reasons.explain_from_logs(suite.compare(merged.base, merged.patched, {}, claims_fix=False,
                                                               not_here=merged.not_here),
                                                 receipts.suite_logs((lane.patched, latest[lane.name])
                                                                     for lane in chosen if lane.name in latest))
    files = sorted({node.split("::", 1)[0] for node in chosen[0].upstream_tests})
    shown = next((latest[lane.name] for lane in chosen if lane.patched and lane.name in latest), None)
    row = EvidenceRow(lane=chosen[0].name, figure="@suite", label="", show="")
    base = str(shown.base.version or shown.base.name) if shown is not None else pack.filing_base
    envs = [(receipts.display_path(path, root) if (path := latest[lane.name].path) is not None and root
             else lane.name, lane.patched, (details.get(lane.name) or {}).get(suite_env.ENV_KEY))
            for lane in chosen if lane.name in latest]
    try:
        suite_env.check_pairing(envs, ignore=(manifest.distribution,) if manifest else ())
    except suite_env.EnvironmentMismatch as exc:
        if problems is not None:
            problems.append(f"suite row: {exc}")
    wanted = suite_env.ci_pins(manifest, pack.filing_base, lambda t: pins.load_manifest(root, t)) \
        if manifest is not None and root is not None else ()
    base_receipt = next((latest[lane.name] for lane in chosen if not lane.patched and lane.name in latest), None)
    base_path = base_receipt.path if base_receipt is not None else None
    return EvidenceRowResult(row, f"the upstream's own tests of the touched code ({len(files)} "
                                  f"{'file' if len(files) == 1 else 'files'}), every case with and without the change",
                             suite_reasons_text(merged, comparison, envs[0][2] if envs else None, wanted,
                                                receipts.display_path(base_path, root)
                                                if base_path is not None and root is not None else None),
                             None, f"{base} and {base} + {change_name}", shown)


def suite_reasons_text(merged: suite.Merged, comparison: suite.Comparison, env: dict | None, wanted: tuple[str, ...],
                       shown_by: str | None) -> str:
    """The suite row's result, per reason: ran and passed on both; fixed by the change; failing only with it;
    not run here (how many, why); failing on both. Cases failing on both are called broken at the base only where
    the run's environment is the upstream CI's (``wanted``, its pins: ``suite_env.ci_gaps`` finds none), and the
    row names the receipt that shows it; elsewhere the row says which of the CI's pins the run lacked."""
    counts = comparison.counts()
    total = merged.collected if merged.collected is not None else "?"
    passed = counts.get("ok", 0) + counts.get("control", 0)
    parts = [f"{merged.ran + len(comparison.not_here)} of {total} cases: {passed} ran and passed on both"]
    if counts.get("fixed"):
        parts.append(f"{counts['fixed']} fixed by the change")
    parts.append(f"{len(comparison.patched_only)} fail only with the change")
    if merged.skipped:
        parts.append(f"{merged.skipped} skipped by the tests themselves")
    here = comparison.not_here_reasons()
    if here:
        parts.append(f"{sum(here.values())} not run here ("
                     + "; ".join(f"{n}: {why}" for why, n in sorted(here.items(), key=lambda kv: (-kv[1], kv[0])))
                     + ")")
    both = counts.get("base-only failure", 0) + counts.get("fails on both", 0)
    if both:
        groups = suite_reasons.failing_without_change(comparison)
        gaps = suite_env.ci_gaps(env, wanted) if wanted else ["the upstream's CI environment is not recorded"]
        if not gaps and env is not None:
            where = (f"{env.get('ranks')} of its {env.get('upstream_ranks')} ranks"
                     + (f", {env['gpu_arch']}" if env.get("gpu_arch") else ""))
            parts.append(f"{both} fail on both in the upstream's own environment ({where}; shown by "
                         f"{shown_by or 'the base receipt'}), broken at the base: {groups}")
        else:
            parts.append(f"{both} fail on both here, in an environment that is not the upstream CI's ("
                         + "; ".join(gaps[:3]) + (f"; {len(gaps) - 3} more" if len(gaps) > 3 else "")
                         + f"), so not shown to fail in the upstream's CI: {groups}")
    return "; ".join(parts)


def table_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table (pipes escaped, on one line)."""
    return str(text).replace("|", "\\|").replace("\n", " ")



# ---------------------------------------------------------------------------------------------- the domain

def _axis_span(values: list) -> str:
    """An axis's values, in order: 16, 32, 64, 128."""
    numbers = sorted({v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)})
    others = sorted({str(v) for v in values if not isinstance(v, (int, float)) or isinstance(v, bool)})
    return ", ".join([shown(v) for v in numbers] + others)


def domain_text(root: Path, pack: Pack, base_name: str, change_name: str) -> tuple[str, list[str]]:
    """The paragraph that states the domain ``pack.toml's [domain]`` declares, read from the latest receipt of the
    pack's patched domain lane on ``base_name``; ("", problems) when none shows it (no such lane, no passing
    receipt, one that swept another declaration): the body then claims nothing about the domain."""
    domain = pack.domain
    if domain is None:
        return "", []
    lanes = [lane for lane in pack.lanes if lane.domain and lane.patched and lane.base == base_name
             and not domain_model.is_probe(lane.args)]
    if not lanes:
        return "", [f"domain: [domain] of {pack.declared_in} is declared but no patched domain lane runs on "
                    f"{base_name}"]
    latest = receipts.latest_by_lane(root, pack.target, pack.id)
    lane = lanes[0]
    rec = latest.get(lane.name)
    if rec is None or rec.verdict != receipts.Verdict.PASS:
        why = "has no receipt" if rec is None else f"ended {rec.verdict} in its latest receipt"
        return "", [f"domain: lane {lane.name} {why}; the body does not claim the domain"]
    if domain_model.declared(rec.reproducer.args) != domain.declaration():
        return "", [f"domain: lane {lane.name}'s latest receipt swept another declaration than today's "
                    f"[domain] of {pack.declared_in}; the body does not claim the domain"]
    points = [f.data for f in rec.figures if f.data.get("name") == "domain_point"]
    summary = next((f.data for f in rec.figures if f.data.get("name") == "domain_summary"), {})
    admitted = [p for p in points if p.get("value") == "matched"]
    declined = [p for p in points if p.get("value") == "declined"]
    newly = [p for p in admitted if p.get("base") == "declined"]
    device = summary.get("device") or "?"
    gpu = re.sub(r"^NVIDIA\s+", "", str(summary.get("gpu"))) if summary.get("gpu") else "CPU"
    spans = "; ".join(f"{axis} {_axis_span([p['point'][axis] for p in admitted])}" for axis in domain.axes
                      if admitted)
    errors = [p["max_error"] for p in admitted if isinstance(p.get("max_error"), (int, float))]
    tols = [p["tol"] for p in admitted if isinstance(p.get("tol"), (int, float))]
    groups: dict[str, list[dict]] = {}
    for p in declined:
        groups.setdefault(p.get("note") or "outside what the code takes", []).append(p)

    def named(p: dict) -> str:
        return "(" + ", ".join(shown(p["point"][axis]) for axis in domain.axes) + ")"

    # a table: a maintainer reads it point by point, and it is not prose (the body's word budget)
    head = (f"What {change_name} admits ({', '.join(domain.axes)}; {len(points)} points on {gpu}, {device}, "
            "each in a process of its own" + (f"; {domain.method}" if domain.method else "") + ")")
    rows = [f"| {table_cell(head)} | points | result |", "| --- | --- | --- |"]
    if admitted:
        err = ("" if not errors or not tols else f"largest error {shown(max(errors))} (tolerance {shown(tols[0])})"
               if len(set(tols)) == 1 else f"largest error {shown(max(errors))}, each within its tolerance")
        rows.append(f"| admitted: forward and backward against a float64 reference | {len(admitted)}: {spans} | "
                    f"{table_cell(err) or 'matched'}"
                    + (f"; {len(newly)} of them declined without {change_name}"
                       if any(p.get("base") for p in admitted) else "") + " |")
    probed, problems = _probed(root, pack, base_name, latest)
    for note, group in groups.items():
        before = sum(1 for p in group if p.get("base") in ("declined", None))
        beyond = [probed[key] for p in group if (key := _key(p["point"])) in probed]
        rows.append(f"| declined, as without {change_name}: {table_cell(note)} | {len(group)}: "
                    f"{', '.join(named(p) for p in group)} | declined ({before} of {len(group)} declined without "
                    f"{change_name} too)" + (f"; {_beyond(beyond)}" if beyond else "") + " |")
    rows.append(f"| devices | shown on {', '.join(domain.devices)} | not shown on "
                f"{', '.join(domain.not_shown) or 'any other'} |")
    return "\n".join(rows), problems


def _key(point: dict) -> str:
    return ",".join(f"{k}={point[k]}" for k in sorted(point))


def _beyond(outcomes: list[str]) -> str:
    """What the probe lane saw at a group's points with the bound lifted: "without the bound: 2 crashed"."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    words = {"crashed": "failed to run", "mismatch": "missed the reference", "declined": "declined by a rule kept",
             "matched": "ran and matched"}
    return "with the bound lifted: " + ", ".join(f"{n} {words.get(k, k)}" for k, n in sorted(counts.items()))


def _probed(root: Path, pack: Pack, base_name: str, latest: dict) -> tuple[dict[str, str], list[str]]:
    """The outcome of each bound decline in the latest passing receipt of the pack's probe lane on ``base_name``
    ({point key: outcome}); with the problems that keep it out of the body."""
    domain = pack.domain
    if domain is None or not domain.bound_declines:
        return {}, []
    lane = next((ln for ln in pack.lanes if ln.domain and ln.patched and ln.base == base_name
                 and domain_model.is_probe(ln.args)), None)
    if lane is None:
        return {}, [f"domain: {len(domain.bound_declines)} bound decline(s) and no probe lane "
                    f"({domain_model.PROBE_FLAG}) on {base_name}; the body does not say what happens beyond them"]
    rec = latest.get(lane.name)
    if rec is None or rec.verdict != receipts.Verdict.PASS:
        why = "no receipt" if rec is None else f"its latest receipt is {rec.verdict}, not pass"
        return {}, [f"domain: probe lane {lane.name}: {why}; the body does not say what happens beyond the bound"]
    if domain_model.declared(rec.reproducer.args) != domain.declaration():
        return {}, [f"domain: probe lane {lane.name}'s latest receipt probed another declaration than today's"]
    return {_key(f.data["point"]): str(f.data.get("value")) for f in rec.figures
            if f.data.get("name") == "domain_probe" and isinstance(f.data.get("point"), dict)}, []
