"""Payloads: a runtime file too large for one carry, split into parts that may reach the GPU host over several calls.

A payload (``[[bases.NAME.payloads]]`` in a manifest, e.g. TransformerEngine's 277 MB core wheel) is packed by
``harness bundle`` as one xz stream cut into parts of at most ``part_size`` bytes, written beside the bundle in
``<bundle>.parts/``; ``bundle.json`` lists, per payload, every part with its sha256 and size, the sha256 of the
whole stream and of the file it unpacks to. On the GPU host each call may bring some of the parts:

* ``stage`` copies the parts a call brought into a directory that outlives the call (``--parts DIR`` of
  ``python -m harness.bootstrap``), checking each against ``bundle.json`` as it arrives, so a damaged part is
  named on the call that brought it, not at the end;
* ``assemble`` runs once every part is there: it checks every part again, joins and unpacks them into
  ``NAME.partial`` beside the destination, checks the whole, and only then renames it into place. A missing or
  damaged part, or a whole that fails its sha256, leaves no file under the final name.

Standard library only: the bootstrap uses it before the harness's dependencies are installed.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
from pathlib import Path

from harness.base.hashing import sha256_file
from harness.errors import BundleError

MiB = 1024 * 1024
CHUNK = 4 * MiB


def part_name(stem: str, index: int, count: int) -> str:
    return f"{stem}.part-{index:03d}-of-{count:03d}"


def pack(src: Path, dest_dir: Path, stem: str, part_size: int, preset: int = 9) -> dict:
    """``src`` as an xz stream cut into parts of at most ``part_size`` bytes in ``dest_dir``; the index entry.

    The stream is written to ``<stem>.xz.partial`` first and cut after its sha256 is known, so a failure leaves
    no part that a later call could mistake for a complete set.
    """
    if part_size < 1:
        raise BundleError(f"part size must be at least 1 byte, got {part_size}")
    dest_dir.mkdir(parents=True, exist_ok=True)
    stream = dest_dir / f"{stem}.xz.partial"
    try:
        with open(src, "rb") as fin, open(stream, "wb") as fout:
            comp = lzma.LZMACompressor(preset=preset)
            while chunk := fin.read(CHUNK):
                fout.write(comp.compress(chunk))
            fout.write(comp.flush())
        total = stream.stat().st_size
        count = max(1, -(-total // part_size))
        parts = []
        with open(stream, "rb") as fin:
            for i in range(1, count + 1):
                name = part_name(stem, i, count)
                digest = hashlib.sha256()
                with open(dest_dir / name, "wb") as out:
                    left = min(part_size, total - (i - 1) * part_size)
                    while left:
                        chunk = fin.read(min(CHUNK, left))
                        digest.update(chunk)
                        out.write(chunk)
                        left -= len(chunk)
                parts.append({"file": name, "sha256": digest.hexdigest(), "size": (dest_dir / name).stat().st_size})
        packed = {"compression": "xz", "sha256": sha256_file(stream), "size": total}
    finally:
        stream.unlink(missing_ok=True)
    return {"packed": packed, "parts": parts, "sha256": sha256_file(src), "size": src.stat().st_size}


def _check_part(path: Path, part: dict, payload: str) -> str | None:
    """Why ``path`` is not ``part`` (None when it is)."""
    if not path.is_file():
        return "missing"
    if path.stat().st_size != part["size"]:
        return f"{path.stat().st_size} bytes, expected {part['size']}"
    digest = sha256_file(path)
    if digest != part["sha256"]:
        return f"sha256 {digest[:12]}, expected {part['sha256'][:12]}"
    return None


def stage(entry: dict, src: Path, parts_dir: Path) -> list[str]:
    """Copy the parts of ``entry`` found in ``src`` into ``parts_dir``, each checked first; the names copied.

    A part in ``src`` that fails its size or sha256 stops the call naming it, and nothing of it is copied; a part
    already staged is not copied again.
    """
    parts_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for part in entry["parts"]:
        there = src / part["file"]
        if not there.exists():
            continue
        why = _check_part(there, part, entry["name"])
        if why:
            raise BundleError(f"payload {entry['name']}: part {part['file']} in {src} is damaged ({why}); "
                              "nothing of it was staged", hint="make the parts again, or carry that part again")
        if _check_part(parts_dir / part["file"], part, entry["name"]) is None:
            continue
        tmp = parts_dir / f".{part['file']}.partial"
        shutil.copyfile(there, tmp)
        os.replace(tmp, parts_dir / part["file"])
        copied.append(part["file"])
    return copied


def missing(entry: dict, parts_dir: Path) -> list[str]:
    """The parts of ``entry`` not yet in ``parts_dir`` (by name; their content is checked by ``assemble``)."""
    return [p["file"] for p in entry["parts"] if not (parts_dir / p["file"]).is_file()]


def assemble(entry: dict, parts_dir: Path, dest: Path) -> Path:
    """Join, unpack and check ``entry``'s parts from ``parts_dir`` into ``dest``, atomically; ``dest``.

    ``dest`` already there with the right sha256 is kept as it is. Every failure names the payload and the part
    (or says the whole failed), and leaves neither ``dest`` nor a partial file behind.
    """
    name = entry["name"]
    if dest.is_file() and sha256_file(dest) == entry["sha256"]:
        return dest
    absent = missing(entry, parts_dir)
    if absent:
        raise BundleError(f"payload {name}: {len(absent)} of {len(entry['parts'])} part(s) missing in {parts_dir}: "
                          f"{', '.join(absent)}", hint="carry them and stage them with --parts DIR --stage SRC")
    for part in entry["parts"]:
        why = _check_part(parts_dir / part["file"], part, name)
        if why:
            raise BundleError(f"payload {name}: part {part['file']} in {parts_dir} is damaged ({why})",
                              hint=f"remove {parts_dir / part['file']} and carry that part again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    try:
        packed = hashlib.sha256()
        plain = hashlib.sha256()
        dec = lzma.LZMADecompressor()
        with open(partial, "wb") as out:
            for part in entry["parts"]:
                with open(parts_dir / part["file"], "rb") as fin:
                    while chunk := fin.read(CHUNK):
                        packed.update(chunk)
                        data = dec.decompress(chunk)
                        plain.update(data)
                        out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if packed.hexdigest() != entry["packed"]["sha256"] or not dec.eof:
            raise BundleError(f"payload {name}: the joined parts fail the sha256 of the whole stream "
                              f"({packed.hexdigest()[:12]}, expected {entry['packed']['sha256'][:12]})",
                              hint="the parts belong to another bundle: stage the parts of this one")
        if plain.hexdigest() != entry["sha256"]:
            raise BundleError(f"payload {name}: unpacked, it fails its sha256 ({plain.hexdigest()[:12]}, expected "
                              f"{entry['sha256'][:12]}); nothing was installed")
        os.replace(partial, dest)
    except lzma.LZMAError as exc:
        raise BundleError(f"payload {name}: the joined parts are not one xz stream ({exc})",
                          hint="the parts belong to another bundle: stage the parts of this one") from None
    except OSError as exc:
        raise BundleError(f"payload {name}: cannot write {dest}: {exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return dest
