"""``harness new``: a new pack's first files, as quilt's ``new`` or ``gbp pq`` start a patch.

Three things, all or none: the ``[packs.NN]`` entry of tracking.toml (state planned; a bug lane and, for
kinds that carry a patch, a fix lane, on the base and on the target's filing base when that is another one;
evidence rows that read the reproducer's example figure from the lanes on the filing base), the pack's empty
series directory
``patches/<target>/<NN>/``, and a reproducer ``repros/<target>/packNN_<slug>.py`` written from the kit
(``repros/_lane.py``: ``parser``, ``start``, ``observed``) whose check is left for its author; until
it is written the reproducer stops with an error, so its lanes crash (exit 7) instead of passing.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from harness.errors import UsageError, WriteError
from harness.lane.tracking import KINDS, PACK_ID, SCHEMA, UNPATCHED_KINDS, Tracking, layout, normalize_id, shown_id
from harness.upstream import pins

REPRODUCER = '''\
"""Pack {pid}: {title}

Question asked on every lane: TODO (what the unpatched {target} gets wrong, and what the patched
build must do instead; how "right" is judged: a reference and a control, never a guessed tolerance,
see repros/_numerics.py).

    python {name} --unpatched [--lane NAME]
"""

from __future__ import annotations

from _lane import figure, observed, parser, start


def main() -> None:
    args = parser(__doc__).parse_args()
    start(args, {distribution!r}, {module!r})  # prints the host stamp: the first line of every lane
    bad = check()
    figure("{figure}", 0.0)  # each measured number, before the verdict; it lands in the receipt
    observed(bad)  # BUG_REPRODUCED / BUG_ABSENT unpatched, FIX_VALIDATED / FIX_FAILED patched


def check() -> bool:
    """True when the bug shows in the build this process imports."""
    raise NotImplementedError("pack {pid}: write the check of {name} (until then its lanes crash, exit 7)")


if __name__ == "__main__":
    main()
'''


EXAMPLE_FIGURE = "example"  # the figure the kit's reproducer prints and the evidence rows read


@dataclass(frozen=True)
class Scaffold:
    pack: str
    reproducer: Path
    series_dir: Path
    lanes: tuple[str, ...]
    filing_base: str = ""


def slug(title: str) -> str:
    words = re.findall(r"[a-z0-9]+", title.lower())
    return "_".join(words[:5]) or "repro"


def new_pack(tracking: Tracking, pack: str, target: str, title: str, kind: str = "pr", base: str | None = None,
             requires: str = "cuda") -> Scaffold:
    """Write the pack's tracking entry, its series directory with its ``pack.toml`` (its lanes and evidence rows)
    and its reproducer; nothing is left if a step fails."""
    root = tracking.root
    pid = normalize_id(pack)
    if not PACK_ID.match(pid):
        raise UsageError(f"pack id {shown_id(pack)!r} is not a pack id: two digits (e.g. 24)")
    if pid in tracking.packs:
        raise UsageError(f"pack {pid} is already in {tracking.path.name} ({tracking.packs[pid].title})")
    if kind not in KINDS:
        raise UsageError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    manifest = pins.load_manifest(root, target)
    base = manifest.base(base).name  # the default base, or a named one that must exist (ConfigError)
    series_dir = root / "patches" / target / pid
    if series_dir.exists():
        raise UsageError(f"{series_dir.relative_to(root)}/ exists already: a series without a tracking entry "
                         "(see 'harness absorbed', untracked drift)")
    name = f"pack{pid}_{slug(title)}.py"
    reproducer = root / "repros" / target / name
    if reproducer.exists():
        raise UsageError(f"{reproducer.relative_to(root)} exists already")
    # Lanes on the base, and on the filing base when it is another one (upstream main or dev): readiness asks for
    # passing lanes where the filing is made, and the filing body's evidence is read from them.
    filing = manifest.filing_base or base
    lanes = []
    for on in dict.fromkeys((base, filing)):
        lanes.append(("bug-" + on, on, False, "BUG_REPRODUCED"))
        if kind not in UNPATCHED_KINDS:
            lanes.append(("fix-" + on, on, True, "FIX_VALIDATED"))
    # the evidence rows of the filing body: the kit's example figure, from the lanes on the filing base
    evidence = [(lane, "the example figure of check(): TODO say what it measures", "TODO {value}")
                for lane, on, _, _ in lanes if on == filing]

    def change(doc) -> None:  # tracking.toml: where the pack stands
        table = tomlkit.table()
        for key, value in (("title", title), ("target", target), ("kind", kind), ("state", "planned"),
                           ("depends_on", [])):
            table[key] = value
        doc["packs"][pid] = table

    # patches/<target>/<NN>/pack.toml: what it declares, beside its series (docs/layout.md)
    declared = tomlkit.document()
    declared.add(tomlkit.comment(f"Pack {pid}: what it declares (docs/layout.md); where it stands is in tracking.toml"))
    for key, value in (("schema", SCHEMA), ("files", []), ("summary", "TODO: what breaks, for whom, and why"),
                       ("requires", requires), ("base", base), ("reproducer", str(reproducer.relative_to(root)))):
        declared[key] = value
    rows = tomlkit.aot()
    for lane, label, show in evidence:
        row = tomlkit.table()
        row.update({"lane": lane, "figure": EXAMPLE_FIGURE, "label": label, "show": show})
        rows.append(row)
    declared["evidence"] = rows
    entries = tomlkit.aot()
    for lane, on, patched, expect in lanes:
        entry = tomlkit.table()
        entry.update({"name": lane, "base": on, "patched": patched, "expect": expect})
        entries.append(entry)
    declared["lanes"] = entries

    created: list[Path] = []
    try:
        try:
            reproducer.parent.mkdir(parents=True, exist_ok=True)
            reproducer.write_text(REPRODUCER.format(pid=pid, title=_in_docstring(title), target=target, name=name,
                                                    distribution=manifest.distribution, figure=EXAMPLE_FIGURE,
                                                    module=manifest.import_names[0] if manifest.import_names else ""))
            created.append(reproducer)
            series_dir.mkdir(parents=True)
            created.append(series_dir)
            (series_dir / layout.PACK_FILE).write_text(tomlkit.dumps(declared), encoding="utf-8")
        except OSError as exc:  # a read-only checkout, a full disk, no permission
            raise WriteError.of(exc, f"pack {pid}'s first files", reproducer) from None
        _check_loads(tracking, change)  # the entry must load before tracking.toml is touched
        tracking.edit(change)
        tracking.save()  # atomic: the file is whole, old or new
    except BaseException:
        for path in reversed(created):
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        raise
    return Scaffold(pid, reproducer, series_dir, tuple(lane for lane, _, _, _ in lanes), filing)


def _in_docstring(text: str) -> str:
    """``text`` escaped to stay inside the reproducer's triple-quoted docstring (a ``\"""`` in a title ends it)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _check_loads(tracking: Tracking, change) -> None:
    """Load tracking.toml with ``change`` made, from a scratch copy beside it (ConfigError if it does not)."""
    doc = tomlkit.parse(tracking.path.read_text(encoding="utf-8"))
    change(doc)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix=".new-", dir=tracking.path.parent,
                                     encoding="utf-8", delete=False) as fh:
        fh.write(tomlkit.dumps(doc))
    try:
        Tracking.load(tracking.root, Path(fh.name))
    finally:
        Path(fh.name).unlink(missing_ok=True)


def default_requires(tracking: Tracking, target: str) -> tuple[str, str]:
    """What a new pack of ``target``'s lanes require when 'new' is not told, and why: ``cpu`` where a pack of the
    target already has a lane that requires cpu (its builds import and run on a host without a GPU), so the
    scaffolded lanes run on a CPU host instead of being skipped there; else ``cuda``."""
    for pack in tracking.packs.values():
        if pack.target == target:
            for lane in pack.lanes:
                if pack.lane_requires(lane) == "cpu":
                    return "cpu", f"pack {pack.id}'s lane {lane.name} runs {target} on a CPU host"
    return "cuda", f"no lane of {target} runs on a CPU host yet"
