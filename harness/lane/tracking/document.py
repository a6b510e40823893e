"""``Tracking``: tracking.toml parsed and validated, with its round-trippable document, and the tool's edits to
it (recorded, then replayed under a lock on the file as it is when saved)."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomlkit
from filelock import FileLock

from harness.base import ui
from harness.base.tomlutil import field, load_document
from harness.errors import ConfigError, WriteError
from harness.lane.tracking import layout
from harness.lane.tracking.load import _check_graph, _load_pack, key_located, located, unknown_keys
from harness.lane.tracking.model import PACK_ID, SCHEMA, VERDICTS, VERDICTS_NOTE_LINES, Pack, normalize_id, shown_id
from harness.upstream import pins


class Tracking:
    """The parsed, validated tracking.toml plus its round-trippable document.

    The tool's edits go through ``edit`` (or the ``record_*`` / ``update_*`` methods built on it):
    each is applied to ``doc`` at once and remembered, and ``save`` replays them, under a lock, on
    the file as it is then. Two processes that loaded the file before either saved therefore both
    keep their edits, and a person's edit saved in the meantime survives.
    """

    def __init__(self, root: Path, path: Path, doc: tomlkit.TOMLDocument, packs: dict[str, Pack]):
        self.root = root
        self.path = path
        self.doc = doc
        self.packs = packs
        self._edits: list[tuple[Callable[[tomlkit.TOMLDocument], None], str | None]] = []

    @classmethod
    def load(cls, root: Path, path: Path | None = None, *, missing_selections_ok: bool = False) -> Tracking:
        """tracking.toml, checked whole. ``missing_selections_ok``: a suite whose recorded selection is missing gets
        no lanes instead of refusing the file (only for ``harness suite select``, which records it again)."""
        path = path or root / "tracking.toml"
        doc = load_document(path)
        schema = doc.get("schema")
        if schema is not None and schema != SCHEMA:
            raise ConfigError(f"{path}: key 'schema' is {schema!r}; this harness reads schema {SCHEMA}",
                              hint="upgrade the harness, or check the file was not written by another tool")
        packs_table = doc.get("packs")
        if not isinstance(packs_table, dict) or not packs_table:
            raise ConfigError(f"{path}: no [packs.NN] tables")
        for pid, table in packs_table.items():
            where = f"{path} [packs.{pid}]"
            if not PACK_ID.match(pid):
                raise ConfigError(f"{where}: pack ids are two digits, like 09")
            if not isinstance(table, dict):
                raise ConfigError(f"{where}: must be a table")
        declared = {pid: layout.load_declarations(root, field(table, "target", str, f"{path} [packs.{pid}]"), pid,
                                                  SCHEMA) for pid, table in packs_table.items()}  # each read once
        found = unknown_keys(path, doc, root, declared)
        for line in (x for x in found if "unknown" not in x):
            ui.warn(line)  # a missing 'schema' line: a note
        typos = [located(x, root) for x in found if "unknown" in x]
        if typos:  # a misspelt key would be ignored: a lane falling back to defaults, a check never made
            raise ConfigError(typos[0] + (f" (and {len(typos) - 1} more: harness check lists them)" if typos[1:]
                                          else ""), hint="fix or remove the key; every command refuses it")
        packs = {}
        manifests: dict[str, pins.Manifest] = {}
        for pid, table in packs_table.items():
            where = f"{path} [packs.{pid}]"
            decl = declared[pid]
            if decl.exists:  # what the pack declares is read from its file, and from there only
                there = layout.shown(root, decl.path)
                misplaced = layout.misplaced_in_tracking(root, path, pid, table, decl.path)
                if misplaced:
                    raise ConfigError(misplaced[0] + (f" (and {len(misplaced) - 1} more)" if misplaced[1:] else ""),
                                      hint=f"keep each key in one place: move it to {there}")
                try:
                    packs[pid] = _load_pack(root, pid, table, decl.doc, where, there, manifests,
                                            missing_selections_ok)
                except ConfigError as exc:  # the line of the key at fault, in the pack's own file
                    raise ConfigError(key_located(str(exc), root), hint=exc.hint) from None
            else:  # the single-file form, before 'harness migrate': the declarations sit in [packs.NN] itself
                packs[pid] = _load_pack(root, pid, table, table, where, where, manifests, missing_selections_ok)
        _check_graph(path, packs)
        table = doc.get(VERDICTS)
        if table is not None and (not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values())):
            raise ConfigError(f"{path}: [{VERDICTS}] holds one string per pack (generated)",
                              hint="run 'harness receipts sync' to write it again from receipts/")
        return cls(root, path, doc, packs)

    def pack(self, pid: str) -> Pack:
        pid = normalize_id(pid)
        try:
            return self.packs[pid]
        except KeyError:
            raise ConfigError(f"no pack '{shown_id(pid)}' in {self.path} (packs: {', '.join(self.packs)})") from None

    def closure(self, pid: str) -> list[Pack]:
        """The pack's dependencies (transitively, dependencies first), then the pack."""
        order: list[Pack] = []
        seen: set[str] = set()

        def visit(p: str) -> None:
            if p in seen:
                return
            seen.add(p)
            for dep in self.packs[p].depends_on:
                visit(dep)
            order.append(self.packs[p])

        visit(self.pack(pid).id)
        return order

    # ------------------------------------------------------------------ tool edits

    def edit(self, change: Callable[[tomlkit.TOMLDocument], None], pack: str | None = None) -> None:
        """Apply ``change`` to the document now, and again to the file's current text when saving.

        ``pack`` names the pack whose table it changes, for the message when that pack is gone by then.
        """
        change(self.doc)
        self._edits.append((change, pack))

    def verdicts(self) -> dict[str, str]:
        """The generated ``[verdicts]`` lines as they are in the file (pack id: line)."""
        table = self.doc.get(VERDICTS) or {}
        return {str(k): str(v) for k, v in table.items()}

    def record_verdicts(self, lines: dict[str, str] | Callable[[], dict[str, str]], pack: str | None = None) -> None:
        """Set the ``[verdicts]`` lines of the packs in ``lines`` (other packs' lines stay). A callable is asked
        each time the edit is made, the last time under the file's lock when saving: two runs of one pack that
        save one after the other then both count, the later line made from both runs' receipts."""
        self.edit(lambda doc: _set_verdicts(doc, lines() if callable(lines) else lines, whole=False), pack)

    def rewrite_verdicts(self, lines: dict[str, str]) -> None:
        """Make ``[verdicts]`` hold exactly ``lines``, in their order (``receipts sync``)."""
        self.edit(lambda doc: _set_verdicts(doc, lines, whole=True))

    def update_thread(self, pid: str, index: int, values: dict[str, Any]) -> None:
        """Set keys of ``[[packs.<pid>.threads]]`` entry ``index`` (existing keys keep their place)."""

        def change(doc) -> None:
            thread = doc["packs"][pid]["threads"][index]
            for key, value in values.items():
                if value is not None:
                    thread[key] = value

        self.edit(change, pid)

    def check_filing_slot(self, pid: str) -> None:
        table = self.doc["packs"][pid]
        if "filing" in table and not isinstance(table["filing"], dict):
            raise ConfigError(f"{self.path} [packs.{pid}]: key 'filing' is a note, not a table; "
                              "a filing cannot be recorded over it")

    def record_filing(self, pid: str, entry: dict[str, Any]) -> None:
        """Set ``[packs.<pid>.filing]``: who decided to post, when, and what was posted."""
        self.check_filing_slot(pid)

        def change(doc) -> None:
            filing = tomlkit.table()
            for key, value in entry.items():
                if value is not None:
                    filing[key] = value
            doc["packs"][pid]["filing"] = filing

        self.edit(change, pid)

    def save(self) -> None:
        """Write the edits made since the last save, serialized with every other process saving this file.

        Under an exclusive lock (``.<name>.lock`` beside the file) the file is read again, the edits
        are replayed on what it holds now, and the result replaces it atomically: the old file stays
        whole if anything fails.
        """
        with locked(self.path):
            doc = load_document(self.path)
            for change, pid in self._edits:
                try:
                    change(doc)
                except (KeyError, IndexError) as exc:
                    packs = doc.get("packs")
                    if pid is not None and (not isinstance(packs, dict) or pid not in packs):
                        gone = f"[packs.{pid}] was removed from it"
                    else:
                        gone = f"what this command updates{f' in [packs.{pid}]' if pid else ''} is gone ({exc})"
                    raise ConfigError(f"{self.path}: changed while this command ran; {gone}, so this command's "
                                      "update cannot be applied (nothing written)") from None
            replace_text(self.path, note_before_verdicts(tomlkit.dumps(doc)))
        self.doc = doc
        self._edits.clear()


def note_before_verdicts(text: str) -> str:
    """``text`` with the generated table's note right above ``[verdicts]``. tomlkit keeps a comment with the table
    before it, so a pack table added after the last one (``harness new``, ``migrate``) landed between the note
    and ``[verdicts]``, under "do not edit". Comments only move: the data is the same."""
    note = "\n".join(VERDICTS_NOTE_LINES) + "\n"
    header = re.search(rf"^\[{VERDICTS}\][ \t]*$", text, re.M)
    at = text.find(note)
    if header is None or at < 0 or text[:header.start()].rstrip("\n").endswith(note.rstrip("\n")):
        return text
    end = at + len(note)
    while end < len(text) and text[end] == "\n" and text[at - 2:at] == "\n\n":  # the blank line it leaves
        end += 1
    rest = text[:at] + text[end:]
    header = re.search(rf"^\[{VERDICTS}\][ \t]*$", rest, re.M)
    assert header is not None
    return rest[:header.start()].rstrip("\n") + "\n\n" + note + "\n" + rest[header.start():]


def _set_verdicts(doc, lines: dict[str, str], whole: bool) -> None:
    """Set lines of the generated ``[verdicts]`` table, made last in the file, under its note, when missing;
    ``whole``: the table holds exactly ``lines`` afterwards."""
    if VERDICTS not in doc:
        doc.add(tomlkit.nl())
        for line in VERDICTS_NOTE_LINES:
            doc.add(tomlkit.comment(line[2:]))
        doc.append(VERDICTS, tomlkit.table())
    table = doc[VERDICTS]
    for pid in lines:
        doc["packs"][pid]  # noqa: B018 -- a pack removed meanwhile is a KeyError: save names it, writes nothing
    if whole:
        for pid in list(table):
            del table[pid]
    for pid, line in lines.items():
        table[pid] = line


def replace_text(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one rename, keeping its mode (a new file gets the umask's): the old file
    stays whole if anything fails."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)  # the file keeps its mode (mkstemp would make it 0600)
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        mode = 0o666 & ~mask
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=path.parent)
    except OSError as exc:
        raise WriteError.of(exc, f"{path.name}'s new copy", path.parent) from None
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())  # a full disk shows here at the latest, before the old file is replaced
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise WriteError.of(exc, path.name, path, hint=f"free space in {path.parent}; {path} is as it was") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(path: Path):
    """The lock that serializes savers of ``path``; a lock file that cannot be made (a read-only checkout, a full
    disk) is exit IO naming it, with the way to run without recording in tracking.toml."""
    lock = FileLock(str(path.with_name(f".{path.name}.lock")))
    try:
        lock.acquire()
    except OSError as exc:
        raise WriteError(f"cannot write {path.name}: its lock {lock.lock_file}: {exc.strerror or exc}; {path} is as "
                         "it was", hint="a read-only checkout? pass --no-tracking (run, sweep) to record nothing in "
                                        "tracking.toml, or use a writable copy") from None
    try:
        yield
    finally:
        lock.release()
