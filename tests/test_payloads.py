"""Payloads: a runtime wheel too large for one carry, pruned to one GPU arch, packed in parts, joined on the GPU host.

The large artefact is faked: a wheel whose shared object is a real (minimal) ELF file with a ``.nv_fatbin`` section
holding fat binaries laid out as the CUDA toolchain lays them out, one entry per architecture, filled with random
bytes so that what is kept, and what the parts weigh, is measurable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, cli
from test_runtime import _wheel

from harness.errors import BundleError, ConfigError, Exit
from harness.host import fatbin, payloads
from harness.upstream.pins import load_manifest

KIB = 1024


def fat_binary(entries: list[tuple[int, bytes]]) -> bytes:
    """One fat binary: its 16-byte header, then one 64-byte entry header + payload per (sm, payload)."""
    body = b""
    for arch, payload in entries:
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, 2, 0x101, 64, len(payload))
        struct.pack_into("<I", head, 20, len(payload))
        struct.pack_into("<I", head, 28, arch)
        body += bytes(head) + payload
    return struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(body)) + body


def elf_with_fatbins(fatbins: list[bytes]) -> bytes:
    """A minimal ELF64 little-endian file: header, a .nv_fatbin section (8-byte aligned fat binaries), shstrtab."""
    section = b""
    for fb in fatbins:
        section += fb + bytes(-len(fb) % 8)
    names = b"\0.nv_fatbin\0.shstrtab\0"
    sec_off = 64
    str_off = sec_off + len(section)
    sh_off = str_off + len(names) + (-(str_off + len(names)) % 8)
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x28, sh_off)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 2)
    headers = [bytes(64),
               struct.pack("<IIQQQQIIQQ", 1, 1, 2, 0, sec_off, len(section), 0, 0, 8, 0),
               struct.pack("<IIQQQQIIQQ", 12, 3, 0, 0, str_off, len(names), 0, 0, 1, 0)]
    body = bytes(head) + section + names
    return body + bytes(sh_off - len(body)) + b"".join(headers)


def entries_of(data: bytes) -> list[list[int]]:
    """The architectures of each fat binary's entries, as a loader walking the section sees them."""
    off, size = fatbin.section(data)
    out, p = [], off
    while p + 16 <= off + size:
        magic, _, hsize, fsize = struct.unpack_from("<IHHQ", data, p)
        if magic != fatbin.MAGIC:
            p += 8
            continue
        arches, q = [], p + hsize
        while q < p + hsize + fsize:
            _, _, ehs, padded = struct.unpack_from("<HHIQ", data, q)
            arches.append(struct.unpack_from("<I", data, q + 28)[0])
            q += ehs + padded
        out.append(arches)
        p = (p + hsize + fsize + 7) & ~7
    return out


def big_library(kept: int = 300 * KIB, other: int = 200 * KIB) -> bytes:
    rnd = os.urandom
    return elf_with_fatbins([
        fat_binary([(80, rnd(other)), (90, rnd(kept)), (100, rnd(other))]),
        fat_binary([(75, rnd(other)), (90, rnd(kept // 2)), (90, rnd(999)), (120, rnd(other))]),  # sm_90 + sm_90a
        fat_binary([(100, rnd(other))]),  # Blackwell-only kernels: nothing for sm_90
    ])


def big_wheel(dest: Path, library: bytes) -> Path:
    path = dest / "bigdep-1.0-py3-none-manylinux_2_28_x86_64.whl"
    info = "bigdep-1.0.dist-info"
    files = {"bigdep/__init__.py": b"VERSION = '1.0'\n", "bigdep/lib/libbig.so": library,
             f"{info}/METADATA": b"Metadata-Version: 2.1\nName: bigdep\nVersion: 1.0\n",
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-any\n"}
    record = "".join(f"{name},{fatbin._record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), data)
    return path


# --------------------------------------------------------------------------- pruning

def test_prune_keeps_only_the_chosen_arch_and_keeps_the_file_length():
    data = bytearray(big_library())
    before = bytes(data)
    report = fatbin.prune(data, "sm_90")
    assert len(data) == len(before)
    assert entries_of(bytes(data)) == [[90], [90, 90], [100]]  # the third has no sm_90 entry: left whole
    assert report.fatbins == 3 and report.left_whole == 1
    assert report.kept == (64 + 300 * KIB) + (64 + 150 * KIB) + (64 + 999)
    assert report.by_arch["elf:sm_80"] == 64 + 200 * KIB and report.by_arch["elf:sm_100"] == 2 * (64 + 200 * KIB)
    # what was dropped is zeros now: the library packs to about what was kept (+ the fat binary left whole)
    left = 64 + 200 * KIB
    assert len(payloads_xz(bytes(data))) < report.kept + left + 16 * KIB < len(payloads_xz(before))


def payloads_xz(data: bytes) -> bytes:
    import lzma
    return lzma.compress(data, preset=6)


def test_prune_refuses_a_bad_arch_and_leaves_a_file_without_device_code_alone():
    with pytest.raises(BundleError, match="must read like"):
        fatbin.prune(bytearray(big_library()), "90")
    plain = bytearray(b"\x7fELF\x02\x01" + bytes(58))
    assert fatbin.prune(plain, "sm_90") is None
    assert fatbin.prune(bytearray(b"not an elf at all"), "sm_90") is None


def test_prune_wheel_rewrites_record_and_is_deterministic(tmp_path):
    src = big_wheel(tmp_path, big_library())
    one, two = tmp_path / "one.whl", tmp_path / "two.whl"
    reports = fatbin.prune_wheel(src, one, "sm_90")
    fatbin.prune_wheel(src, two, "sm_90")
    assert list(reports) == ["bigdep/lib/libbig.so"] and reports["bigdep/lib/libbig.so"]["left_whole"] == 1
    assert one.read_bytes() == two.read_bytes()
    with zipfile.ZipFile(one) as zf:
        lib = zf.read("bigdep/lib/libbig.so")
        record = zf.read("bigdep-1.0.dist-info/RECORD").decode()
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
    assert entries_of(lib) == [[90], [90, 90], [100]]
    assert f"bigdep/lib/libbig.so,{fatbin._record_hash(lib)},{len(lib)}" in record.splitlines()


# --------------------------------------------------------------------------- parts

@pytest.fixture
def packed(tmp_path):
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(700 * KIB) + bytes(2 * 2**20))
    entry = {"name": "big", "file": "wheels/big.bin"} | payloads.pack(src, tmp_path / "parts", "big.bin", 256 * KIB)
    return entry, src, tmp_path / "parts"


def test_pack_cuts_parts_no_larger_than_asked_and_assemble_gives_the_file_back(packed, tmp_path):
    entry, src, parts = packed
    assert [p["file"] for p in entry["parts"]] == [f"big.bin.part-00{i}-of-003" for i in (1, 2, 3)]
    assert all(p["size"] <= 256 * KIB for p in entry["parts"])
    assert sum(p["size"] for p in entry["parts"]) == entry["packed"]["size"]
    assert sorted(x.name for x in parts.iterdir()) == [p["file"] for p in entry["parts"]]  # no stream left over
    dest = payloads.assemble(entry, parts, tmp_path / "out" / "big.bin")
    assert dest.read_bytes() == src.read_bytes()
    assert entry["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()


def test_a_damaged_part_is_named_and_nothing_is_joined(packed, tmp_path):
    entry, _, parts = packed
    victim = parts / entry["parts"][1]["file"]
    data = victim.read_bytes()
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    dest = tmp_path / "out" / "big.bin"
    with pytest.raises(BundleError, match=r"part big\.bin\.part-002-of-003 .* is damaged \(sha256"):
        payloads.assemble(entry, parts, dest)
    assert not dest.parent.exists() or list(dest.parent.iterdir()) == []


def test_a_missing_part_is_named(packed, tmp_path):
    entry, _, parts = packed
    (parts / entry["parts"][2]["file"]).unlink()
    with pytest.raises(BundleError, match=r"1 of 3 part\(s\) missing .*big\.bin\.part-003-of-003"):
        payloads.assemble(entry, parts, tmp_path / "out" / "big.bin")
    assert payloads.missing(entry, parts) == ["big.bin.part-003-of-003"]


def test_parts_of_another_stream_leave_no_file_under_the_final_name(packed, tmp_path):
    """Each part matches its own sha256, but they are not this payload's stream: the whole check refuses it."""
    entry, _, parts = packed
    wrong = dict(entry, packed=dict(entry["packed"], sha256="0" * 64))
    dest = tmp_path / "out" / "big.bin"
    with pytest.raises(BundleError, match="fail the sha256 of the whole stream"):
        payloads.assemble(wrong, parts, dest)
    assert list(dest.parent.iterdir()) == []  # neither big.bin nor big.bin.partial
    unpacked_wrong = dict(entry, sha256="1" * 64)
    with pytest.raises(BundleError, match="unpacked, it fails its sha256"):
        payloads.assemble(unpacked_wrong, parts, dest)
    assert list(dest.parent.iterdir()) == []
    # a stale file under the final name is replaced only by a checked whole
    dest.write_bytes(b"stale")
    payloads.assemble(entry, parts, dest)
    assert dest.stat().st_size == entry["size"]


def test_stage_checks_each_part_as_it_arrives(packed, tmp_path):
    entry, _, parts = packed
    keep = tmp_path / "keep"
    first = tmp_path / "call1"
    first.mkdir()
    shutil.copy(parts / entry["parts"][0]["file"], first)
    assert payloads.stage(entry, first, keep) == [entry["parts"][0]["file"]]
    assert payloads.stage(entry, first, keep) == []  # already there: not copied again
    second = tmp_path / "call2"
    second.mkdir()
    for p in entry["parts"][1:]:
        shutil.copy(parts / p["file"], second)
    bad = second / entry["parts"][2]["file"]
    bad.write_bytes(bad.read_bytes()[:-10])
    with pytest.raises(BundleError, match=r"part big\.bin\.part-003-of-003 in .* is damaged \(\d+ bytes"):
        payloads.stage(entry, second, keep)
    assert not (keep / entry["parts"][2]["file"]).exists()
    assert [p.name for p in keep.iterdir() if p.name.startswith(".")] == []


# --------------------------------------------------------------------------- manifest

PAYLOAD_TOML = '''
[[bases."1.0".payloads]]
provides = "bigdep==1.0"
filename = "{filename}"
url = "{url}"
sha256 = "{sha}"
prune_arch = "sm_90"
{extra}'''


def add_payload(lane_repo, wheel: Path, extra: str = "", provides: str = "bigdep==1.0") -> None:
    path = lane_repo.root / "upstream" / "fake.toml"
    pin = 'role = "current pin"\n'
    text = path.read_text().replace(pin, pin + 'runtime_requires = ["bigdep==1.0"]\n')
    text += PAYLOAD_TOML.format(filename=wheel.name, url=wheel.as_uri(), extra=extra,
                                sha=hashlib.sha256(wheel.read_bytes()).hexdigest()).replace("bigdep==1.0", provides)
    path.write_text(text)


def test_manifest_payloads_are_typed_and_closed(lane_repo, tmp_path, capsys):
    wheel = big_wheel(tmp_path, big_library())
    add_payload(lane_repo, wheel, extra='colour = "blue"\n')
    [payload] = load_manifest(lane_repo.root, "fake").base("1.0").payloads
    assert (payload.name, payload.prune_arch, payload.artifact.filename) == ("bigdep", "sm_90", wheel.name)
    assert "payloads] #1: unknown key 'colour'" in capsys.readouterr().err
    lane_repo.write_manifest()
    add_payload(lane_repo, wheel, provides="otherdep==2.0")
    with pytest.raises(ConfigError, match="must be one of the base's runtime_requires"):
        load_manifest(lane_repo.root, "fake")
    lane_repo.write_manifest()
    add_payload(lane_repo, wheel, extra="")
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text(path.read_text().replace('prune_arch = "sm_90"', 'prune_arch = "hopper"'))
    with pytest.raises(ConfigError, match='prune_arch must read like "sm_90"'):
        load_manifest(lane_repo.root, "fake")


# --------------------------------------------------------------------------- bundle and bootstrap, end to end

def _bootstrap(archive: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"} | {"PATCHLANE_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "harness.bootstrap", str(archive), *args], capture_output=True,
                          text=True, env=env, cwd=REPO)


def test_bundle_carries_a_pruned_payload_in_parts_joined_over_several_calls(lane_repo, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "tinydep", "1.0")  # stands for the harness's dependency wheels
    big = tmp_path / "artefacts"
    big.mkdir()
    wheel = big_wheel(big, big_library(kept=500 * KIB, other=300 * KIB))
    add_payload(lane_repo, wheel)
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--part-size", "1",
               *lane_repo.args()) == Exit.OK
    import tarfile
    with tarfile.open(out) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
        assert not any(wheel.name in m for m in tf.getnames())  # the payload travels beside, not inside
    [entry] = index["payloads"]
    assert entry["source"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert entry["pruned"]["bigdep/lib/libbig.so"]["kept_bytes"] == (64 + 500 * KIB) + (64 + 250 * KIB) + (64 + 999)
    parts_dir = out.with_name(out.name + ".parts")
    assert len(entry["parts"]) == 2 and all(p["size"] <= 2**20 for p in entry["parts"])
    assert sorted(p.name for p in parts_dir.iterdir()) == [p["file"] for p in entry["parts"]]

    home, keep = tmp_path / "home", tmp_path / "kept-parts"
    call1, call2 = tmp_path / "call1", tmp_path / "call2"
    call1.mkdir()
    call2.mkdir()
    shutil.copy(parts_dir / entry["parts"][0]["file"], call1)
    shutil.copy(parts_dir / entry["parts"][1]["file"], call2)
    staged = _bootstrap(out, "--parts", str(keep), "--stage", str(call1), "--", home=home)
    assert staged.returncode == Exit.OK, staged.stderr
    assert f"1 of 2 part(s) in {keep}; missing: {entry['parts'][1]['file']}" in staged.stderr
    run = ("prepare", "01", "--root", str(lane_repo.root))
    early = _bootstrap(out, "--parts", str(keep), "--", *run, home=home)
    assert early.returncode == Exit.PIN
    assert f"1 of 2 part(s) missing in {keep}: {entry['parts'][1]['file']}" in early.stderr
    damaged = call2 / entry["parts"][1]["file"]
    good = damaged.read_bytes()
    damaged.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    refused = _bootstrap(out, "--parts", str(keep), "--stage", str(call2), "--", home=home)
    assert refused.returncode == Exit.PIN
    assert f"part {entry['parts'][1]['file']} in {call2} is damaged" in refused.stderr
    damaged.write_bytes(good)
    complete = _bootstrap(out, "--parts", str(keep), "--stage", str(call2), "--", home=home)
    assert complete.returncode == Exit.OK, complete.stderr  # the last part staged: the wheel is joined already
    [joined] = (home / "bundles").glob(f"*/patchlane-bundle/{entry['file']}")
    assert "joined into" in complete.stderr and hashlib.sha256(joined.read_bytes()).hexdigest() == entry["sha256"]
    done = _bootstrap(out, "--parts", str(keep), "--", *run, home=home)
    assert done.returncode == Exit.OK, done.stderr
    assert hashlib.sha256(joined.read_bytes()).hexdigest() == entry["sha256"]
    with zipfile.ZipFile(joined) as zf:
        assert entries_of(zf.read("bigdep/lib/libbig.so")) == [[90], [90, 90], [100]]
    [site] = (home / "runtime").glob("*/site")  # the lane's runtime site was installed from the joined wheel
    assert entries_of((site / "bigdep" / "lib" / "libbig.so").read_bytes()) == [[90], [90, 90], [100]]


def test_bootstrap_option_errors_are_usage(tmp_path):
    proc = _bootstrap(tmp_path / "x.tar.xz", "--colour", "blue", "--", home=tmp_path / "home")
    assert proc.returncode == Exit.USAGE and "unexpected '--colour'" in proc.stderr
