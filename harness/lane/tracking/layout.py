"""Where a pack's keys live: tracking.toml says where each pack stands, ``patches/<target>/<NN>/pack.toml`` what it
declares (docs/layout.md).

* ``STANDING_KEYS`` stay in tracking.toml's ``[packs.NN]``: what a person reads to see where the pack stands
  (title, target, kind, class, state, dependencies, threads, mitigation and its retirement, held/blocked/absorbed,
  the filing record).
* ``DECLARED_KEYS`` live in the pack's own file beside its series: its lanes, suites, domain, evidence and
  performance rows, related-work and lint decisions, reproducer, files and notes.

Each key has exactly one place. A pack without a ``pack.toml`` may still keep its declarations in its tracking.toml
table (the single-file form of older repositories and of small fixtures; ``harness check`` says so); once the file
exists, a declaration key in tracking.toml is a ConfigError naming both files. ``split`` moves the declarations out
(``harness migrate``, as pre-commit's ``migrate-config``): the packs read the same before and after, since the
loader sees the same keys either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from harness.base.tomlutil import load_document
from harness.errors import ConfigError

PACK_FILE = "pack.toml"
STANDING_KEYS = frozenset({
    "title", "target", "kind", "class", "state", "depends_on", "threads", "mitigation", "absorbed", "held",
    "blocked", "filing",
})
DECLARED_KEYS = frozenset({
    "files", "summary", "fix", "requires", "base", "filing_base", "reproducer", "minimal_repro", "error", "lanes",
    "suites", "domain", "evidence", "evidence_note", "performance", "related", "lint_at_base",
    # free-text notes people keep next to the data
    "note", "notes", "base_note", "patch_note", "contract_note",
    # data a contract pack's reproducer documents (pack 23)
    "explicit_pre_norm", "uses_identity_norm",
})
PACK_FILE_TOP = frozenset({"schema"}) | DECLARED_KEYS
# what an older tracking.toml kept per pack and nothing keeps now: each lane's latest receipt in brief (receipts/
# hold the runs; tracking.toml's generated [verdicts] sums them up)
GONE_KEYS = frozenset({"validation"})


def pack_file(root: Path, target: str, pid: str) -> Path:
    """``patches/<target>/<NN>/pack.toml``: where pack ``pid`` of ``target`` declares its lanes and the rest."""
    return root / "patches" / target / pid / PACK_FILE


def shown(root: Path, path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (as messages name files)."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _declared_in(table) -> list[str]:
    """The declaration keys a tracking.toml ``[packs.NN]`` table holds, sorted."""
    return sorted(k for k in table if k in DECLARED_KEYS) if isinstance(table, dict) else []


def misplaced_in_tracking(root: Path, tracking_path: Path, pid: str, table, there: Path) -> list[str]:
    """One line per declaration key tracking.toml's ``[packs.pid]`` holds while the pack has its own file."""
    return [f"{tracking_path} [packs.{pid}]: key '{k}' is what the pack declares, and {shown(root, there)} holds "
            "the pack's declarations; it belongs there" for k in _declared_in(table)]


def inline_declarations(doc) -> dict[str, list[str]]:
    """Per pack, the declaration keys tracking.toml holds in the single-file form (``harness migrate`` moves them)."""
    found = {str(pid): _declared_in(table) for pid, table in (doc.get("packs") or {}).items()}
    return {pid: keys for pid, keys in found.items() if keys}


@dataclass(frozen=True)
class Declarations:
    """A pack's ``pack.toml``: its path and document (an empty document when the pack declares nothing)."""

    path: Path
    doc: tomlkit.TOMLDocument
    exists: bool


def swap_backups(dest: Path) -> list[Path]:
    """The previous series ``series_write.replace_series`` kept beside ``dest`` (``.<name>.bak-<pid>``), oldest
    name first: a regen killed between its two renames leaves only those (the pack's file inside them)."""
    return sorted(p for p in dest.parent.glob(f".{dest.name}.bak-*") if p.is_dir()) if dest.parent.is_dir() else []


def load_declarations(root: Path, target: str, pid: str, schema: int) -> Declarations:
    """The pack's ``pack.toml``, checked for keys that are not its own: a standing key is a ConfigError (it belongs
    in tracking.toml), a schema other than ``schema`` too. Unknown keys are returned by ``unknown_in_pack_file``."""
    path = pack_file(root, target, pid)
    if path.is_symlink():  # its text would live wherever the link points, outside what a review of the pack sees
        raise ConfigError(f"{shown(root, path)}: a symbolic link (to {os.readlink(path)}); a pack's declarations are "
                          "a regular file beside its series", hint="replace the link with the file it points to")
    if not path.exists():
        left = [b for b in swap_backups(path.parent) if (b / PACK_FILE).is_file()]
        if left and not path.parent.is_dir():  # not "the pack declares nothing": its lanes are in the backup
            raise ConfigError(f"{shown(root, path.parent)}: missing; a regen killed while it swapped the series left "
                              f"the previous one, {PACK_FILE} included, in {left[0].name}",
                              hint=f"run 'harness regen {pid}' (it puts the backup back first), or move {left[0].name} "
                                   f"back to {path.parent.name}")
        return Declarations(path, tomlkit.document(), False)
    doc = load_document(path)
    where = shown(root, path)
    found = doc.get("schema")
    if found is not None and found != schema:
        raise ConfigError(f"{where}: key 'schema' is {found!r}; this harness reads schema {schema}",
                          hint="upgrade the harness, or check the file was not written by another tool")
    standing = sorted(k for k in doc if k in STANDING_KEYS)
    if standing:
        raise ConfigError(f"{where}: key '{standing[0]}' says where pack {pid} stands; it belongs in tracking.toml's "
                          f"[packs.{pid}]" + (f" (also: {', '.join(standing[1:])})" if standing[1:] else ""))
    return Declarations(path, doc, True)


def unknown_in_pack_file(root: Path, decl: Declarations) -> list[str]:
    """One line per top-level key of the pack's file its schema does not declare."""
    where = shown(root, decl.path)
    return [f"{where}: unknown key '{k}'" for k in decl.doc if k not in PACK_FILE_TOP and k not in STANDING_KEYS]


@dataclass(frozen=True)
class Moved:
    """What ``split`` moved for one pack: the keys, and the file that now holds them."""

    pack: str
    path: Path
    keys: tuple[str, ...]
    removed: tuple[str, ...] = ()  # keys no longer kept at all (validation records: receipts/ hold them)


def split(doc: tomlkit.TOMLDocument, root: Path, schema: int) -> tuple[list[Moved], dict[Path, str]]:
    """Move every pack's declaration keys out of the tracking document ``doc`` (changed in place) into the text of
    its ``pack.toml``; return what moved and the new files' texts (nothing is written here).

    A pack whose ``pack.toml`` exists already is merged into it, refusing a key present in both. Comments written
    above a moved table stay in tracking.toml (tomlkit keeps them with the table before)."""
    moved: list[Moved] = []
    texts: dict[Path, str] = {}
    packs = doc.get("packs") or {}
    for pid, table in packs.items():
        if not isinstance(table, dict):
            continue
        keys = [k for k in list(table) if k in DECLARED_KEYS]
        removed = tuple(k for k in list(table) if k in GONE_KEYS)
        for key in removed:
            del table[key]
        if not keys:
            if removed:
                moved.append(Moved(str(pid), Path(), (), removed))
            continue
        target = table.get("target")
        if not isinstance(target, str):
            raise ConfigError(f"tracking.toml [packs.{pid}]: no 'target', so its declarations have no place to go")
        existing = load_declarations(root, target, pid, schema)
        out = existing.doc if existing.exists else tomlkit.document()
        if not existing.exists:
            out.add(tomlkit.comment(f"Pack {pid}: what it declares (docs/layout.md); where it stands is in "
                                    "tracking.toml"))
            out["schema"] = schema
        for key in keys:
            if key in out:
                raise ConfigError(f"{shown(root, existing.path)}: key '{key}' is declared there and in tracking.toml "
                                  f"[packs.{pid}]; keep one")
            out[key] = table[key]
            del table[key]
        moved.append(Moved(pid, existing.path, tuple(keys), removed))
        texts[existing.path] = tomlkit.dumps(out)
    return moved, texts
