"""``harness receipts import|verify|show|sync``."""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
import tomllib
from pathlib import Path

from harness.base import tarsafe, ui
from harness.base.store import default_mode
from harness.commands import _args
from harness.commands._context import context, find_root
from harness.errors import ConfigError, Exit, HarnessError, ReceiptError
from harness.lane import lanes as lanes_mod
from harness.lane import receipts
from harness.lane.tracking import sentinels
from harness.lane.tracking.document import locked, replace_text
from harness.lane.tracking.model import VERDICTS, VERDICTS_NOTE_LINES


def register(sub) -> None:
    p = sub.add_parser("receipts", help="import receipts brought back from a GPU host; verify or show receipts")
    rs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = rs.add_parser("import", help="verify every receipt directory of a tar as a whole (SHA256SUMS, the log; "
                                     "legacy receipts: log only) and its pack and lane against tracking.toml, "
                                     f"then copy them into receipts/ and update tracking.toml (exit "
                                     f"{int(Exit.TAMPERED)}: a receipt fails, nothing imported)")
    q.add_argument("archive", type=_args.path, metavar="ARCHIVE_OR_DIR",
                   help="the tar a GPU host sent back (receipts.tar), or a directory holding <target>/<pack>/<run>/")
    _args.common(q)
    q = rs.add_parser("verify", help="check every receipt directory against its digests and its log "
                                     f"(exit {int(Exit.TAMPERED)} when one fails); legacy (log-only) receipts are "
                                     "counted, and listed with -v")
    q.add_argument("--json", action="store_true",
                   help="one JSON document on stdout: schema, verified, legacy[], bad[] {path, problems}, ok")
    _args.common(q)
    q = rs.add_parser("withdraw", help="take one receipt out of evidence, with the reason (it is never edited or "
                                       "deleted; receipts/withdrawn.toml pins its log)",
                      description="A receipt that is wrong as evidence (its log fails verification for a reason of "
                                  "the harness, its run is known to be invalid) is withdrawn: an entry in "
                                  "receipts/withdrawn.toml names its directory, pins its output.log by sha256 and "
                                  "says why. It then counts for no lane (a lane whose latest receipt it was falls "
                                  "back to the one before, or to none) and 'receipts verify' lists it as withdrawn "
                                  "instead of bad. The receipt directory itself is left as it is; commit both.")
    q.add_argument("receipt", type=_args.path, metavar="RECEIPT_DIR",
                   help="the receipt directory, receipts/<target>/<pack>/<run>")
    q.add_argument("--reason", required=True, help="why it is no evidence (one sentence; it is kept in the file)")
    _args.common(q)
    q = rs.add_parser("show", help="print the latest receipt of each lane of a pack")
    q.add_argument("pack")
    _args.common(q)
    q = rs.add_parser("sync", help="write tracking.toml's generated [verdicts] again from receipts/ (after a merge: "
                                   "conflict markers inside it are dropped)",
                      description="tracking.toml's [verdicts] holds one generated line per pack: its lanes' latest "
                                  "verdicts, read from receipts/ by the rule every command uses. This writes every "
                                  "line again. A merge that left conflict markers inside that table (and nowhere "
                                  "else) is resolved by writing it from receipts/; markers elsewhere in the file are "
                                  "a person's to resolve. 'receipts verify' fails while a line disagrees.")
    _args.common(q)


def main(args) -> int:
    if args.action == "sync":
        _drop_conflicted_verdicts(find_root(getattr(args, "root", None)) / "tracking.toml")
    ctx = context(args)
    return {"import": _import, "verify": _verify, "show": _show, "sync": _sync,
            "withdraw": _withdraw}[args.action](ctx, args)


_CONFLICT = re.compile(r"^(<<<<<<<|=======$|>>>>>>>|\|\|\|\|\|\|\|)")
_GENERATED_LINE = re.compile(r'^(\[' + VERDICTS + r'\]|[0-9]{2} = ".*")[ \t]*$')


def _drop_conflicted_verdicts(path: Path) -> None:
    """A merge's conflict markers inside the generated [verdicts] table (and only there): drop the table, which
    ``_sync`` writes again whole. The generated part is found from the end of the file: conflict markers, blank
    lines, the table's note, its header and ``NN = "..."`` lines; markers above it are the person merging's to
    resolve (the load names their line)."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError):
        return  # the load reports it
    if not any(_CONFLICT.match(line) for line in lines):
        return
    try:  # a marker-like line inside a multi-line string (a note that underlines with =======) is no conflict:
        tomllib.loads("\n".join(lines))  # real markers never parse as TOML
        return
    except tomllib.TOMLDecodeError:
        pass
    note = set(VERDICTS_NOTE_LINES)
    start = len(lines)
    while start > 0 and (_CONFLICT.match(lines[start - 1]) or not lines[start - 1].strip()
                         or lines[start - 1] in note or _GENERATED_LINE.match(lines[start - 1])):
        start -= 1
    first = next(i for i, line in enumerate(lines) if _CONFLICT.match(line))
    if first < start or not any(_GENERATED_LINE.match(line) for line in lines[start:]):
        raise ConfigError(f"{path}:{first + 1}: a merge conflict outside the generated [{VERDICTS}] table",
                          hint="resolve it by hand, then run 'harness receipts sync' (which writes [verdicts] "
                               "again from receipts/)")
    with locked(path):
        replace_text(path, "\n".join(lines[:start]).rstrip("\n") + "\n")
    ui.info(f"dropped the conflicted [{VERDICTS}] of {path.name}; writing it again from receipts/")


def _sync(ctx, args) -> int:
    """Write every pack's [verdicts] line from receipts/."""
    want = lanes_mod.verdict_lines(ctx, ctx.tracking.packs.values())
    have = ctx.tracking.verdicts()
    changed = {pid: line for pid, line in want.items() if have.get(pid) != line}
    stale = sorted(set(have) - set(want))
    if changed or stale or list(have) != list(want):
        ctx.tracking.rewrite_verdicts(want)
        ctx.tracking.save()
    for pid, line in want.items():
        ui.data(f"{pid}\t{line}")
    ui.info(f"[{VERDICTS}]: {len(changed)} line(s) written, {len(stale)} removed (packs no longer in tracking.toml)"
            if changed or stale else f"[{VERDICTS}]: every line agrees with receipts/")
    return 0


_RUN_NAME = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[A-Za-z0-9][A-Za-z0-9._-]*$")


def _import(ctx, args) -> int:
    """Unpack receipts (a tar of ``receipts/<target>/<pack>/<run>/``) byte for byte, then update tracking.

    Every receipt is verified and its target, pack, lane and directory name checked against
    tracking.toml before anything is copied: one bad receipt imports nothing.
    """
    dest_root = receipts.receipts_root(ctx.root)
    vocabulary = set(sentinels(ctx.root))
    planned: list[tuple[Path, Path]] = []
    lanes: set[tuple[str, str, str]] = set()  # (target, pack, lane) of every receipt of the archive
    added = []
    source = Path(args.archive)
    if not source.exists():
        raise ConfigError(f"{source}: no such file or directory",
                          hint="give the tar a GPU host sent back (receipts.tar) or a directory of receipts")
    with tempfile.TemporaryDirectory(prefix="patchlane-import-") as tmp:
        if source.is_dir():  # a receipts directory as it came back (<target>/<pack>/<run>/ below it): no tar needed
            tmp = str(source)
        else:
            try:
                with tarfile.open(source) as tf:
                    tarsafe.extractall(tf, tmp)
            except (tarfile.TarError, OSError) as exc:
                raise ConfigError(f"{args.archive}: cannot read: {exc}",
                                  hint="a tar of receipts/<target>/<pack>/<run>/, or that directory itself") from None
        dirs = sorted({p.parent for p in Path(tmp).rglob(receipts.RECEIPT)}
                      | {p.parent for p in Path(tmp).rglob(receipts.LOG)})
        if not dirs:
            raise ConfigError(f"{args.archive}: holds no receipt.json")
        for src in dirs:
            where = f"{args.archive}: {src.relative_to(tmp)}"
            check = receipts.check_dir(src, vocabulary)
            if not check.ok:
                raise ReceiptError(f"{where}: {'; '.join(check.problems)}; nothing was imported")
            rec = receipts.load(src / receipts.RECEIPT)
            final = dest_root / _destination(ctx, src, rec, where)
            lanes.add((rec.target, rec.pack, rec.lane))
            if check.legacy:
                ui.note(f"{where}: legacy receipt (no {receipts.MANIFEST}): only its log is covered by a digest")
            planned.append((src, final))
        for src, final in planned:
            if final.exists():  # an earlier import (perhaps one stopped before it recorded it) copied it
                ui.note(f"already present: {final.relative_to(ctx.root)}")
                continue
            final.parent.mkdir(parents=True, exist_ok=True)
            scratch = final.with_name(f".tmp-import-{final.name}")
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.copytree(src, scratch)
            os.chmod(scratch, default_mode(directory=True))
            os.replace(scratch, final)
            added.append(receipts.load(final / receipts.RECEIPT))
    for rec in sorted(added, key=lambda r: r.started):
        ui.data(f"imported {rec.dir.relative_to(ctx.root)}: {rec.verdict} ({', '.join(rec.sentinels) or '-'})")
    # tracking.toml names each lane's latest receipt by the one rule (receipts.latest_per_lane), over every receipt
    # of the lane in receipts/: an older receipt imported late does not replace a newer one, and a receipt an
    # import stopped midway copied (found "already present" now) is recorded all the same
    if _record_latest(ctx, lanes):
        ctx.tracking.save()
    return 0


def _record_latest(ctx, lanes: set[tuple[str, str, str]]) -> bool:
    """Write the [verdicts] line of each pack with a lane in ``lanes`` from its lanes' latest receipts; whether any
    line changed."""
    packs = [ctx.tracking.packs[pid] for pid in sorted({pid for _target, pid, _lane in lanes})]
    have = ctx.tracking.verdicts()
    if all(have.get(pid) == line for pid, line in lanes_mod.verdict_lines(ctx, packs).items()):
        return False
    ctx.tracking.record_verdicts(lambda: lanes_mod.verdict_lines(ctx, packs))  # made again under the lock, as a run
    return True


def _destination(ctx, src: Path, rec: receipts.Receipt, where: str) -> Path:
    """``<target>/<pack>/<run>`` for a receipt, after checking each part against tracking.toml."""
    target, pid, lane = rec.target, rec.pack, rec.lane
    pack = ctx.tracking.packs.get(pid)
    if pack is None:
        raise ConfigError(f"{where}: pack {pid!r} is not in tracking.toml; nothing was imported")
    if pack.target != target:
        raise ConfigError(f"{where}: receipt says target {target!r}, but pack {pid} is a {pack.target} pack; "
                          "nothing was imported")
    declared = next((x for x in pack.lanes if x.name == lane), None)
    if declared is None:
        raise ConfigError(f"{where}: pack {pid} has no lane {lane!r} in tracking.toml; nothing was imported")
    ran = {"patched": rec.patched, "expect": rec.expected.value, "base": rec.base.name, "nproc": rec.world_size}
    wants = {"patched": declared.patched, "expect": declared.expect, "base": declared.base, "nproc": declared.nproc}
    differ = [f"{k} {ran[k]!r} (the lane: {wants[k]!r})" for k in ran if ran[k] != wants[k]]
    if differ:  # a run of another lane relabelled (a fix run as the bug lane): not this lane's evidence
        raise ConfigError(f"{where}: receipt of lane {lane!r} does not describe a run of pack {pid}'s lane {lane}: "
                          f"{', '.join(differ)}; nothing was imported")
    if not _RUN_NAME.match(src.name) or not (src.name == f"{src.name[:16]}-{lane}"
                                             or src.name.startswith(f"{src.name[:16]}-{lane}.")):
        raise ConfigError(f"{where}: directory name {src.name!r} is not '<UTC time>-{lane}'; nothing was imported")
    started = rec.started_at
    if started is None or receipts.stamp_time(started) != src.name[:16]:
        raise ConfigError(f"{where}: receipt says it started {rec.started!r}, but its directory is named for "
                          f"{src.name[:16]}; nothing was imported")
    if receipts.dated_in_future(rec):
        raise ConfigError(f"{where}: receipt says it started {rec.started}, after now "
                          f"({receipts.stamp_time(receipts.utc_now())}); nothing was imported")
    rel = Path(target) / pid / src.name
    root = receipts.receipts_root(ctx.root).resolve()
    if not (root / rel).resolve().is_relative_to(root):
        raise ConfigError(f"{where}: would be written outside {root}; nothing was imported")
    return rel


def _verify(ctx, args) -> int:
    """Verify every receipt directory as a whole; report each bad one; count the legacy (log-only) ones (-v lists
    them: a repository with many old receipts would otherwise bury the summary and the bad lines under them)."""
    vocabulary = set(sentinels(ctx.root))
    dirs = receipts.run_dirs(ctx.root)
    gone, wrong = receipts.withdrawn.audit(receipts.receipts_root(ctx.root), dirs)
    checks = [receipts.check_dir(d, vocabulary) for d in dirs if d not in gone]
    bad = [c for c in checks if not c.ok]
    legacy = [c for c in checks if c.ok and c.legacy]
    try:
        missing = _missing_from_tracking(ctx)
    except (HarnessError, OSError):  # a receipt that cannot be read is reported above as such; no line to compare
        missing = []
    missing = wrong + missing
    future = receipts.future_dated(ctx.root)
    code = Exit.TAMPERED if bad or missing else Exit.OK
    if getattr(args, "json", False):
        ui.out.file.write(json.dumps({
            "schema": 1, "ok": code == Exit.OK, "verified": len(checks) - len(bad),
            "with_manifest": len(checks) - len(bad) - len(legacy),
            "legacy": [str(c.dir.relative_to(ctx.root)) for c in legacy],
            "withdrawn": [{"path": str(d.relative_to(ctx.root)), "reason": w.reason, "date": w.date}
                          for d, w in sorted(gone.items())],
            "future": [{"path": receipts.display_path(r.dir, ctx.root), "started": r.started} for r in future],
            "bad": [{"path": str(c.dir.relative_to(ctx.root)), "problems": list(c.problems)} for c in bad]
            + [{"path": None, "problems": [line]} for line in missing]}, indent=2) + "\n")
        return int(code)
    for c in legacy:
        ui.detail(f"legacy: log-only {c.dir.relative_to(ctx.root)} (no {receipts.MANIFEST}: receipt.json is checked "
                  "against its log, not by a digest)")
    for d, w in sorted(gone.items()):
        ui.data(f"withdrawn {d.relative_to(ctx.root)} ({w.date}): {w.reason}")
    for rec in future:
        ui.data(f"dated after now {receipts.display_path(rec.dir, ctx.root)}: started {rec.started}; it counts for "
                "no lane until then (a host clock ahead?)")
    for c in bad:
        ui.data(f"BAD {c.dir.relative_to(ctx.root)}: {'; '.join(c.problems)}")
    for line in missing:
        ui.data(f"BAD {line}")
    shown = "" if not legacy or ui.verbosity >= 1 else " (-v lists them)"
    ui.data(f"{len(checks) - len(bad)} receipt(s) verified ({len(checks) - len(bad) - len(legacy)} with "
            f"{receipts.MANIFEST}, {len(legacy)} legacy: log-only{shown}), "
            + (f"{len(gone)} withdrawn (no evidence), " if gone else "") + f"{len(bad) + len(missing)} bad")
    return int(code)


def _withdraw(ctx, args) -> int:
    """Add an entry for one receipt directory to receipts/withdrawn.toml (written in one rename, under a lock)."""
    import tomlkit

    from harness.base.clock import today
    from harness.base.hashing import sha256_file

    root = receipts.receipts_root(ctx.root).resolve()
    given = Path(args.receipt)
    directory = (given if given.is_absolute() else Path.cwd() / given).resolve()
    if not directory.is_relative_to(root) or len(directory.relative_to(root).parts) != 3:
        raise ConfigError(f"{args.receipt}: not a receipt directory (receipts/<target>/<pack>/<run> of {ctx.root})")
    if not (directory / receipts.LOG).is_file():
        raise ConfigError(f"{args.receipt}: no {receipts.LOG} there; a receipt directory holds one")
    reason = " ".join(args.reason.split())
    if not reason:
        raise ConfigError("--reason is empty: say why the receipt is no evidence")
    name = directory.relative_to(root).as_posix()
    path = receipts.withdrawn.path_in(root)
    with locked(path):
        if name in receipts.withdrawn.names(root):
            raise ConfigError(f"{path}: {name} is withdrawn already")
        try:
            text: str | None = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = None
        entry = {"withdrawn": [{"receipt": name, "log_sha256": sha256_file(directory / receipts.LOG),
                                "reason": reason, "date": today().isoformat()}]}
        head = text if text is not None else (
            "# Receipts withdrawn from evidence (harness receipts withdraw writes this; see "
            "harness/lane/receipts/withdrawn.py).\n# A withdrawn receipt counts for no lane; its directory is kept "
            "as it was written.\n")
        replace_text(path, head.rstrip("\n") + "\n\n" + tomlkit.dumps(entry))
        try:
            receipts.withdrawn.load(root)
        except ConfigError:  # what was written does not read back: the file as it was (or none), and say so
            replace_text(path, text) if text is not None else path.unlink()
            raise
    ui.data(f"withdrawn {name}: {reason}")
    ui.info(f"{path.relative_to(ctx.root)} holds it; 'harness receipts sync' writes tracking.toml's [verdicts] from "
            "what is left; commit both")
    return 0


def _missing_from_tracking(ctx) -> list[str]:
    """Lines of tracking.toml's generated [verdicts] that disagree with receipts/: a line that says otherwise, or
    none for a pack with receipts (a pack never run may have no line yet)."""
    have = ctx.tracking.verdicts()
    out = []
    for pack in ctx.tracking.packs.values():
        latest = receipts.latest_by_lane(ctx.root, pack.target, pack.id)
        line = receipts.verdict_line([lane.name for lane in pack.lanes], latest)
        if have.get(pack.id) == line or (pack.id not in have and not latest):
            continue
        said = f"says {have[pack.id]!r}" if pack.id in have else "has no line for it"
        out.append(f"tracking.toml [{VERDICTS}] {pack.id}: {said}; receipts/ say {line!r} (harness receipts sync "
                   "writes it)")
    return out


def _show(ctx, args) -> int:
    pack = ctx.tracking.pack(args.pack)
    latest = receipts.latest_by_lane(ctx.root, pack.target, pack.id)
    for lane in pack.lanes:
        rec = latest.get(lane.name)
        if rec is None:
            ui.data(f"{lane.name}: no receipt")
            continue
        ui.data(f"{lane.name}: {rec.verdict} - {rec.reason} [{rec.dir.relative_to(ctx.root)}]")
        for fig in rec.figures:
            ui.data(f"    {json.dumps(fig.to_dict(), sort_keys=True)}")
    return 0
