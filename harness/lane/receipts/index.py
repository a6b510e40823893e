"""Finding receipts: every run directory, the receipts of a target or pack, each lane's latest, and the one line
per pack tracking.toml's generated ``[verdicts]`` keeps of them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harness.errors import ConfigError
from harness.lane.receipts import withdrawn
from harness.lane.receipts.model import Receipt, load, misplaced
from harness.lane.receipts.records import LOG, utc_now


def receipts_root(root: Path) -> Path:
    return root / "receipts"


def run_dirs(root: Path) -> list[Path]:
    """Every receipt directory (``receipts/<target>/<pack>/<run>/``), whatever it holds; scratch dirs excepted.

    A target or pack directory that cannot be listed is returned itself, in place of the runs it hides, so
    that ``check_dir`` reports it as unreadable instead of it being skipped in silence.
    """
    found: list[Path] = []

    def walk(directory: Path, depth: int) -> None:
        try:
            children = sorted(d for d in directory.iterdir() if d.is_dir() and not d.name.startswith("."))
        except OSError:
            found.append(directory)
            return
        for child in children:
            if depth == 2:
                found.append(child)
            else:
                walk(child, depth + 1)

    base = receipts_root(root)
    if base.is_dir():
        walk(base, 0)
    return sorted(found)


def find(root: Path, target: str | None = None, pack: str | None = None,
         receipts_dir: Path | None = None) -> list[Receipt]:
    """All receipts (optionally of one target/pack), oldest first by start time; under ``receipts_dir`` when
    given (a run's ``--receipts-dir``), else the repository's ``receipts/``."""
    return _by_start(_evidence(receipts_dir or receipts_root(root), target, pack, tolerant=False))


def _evidence(base: Path, target: str | None, pack: str | None, tolerant: bool) -> Iterator[Receipt]:
    """The receipts under ``base`` (of a target or pack) that can be anybody's evidence: withdrawn receipts
    (receipts/withdrawn.toml) are not, nor is a receipt copied under another pack's or lane's directory
    (receipts verify names both). ``tolerant``: a receipt that cannot be read is passed over, not raised."""
    gone = withdrawn.names(base)
    for path in sorted(base.glob(f"{target or '*'}/{pack or '*'}/*/receipt.json")):
        if path.parent.relative_to(base).as_posix() in gone:
            continue
        try:
            rec = load(path)
        except (ConfigError, OSError):
            if not tolerant:
                raise
            continue
        if misplaced(rec.dir, rec.target, rec.pack, rec.lane) is None:
            yield rec


_NEVER = datetime.min.replace(tzinfo=UTC)
# how far past this host's clock a receipt's start may lie (another host's clock) and still count as run
FUTURE_SKEW = timedelta(minutes=10)


def _by_start(found: Iterable[Receipt]) -> list[Receipt]:
    return sorted(found, key=lambda r: (r.started_at or _NEVER, str(r.path)))


def dated_in_future(receipt: Receipt, now: datetime | None = None) -> bool:
    """Whether the receipt says it started after now (beyond ``FUTURE_SKEW``) or gives no time that parses."""
    when = receipt.started_at
    return when is None or when > (now or utc_now()) + FUTURE_SKEW


def future_dated(root: Path, target: str | None = None, pack: str | None = None) -> list[Receipt]:
    """The receipts (of a target or pack) that ``latest_per_lane`` leaves out for starting after now: a host whose
    clock ran ahead wrote them. Commands that read receipts say so rather than drop them without a word."""
    now = utc_now()  # an unreadable receipt is receipts verify's to report, not this warning's
    return [r for r in _evidence(receipts_root(root), target, pack, tolerant=True) if dated_in_future(r, now)]


def latest_per_lane(found: Iterable[Receipt]) -> dict[str, Receipt]:
    """The one rule of "latest", for ``status``, ``list`` (through tracking.toml), ``receipts show``, the suite
    verdict and tracking.toml alike: per lane, the receipt whose run started last by its parsed UTC time (ties:
    the later directory), among those not dated after now. A receipt dated in the future never counts: a clock or
    a hand that wrote 2099 would otherwise keep it latest forever."""
    now = utc_now()
    return {r.lane: r for r in _by_start(r for r in found if not dated_in_future(r, now))}  # the last one stays


def latest(root: Path, target: str, pack: str, lane: str | None = None) -> Receipt | None:
    """The latest receipt of one lane (``latest_per_lane``), or of the whole pack when ``lane`` is None."""
    per_lane = latest_per_lane(find(root, target, pack))
    if lane is not None:
        return per_lane.get(lane)
    ordered = _by_start(per_lane.values())
    return ordered[-1] if ordered else None


def latest_by_lane(root: Path, target: str, pack: str, receipts_dir: Path | None = None,
                   with_checkout: bool = False) -> dict[str, Receipt]:
    """Each lane's latest receipt (``latest_per_lane``), from one scan of the pack's receipts (callers that loop
    over lanes). ``with_checkout``: with ``receipts_dir``, the checkout's receipts count too (the latest of either
    place)."""
    found = find(root, target, pack, receipts_dir)
    if with_checkout and receipts_dir is not None:
        found = [*find(root, target, pack), *found]
    return latest_per_lane(found)


def display_path(path: Path, root: Path) -> str:
    """``path`` relative to the repository root when it lies inside it (as tracking.toml names receipts)."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def host_description(receipt: Receipt) -> str:
    """'<GPU> (cc <x.y>)', else 'cpu (<platform>)', as 'perf' and the filing bodies name the host. A host
    without a GPU is 'cpu' here as in 'status' (host_label): one name, the platform only added to it."""
    host = receipt.host
    if host is not None and host.gpu:
        return f"{host.gpu} (cc {host.compute_capability})"
    platform = host.platform if host is not None else None
    return f"cpu ({platform})" if platform else "unknown host"


def host_label(receipt: Receipt) -> str:
    """The host in one word, as 'status' and 'list' show it: the GPU's model (H100), else 'cpu'."""
    gpu = receipt.host.gpu if receipt.host is not None else None
    return gpu.replace("NVIDIA ", "").split()[0] if gpu else "cpu"


# the order a verdict line names verdicts in: passes, then what went wrong, then what never ran
_LINE_ORDER = ("pass", "mismatch", "crash", "timeout")
_NAMED = 3  # lane names a line shows per verdict before it counts the rest


def verdict_line(lanes: Sequence[str], latest: Mapping[str, Receipt]) -> str:
    """A pack's lanes' latest verdicts in one line (tracking.toml's generated ``[verdicts]``): how many lanes have
    each verdict, naming those that did not pass, and the date of the latest run. ``latest``: per lane name its
    latest receipt by ``latest_per_lane``; a lane without one is "not run"."""
    if not lanes:
        return "no lanes"
    groups: dict[str, list[str]] = {}
    for name in lanes:
        groups.setdefault(latest[name].verdict.value if name in latest else "not run", []).append(name)
    parts = []
    for verdict in (*_LINE_ORDER, *sorted(set(groups) - {*_LINE_ORDER, "not run"}), "not run"):
        names = groups.get(verdict)
        if not names:
            continue
        if verdict == "pass":
            parts.append(f"{len(names)} pass")
            continue
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        parts.append(f"{len(names)} {verdict} ({', '.join(names[:_NAMED])}{more})")
    dates = [latest[name].started[:10] for name in lanes if name in latest]
    return f"{len(lanes)} lane(s): " + ", ".join(parts) + (f"; latest run {max(dates)}" if dates else "")


def log_text(receipt: Receipt) -> str | None:
    """The ``output.log`` beside a loaded receipt, or None where it has no log on disk."""
    log = None if receipt.path is None else receipt.path.parent / LOG
    return log.read_text(encoding="utf-8", errors="replace") if log is not None and log.is_file() else None


def suite_logs(lanes: Iterable[tuple[bool, Receipt]]) -> Iterator[tuple[bool, str]]:
    """(patched, ``output.log`` text) of suite lanes' receipts that have their log on disk."""
    for patched, receipt in lanes:
        text = log_text(receipt)
        if text is not None:
            yield patched, text
