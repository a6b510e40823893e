"""Prune the CUDA device code of a shared library to one GPU architecture, in place, with the standard library.

A CUDA shared object keeps its device code in the ELF section ``.nv_fatbin``: a row of fat binaries (one per
translation unit), each a 16-byte header (magic ``0xBA55ED50``, version, header size, payload size) followed by
entries, one per architecture (a cubin or PTX, itself with a header giving kind, size and ``sm`` number at byte
28). The CUDA runtime registers each fat binary through a pointer to its header and picks, for the device it runs
on, the entry that fits. ``prune`` keeps, in every fat binary, only the entries of the chosen ``sm`` (``sm_90``
keeps ``sm_90`` and ``sm_90a``): it moves them to the front of that fat binary's slot, rewrites the payload size
in its header and zero-fills the rest of the slot. Offsets, sizes and every symbol stay where they were, so the
file keeps its length, and the freed slots compress to almost nothing: that is what makes a 343 MB library fit
one carry (TransformerEngine 2.20.2: docs/packs/notes/te-03-routes.md).

This is what ``nvprune`` does to the loader's view, for hosts where ``nvprune`` cannot be had (it ships with the
CUDA toolkit only). A fat binary with no entry of the chosen architecture is left whole (counted in the report):
its kernels then still run where they did, and on the chosen GPU they fail as they would have.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
from base64 import urlsafe_b64encode
from dataclasses import dataclass, field
from hashlib import sha256

from harness.errors import BundleError

MAGIC = 0xBA55ED50
SECTION = ".nv_fatbin"
KINDS = {1: "ptx", 2: "elf"}
_ARCH = re.compile(r"^sm_([0-9]+)[a-z]?$")


def arch_number(arch: str) -> int:
    """``"sm_90"`` (or ``"sm_90a"``) -> 90; anything else is bad input."""
    m = _ARCH.match(arch)
    if not m:
        raise BundleError(f"prune_arch {arch!r} must read like \"sm_90\"")
    return int(m.group(1))


@dataclass
class Report:
    """What ``prune`` found and kept, in bytes as stored in the library (entries are often compressed)."""

    fatbins: int = 0
    by_arch: dict[str, int] = field(default_factory=dict)  # "elf:sm_90" -> bytes before pruning
    kept: int = 0
    left_whole: int = 0  # fat binaries without an entry of the chosen architecture

    def describe(self) -> dict:
        return {"fatbins": self.fatbins, "by_arch": dict(sorted(self.by_arch.items())), "kept_bytes": self.kept,
                "left_whole": self.left_whole}


def section(data: bytes | bytearray, name: str = SECTION) -> tuple[int, int] | None:
    """(file offset, size) of the ELF64 little-endian section ``name``; None when the file has none."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shstrndx >= shnum:
        return None
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    str_off = headers[shstrndx][4]
    for h in headers:
        end = data.index(b"\0", str_off + h[0])
        if bytes(data[str_off + h[0]:end]).decode("ascii", "replace") == name:
            return h[4], h[5]
    return None


def prune(data: bytearray, arch: str, label: str = "library") -> Report | None:
    """Keep only ``arch``'s entries in every fat binary of ``data`` (modified in place); None: no device code."""
    keep = arch_number(arch)
    found = section(data)
    if found is None:
        return None
    off, size = found
    report = Report()
    p = off
    while p + 16 <= off + size:
        magic, _, hsize, fsize = struct.unpack_from("<IHHQ", data, p)
        if magic != MAGIC:  # fat binaries are 8-byte aligned; the gaps between them are padding
            p += 8
            continue
        report.fatbins += 1
        start, end = p + hsize, p + hsize + fsize
        if end > off + size:
            raise BundleError(f"{label}: fat binary at offset {p} runs past the end of {SECTION}; not pruned")
        kept, q = [], start
        while q < end:
            kind, _, ehsize, padded = struct.unpack_from("<HHIQ", data, q)
            entry_arch, = struct.unpack_from("<I", data, q + 28)
            length = ehsize + padded
            key = f"{KINDS.get(kind, str(kind))}:sm_{entry_arch}"
            report.by_arch[key] = report.by_arch.get(key, 0) + length
            if entry_arch == keep:
                kept.append(bytes(data[q:q + length]))
            q += length
        if not kept:
            report.left_whole += 1
        else:
            blob = b"".join(kept)
            data[start:end] = bytes(end - start)
            data[start:start + len(blob)] = blob
            struct.pack_into("<Q", data, p + 8, len(blob))
            report.kept += len(blob)
        p = (end + 7) & ~7
    return report


def _record_hash(content: bytes) -> str:
    return "sha256=" + urlsafe_b64encode(sha256(content).digest()).rstrip(b"=").decode()


def prune_wheel(src, dest, arch: str) -> dict[str, dict]:
    """Write ``src`` (a wheel) to ``dest`` with every shared object pruned to ``arch``, members stored uncompressed.

    The wheel's RECORD gets the new hashes and sizes, so it installs as a valid wheel; member order and dates are
    kept, so the same input gives the same bytes. Returns one report per pruned member.
    """
    reports: dict[str, dict] = {}
    changed: dict[str, bytes] = {}
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        for info in infos:
            if ".so" in info.filename.rsplit("/", 1)[-1]:
                data = bytearray(zin.read(info))
                rep = prune(data, arch, f"{src}!{info.filename}")
                if rep is not None:
                    changed[info.filename] = bytes(data)
                    reports[info.filename] = rep.describe()
        record = next((i.filename for i in infos if i.filename.endswith(".dist-info/RECORD")), None)
        with zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zout:
            for info in infos:
                content = changed.get(info.filename)
                if content is None:
                    content = zin.read(info)
                if info.filename == record and changed:
                    content = _rewrite_record(content.decode(), changed).encode()
                copy = zipfile.ZipInfo(info.filename, info.date_time)
                copy.external_attr = info.external_attr
                zout.writestr(copy, content, zipfile.ZIP_STORED)
    return reports


def _rewrite_record(text: str, changed: dict[str, bytes]) -> str:
    out = io.StringIO()
    for line in text.splitlines():
        name = line.rsplit(",", 2)[0]
        if name in changed:
            line = f"{name},{_record_hash(changed[name])},{len(changed[name])}"
        out.write(line + "\n")
    return out.getvalue()
