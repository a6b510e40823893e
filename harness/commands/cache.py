"""``harness cache ls|verify|prune|export|import``: the kernel-compile caches kept per key in the store."""

from __future__ import annotations

import json
import os
import re
import tarfile
import time
from pathlib import Path

from harness.base import ui
from harness.base.store import Store
from harness.commands import _args
from harness.errors import ConfigError, Exit, UsageError, WriteError
from harness.lane import kernel_cache

_ABOUT = ("Kernel-compile caches (Triton, TileLang, TVM-FFI, torch extensions and inductor, the CUDA JIT) are "
          "kept per key in the store, <cache>/kernel-cache/<key>/ (or $PATCHLANE_KERNEL_CACHE): the key covers "
          "the lane's builds, its runtime, its interpreter's compiler versions, nvcc, the NVIDIA driver and the "
          "GPUs, so a change of any of them never reuses a kernel. Each entry is sealed (every file's sha256) "
          "after each lane that ran to its end; docs/kernel-cache.md.")


def _common(q) -> None:
    q.add_argument("--bundle-dir", type=_args.path, default=None, metavar="DIR",
                   help="accepted, and unused, so that 'python3 -m harness.bootstrap BUNDLE -- cache ...' works on a "
                        "GPU host: the kernel caches are the store's either way")
    _args.common(q)


def register(sub) -> None:
    p = sub.add_parser("cache", help="list, verify, prune, export or import the kernel-compile caches",
                       description=_ABOUT)
    cs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = cs.add_parser("ls", help="every kernel-cache entry: key, size, files, last use, GPU and compilers",
                      description=_ABOUT)
    q.add_argument("--json", action="store_true", help="one JSON list of the entries and their key facts")
    _args.output_format(q)
    _common(q)
    q = cs.add_parser("verify", help="check every entry against its seal; remove a damaged one "
                                     f"(exit {int(Exit.TAMPERED)} when one was)",
                      description="Check every kernel-cache entry's sealed files (missing or changed: the entry "
                                  "is removed, and the next lane compiles again) and remove the unsealed files a "
                                  "lane that did not finish left. An entry a lane uses now is checked, never "
                                  f"removed. Exit {int(Exit.TAMPERED)} when an entry was damaged.")
    q.add_argument("--json", action="store_true", help="one JSON object per entry: its problems and what was done")
    _common(q)
    q = cs.add_parser("prune", help="remove entries by last use or to fit a size",
                      description="Remove kernel-cache entries no lane uses now: those not used for DAYS days, "
                                  "then the least recently used until the rest fit SIZE. At least one is needed.")
    q.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                   help="remove entries whose last use is older than DAYS days")
    q.add_argument("--max-size", type=_size, default=None, metavar="SIZE",
                   help="then remove the least recently used entries until the rest take at most SIZE "
                        "(bytes, or with K/M/G: 500M, 2G)")
    q.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    q.add_argument("--json", action="store_true", help="the removed (or, with --dry-run, chosen) entries as JSON")
    _common(q)
    q = cs.add_parser("export", help="write entries to a tar (a GPU host's, to carry in the next bundle)",
                      description="Write the sealed files of kernel-cache entries (all, or those of --key) to one "
                                  "tar (.tar.xz: compressed). Bring a GPU host's back with 'harness cache import', "
                                  "then 'harness bundle --kernel-cache' carries them to the next one.")
    q.add_argument("-o", "--output", type=_args.path, required=True, help="the archive, e.g. $OUT/kernel-cache.tar.xz")
    q.add_argument("--key", action="append", default=[], metavar="PREFIX",
                   help="only the entry whose key starts with PREFIX (repeatable)")
    _common(q)
    q = cs.add_parser("import", help="install the entries of an exported tar into the store",
                      description="Check every entry of an archive 'harness cache export' wrote against its seal, "
                                  "then install those the store lacks. One entry that fails its seal imports "
                                  f"nothing (exit {int(Exit.TAMPERED)}); an entry already present is kept.")
    q.add_argument("archive", type=_args.path)
    _common(q)


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)i?B?\s*", text, re.I)
    if not m:
        raise ValueError(text)
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def main(args) -> int:
    store = Store(getattr(args, "cache", None))
    where = kernel_cache.root(store)
    if where is None:
        ui.warn(f"{kernel_cache.ROOT_ENV}=off: lanes keep no kernel cache; there is nothing to "
                f"{args.action}")
        return int(Exit.OK)
    return {"ls": _ls, "verify": _verify, "prune": _prune, "export": _export, "import": _import}[args.action](
        where, args)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _ls(where: Path, args) -> int:
    found = kernel_cache.entries(where)
    if args.json:
        ui.data(json.dumps([e.to_dict() for e in found], indent=1))
        return int(Exit.OK)
    rows = [[e.key[:12], ui.human_bytes(e.bytes), str(e.files), _when(e.last_used),
             e.facts.summary() if e.facts else "(no readable metadata)",
             ", ".join(b[:12] for b in e.facts.builds) if e.facts else "-"] for e in reversed(found)]
    ui.tabular(["key", "size", "files", "last used", "compilers and GPU", "builds"], rows, fmt=args.format,
               title=f"kernel caches in {where}")
    ui.info(f"{len(found)} entr{'y' if len(found) == 1 else 'ies'}, {ui.human_bytes(sum(e.bytes for e in found))}")
    return int(Exit.OK)


def _verify(where: Path, args) -> int:
    bad = 0
    report = []
    for entry in kernel_cache.entries(where):
        problems, leftovers, removed = kernel_cache.verify(entry.path)
        bad += bool(problems)
        report.append({"entry": entry.path.name, "key": entry.key, "problems": problems,
                       "unsealed_removed": leftovers, "removed": removed})
        if args.json:
            continue
        if problems:
            done = "removed; the next lane compiles again" if removed else "in use by a lane now: kept"
            ui.out.print(f"BAD {entry.key[:12]}: {problems[0]}"
                         f"{f' and {len(problems) - 1} more' if len(problems) > 1 else ''}; {done}",
                         markup=False, highlight=False)
        elif leftovers:
            ui.out.print(f"ok  {entry.key[:12]}: removed {len(leftovers)} unsealed file(s) a lane that did not "
                         f"finish left ({leftovers[0]})", markup=False, highlight=False)
    if args.json:
        ui.data(json.dumps(report, indent=1))
    else:
        ui.out.print(f"{len(report) - bad} kernel-cache entr{'y' if len(report) - bad == 1 else 'ies'} verified, "
                     f"{bad} bad", markup=False, highlight=False)
    return int(Exit.TAMPERED) if bad else int(Exit.OK)


def _prune(where: Path, args) -> int:
    if args.older_than is None and args.max_size is None:
        raise UsageError("cache prune: say what to remove: --older-than DAYS and/or --max-size SIZE")
    found = kernel_cache.entries(where)  # least recently used first
    chosen = []
    if args.older_than is not None:
        cutoff = time.time() - args.older_than * 86400
        chosen = [e for e in found if e.last_used < cutoff]
    if args.max_size is not None:
        rest = [e for e in found if e not in chosen]
        total = sum(e.bytes for e in rest)
        for e in rest:
            if total <= args.max_size:
                break
            chosen.append(e)
            total -= e.bytes
    removed = []
    for e in chosen:
        if args.dry_run or kernel_cache.remove(e.path):
            removed.append(e)
        else:
            ui.note(f"kernel cache {e.key[:12]}: in use by a lane now; kept")
    if args.json:
        ui.data(json.dumps([e.to_dict() for e in removed], indent=1))
    else:
        verb = "would remove" if args.dry_run else "removed"
        for e in removed:
            ui.data(f"{verb} {e.key[:12]} ({ui.human_bytes(e.bytes)}, last used {_when(e.last_used)})")
        ui.info(f"{verb} {len(removed)} entr{'y' if len(removed) == 1 else 'ies'}, "
                f"{ui.human_bytes(sum(e.bytes for e in removed))}")
    return int(Exit.OK)


def _export(where: Path, args) -> int:
    found = [e for e in kernel_cache.entries(where)
             if not args.key or any(e.key.startswith(k) for k in args.key)]
    if args.key and not found:
        raise UsageError(f"cache export: no entry's key starts with {' or '.join(args.key)} (harness cache ls)")
    out: Path = args.output
    partial = out.with_name(out.name + ".partial")
    total, packed = 0, 0
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        xz = out.name.endswith((".xz", ".txz"))
        with (tarfile.open(partial, "w:xz") if xz else tarfile.open(partial, "w")) as tf:
            for e in found:
                problems = kernel_cache.damage(e.path)
                if problems:
                    ui.warn(f"kernel cache {e.key[:12]}: not as it was sealed ({problems[0]}); not exported")
                    continue
                total += kernel_cache.pack(e.path, tf, kernel_cache.TOP)
                packed += 1
        os.replace(partial, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise WriteError.of(exc, "the export", out) from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    ui.data(str(out))
    ui.info(f"{packed} entr{'y' if packed == 1 else 'ies'}, {ui.human_bytes(total)} before compression, "
            f"{ui.human_bytes(out.stat().st_size)} written")
    return int(Exit.OK)


def _import(where: Path, args) -> int:
    if not args.archive.is_file():
        raise ConfigError(f"{args.archive}: no such file")
    with kernel_cache.unpacked(args.archive, where) as dirs:
        if not dirs:
            raise ConfigError(f"{args.archive}: holds no kernel-cache entry")
        for d in dirs:
            full, why = kernel_cache.check_source(d, None)
            if full is None:
                ui.out.print(f"BAD {d.name}: {why}; nothing was imported", markup=False, highlight=False)
                return int(Exit.TAMPERED)
        for d in dirs:
            made, why = kernel_cache.adopt_dir(d, where)
            ui.data(f"{d.name[:12]}: {why}")
    return int(Exit.OK)
