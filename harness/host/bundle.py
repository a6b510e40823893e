"""Offline bundles: everything a GPU host without network needs to run chosen packs.

``make`` prepares every lane of the chosen packs here (materialize, apply,
build), then writes one xz-compressed tar holding the built wheels (or overlay
directories), the harness's own dependency wheels at their pins, and the
extra runtime wheels the bases' manifests list, plus ``bundle.json`` with the
sha256 of every file. ``OpenBundle`` is the run side: it checks every hash
before use, and a lane whose build key is not in the bundle is an error, never
a silent rebuild. ``python -m harness.bootstrap`` unpacks a bundle and starts
the harness with only the standard library and pip.

A base's payloads (``[[bases.NAME.payloads]]``: a runtime wheel too large for one carry) are not put in the
archive: each is fetched and checked against its pin, pruned to one GPU architecture where the manifest says
so, packed as xz and cut into parts of at most ``part_size`` bytes in ``<output>.parts/``, and ``bundle.json``
lists the parts with their sha256 (harness/host/payloads.py). The bootstrap joins them on the GPU host.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

from harness.base import guard, hashing, interpreters, ui
from harness.base.hashing import sha256_file
from harness.errors import BundleError
from harness.host import fatbin, payloads
from harness.host.index import FORMAT, TOP
from harness.host.wheels import HARNESS_WHEELS, download_wheels, lock_file
from harness.lane import builds, kernel_cache, lanes, receipts
from harness.lane.context import Context
from harness.lane.tracking import Lane, Pack
from harness.upstream import git, pins
from harness.upstream.pins import Manifest

# One device-tool call carries at most 64 MiB with the working tree (about 5 MiB of it the repository) and the
# bundle itself: 48 MiB parts leave room for both.
PART_SIZE = 48 * 2**20


class Members(dict[str, Path]):
    """The archive's members (name in the archive -> file here) and ``work``, the scratch directory of this one
    ``make`` where the members made for it (tars, stored wheels) are written: one per call, so two bundles made
    from one cache at once never share a file."""

    def __init__(self, work: Path) -> None:
        super().__init__()
        self.work = work
        self.origin: dict[str, str] = {}  # wheels/NAME -> sha256 of the published wheel it was stored from
        self.what: dict[str, str] = {}  # name in the archive -> what it is for, for the size lines


def chosen_lanes(ctx: Context, pack_ids: list[str], bases: list[str] | None = None,
                 only: dict[str, list[str]] | None = None) -> list[tuple[Pack, list[Lane]]]:
    """The packs and the lanes of each the bundle carries: ``only`` (pack id -> lane names, the selection of
    ``harness bundle --lane``, which the CLI takes from the sweep's plan) when given, else every lane on
    ``bases`` (all lanes without them). A named pack left with no lane is an error naming its lanes."""
    out = []
    for pid in pack_ids:
        pack = ctx.tracking.pack(pid)
        if only is not None:
            names = set(only.get(pack.id, ()))
            chosen = [lane for lane in pack.lanes if lane.name in names]
        else:
            chosen = [lane for lane in pack.lanes if not bases or lane.base in bases]
        if not chosen:
            what = f"on base(s) {', '.join(bases or [])}" if bases else "selected"
            raise BundleError(f"pack {pack.id} has no lane {what}"
                              f"{' by --lane' if only is not None else ''} "
                              f"(lanes: {', '.join(f'{ln.name}@{ln.base}' for ln in pack.lanes) or 'none'})",
                              hint=f"select some with --lane '{pack.id}:PATTERN', or leave the pack out")
        out.append((pack, chosen))
    return out


def make(ctx: Context, pack_ids: list[str], output: Path, python_version: str = "3.12",
         deps_dir: Path | None = None, bases: list[str] | None = None, kernel_caches: bool = False,
         part_size: int = PART_SIZE, only: dict[str, list[str]] | None = None) -> dict:
    """Write the bundle for ``pack_ids`` to ``output`` (atomically) and return its index.

    ``bases`` keeps only the lanes on those bases, ``only`` (pack id -> lane names) only those lanes
    (``chosen_lanes``): a bundle carries the builds, runtime wheels and test trees of the chosen lanes only.
    ``kernel_caches`` also carries the store's kernel-cache entries whose builds are all in the bundle
    (``_add_kernel_caches``). The bases' payloads go to ``<output>.parts/`` in parts of at most ``part_size``
    bytes. Everything made for the archive goes to a scratch directory of this call, removed at the end.
    """
    selected = chosen_lanes(ctx, pack_ids, bases, only)
    ctx = builder(ctx, python_version, selected)
    scratch = ctx.store.area("tmp")
    sweep_stale_scratch(scratch)
    work = Path(tempfile.mkdtemp(prefix=f"{_SCRATCH}{os.getpid()}-", dir=scratch))
    try:
        return _make(ctx, selected, output, python_version, deps_dir, kernel_caches, part_size, Members(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


_SCRATCH = "bundle-"  # the scratch directory of one make: bundle-<pid>-<random>, under the store's tmp/


def sweep_stale_scratch(tmp: Path) -> list[Path]:
    """Remove the scratch directories of ``make`` calls whose process is gone (killed outright: no cleanup ran);
    return them. A live process's is kept, whoever's it is."""
    removed = []
    for entry in tmp.glob(_SCRATCH + "*"):
        pid = entry.name[len(_SCRATCH):].split("-", 1)[0]
        if not pid.isdigit() or not entry.is_dir() or entry.is_symlink() or guard.process_exists(int(pid)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _make(ctx: Context, selected: list[tuple[Pack, list[Lane]]], output: Path, python_version: str,
          deps_dir: Path | None, kernel_caches: bool, part_size: int, members: Members) -> dict:
    index: dict = {"format": FORMAT, "created": receipts.utc_now().isoformat().replace("+00:00", "Z"),
                   "python": python_version, "packs": [], "builds": {}, "wheels": []}
    runtime: set[tuple[str, ...]] = set()  # one set per prepared lane: a base's pins never mix with another's
    provided: dict[str, pins.Payload] = {}  # runtime pin -> the payload that carries it
    hosted: dict[str, pins.HostBuild] = {}  # compiled on the GPU host from its sdist (harness/lane/host_builds.py)
    for pack, chosen in selected:
        index["packs"].append(pack.id)
        index.setdefault("lanes", {})[pack.id] = [lane.name for lane in chosen]
        for lane in chosen:
            prep = lanes.prepare(ctx, pack, lane, import_check=False)
            # the lane's base and every extra build's (TransformerEngine as a suite's with_builds) bring their own
            for base in (ctx.manifest(pack.target).base(lane.base),
                         *(ctx.manifest(t).base(b) for t, b in lane.extra_builds)):
                for payload in base.payloads:
                    provided[payload.provides] = payload
                for host in base.host_builds:
                    hosted[host.provides] = host
                    runtime.add(tuple(sorted(host.build_requires)))
            runtime.add(tuple(sorted(prep.runtime_requires)))  # the base's and its extra builds' (lanes.prepare)
            label = f"{pack.id}/{lane.name}"
            if prep.patches or not _add_published_wheel(index, members, ctx, prep.build, label,
                                                        prep.manifest, prep.base):
                _add_build(index, members, ctx, prep.build, label)
            # a with_baseline lane also needs its unpatched twin's build on the GPU host
            if prep.baseline is not None and not _add_published_wheel(
                    index, members, ctx, prep.baseline, f"{label}.baseline", prep.manifest, prep.base):
                _add_build(index, members, ctx, prep.baseline, f"{label}.baseline")
            for (target, base_name), build in zip(lane.extra_builds, prep.extras, strict=True):
                manifest = ctx.manifest(target)  # an extra build is of a published base, never patched
                if not _add_published_wheel(index, members, ctx, build, label, manifest, manifest.base(base_name)):
                    _add_build(index, members, ctx, build, label)
            if prep.tests_tree is not None:
                assert prep.tests_tree_key is not None  # set with tests_tree
                _add_tests_tree(index, members, ctx, prep.tests_tree_key, prep.tests_tree, label)
    if kernel_caches:
        _add_kernel_caches(index, members, ctx)
    with ui.status("downloading wheels for the GPU host"):
        if deps_dir is not None:
            wheels = sorted(Path(deps_dir).glob("*.whl"))
        else:
            wheels = download_wheels([[r for r in reqs if r not in provided] for reqs in sorted(runtime)],
                                     members.work / "downloaded", python_version, lock_file(ctx.root))
    stored = members.work / "stored"
    stored.mkdir()
    index["harness_wheels"] = []  # what bootstrap installs for the harness itself: the lock's wheels, never a
    # base's runtime pins (a base may pin a distribution the lock pins at another version: packaging 26.0 / 26.3)
    listed = set()
    for whl in wheels:
        arc = f"wheels/{whl.name}"
        if whl.parent.name == HARNESS_WHEELS or deps_dir is not None:
            index["harness_wheels"].append(arc)
        if arc in listed:  # the lock and a base pin the same file: one copy
            continue
        listed.add(arc)
        downloaded = sha256_file(whl)
        if arc in members:  # a build carried as its published wheel (_add_published_wheel): the same file, once
            if members.origin.get(arc) != downloaded:
                raise BundleError(f"{whl.name}: the runtime wheel pip downloaded (sha256 {downloaded[:12]}) is not "
                                  f"the one a build of the bundle was made from ({members.origin.get(arc, '?')[:12]})")
            members.what[arc] += "; runtime wheel"
        else:
            members[arc] = store_uncompressed(whl, stored / whl.name)
            members.what[arc] = ("harness dependency" if arc in index["harness_wheels"] and deps_dir is None
                                 else "runtime wheel")
        index["wheels"].append({"file": arc, "sha256": sha256_file(members[arc]), "downloaded_sha256": downloaded})
    if hosted:
        index["host_builds"] = [_add_host_build(members, ctx, host) for host in hosted.values()]
    output.parent.mkdir(parents=True, exist_ok=True)
    if provided:
        index["payloads"] = pack_payloads(ctx, list(provided.values()), parts_dir(output), part_size, members.work)
    index["sizes"] = _write(output, index, members)
    return index


def _write(output: Path, index: dict, members: Members) -> list[dict]:
    """The archive, written to a file of this process beside ``output`` and renamed over it; one size row per
    member (bytes in the archive before compression, and how much the xz stream grew while it was written:
    xz holds data back before it writes it, so that figure is approximate for a member much smaller than
    its dictionary, 8 MiB)."""
    partial = output.with_name(f"{output.name}.partial-{os.getpid()}")
    sizes: list[dict] = []
    try:
        with ui.status(f"writing {output.name} (xz)"), open(partial, "wb") as raw, \
                tarfile.open(fileobj=raw, mode="w:xz", preset=6) as tf:
            data = json.dumps(index, indent=2, sort_keys=True).encode()
            info = tarfile.TarInfo(f"{TOP}/bundle.json")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
            for arc, path in sorted(members.items()):
                before = raw.tell()
                tf.add(path, arcname=f"{TOP}/{arc}", recursive=False)
                sizes.append({"file": arc, "bytes": path.stat().st_size, "xz_bytes": raw.tell() - before,
                              "for": members.what.get(arc, "")})
            written = raw.tell()
        if sizes:
            sizes[-1]["xz_bytes"] += partial.stat().st_size - written  # what the end of the stream flushed
        partial.replace(output)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return sizes


CARRY_LIMIT = 64 * 2**20  # what one device-tool call carries: the checkout's working tree and the carried paths


def checkout_bytes(root: Path) -> int | None:
    """The bytes of ``root`` that travel with every device call: tracked and untracked-not-ignored files, and
    ``shared/`` when the checkout has one; None where git cannot say (no git, not a checkout)."""
    done = git.in_user_repo(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if done is None or not done.ok:
        return None
    total, seen = 0, set()
    for name in done.stdout.split("\0"):
        path = root / name
        if name and path.is_file() and not path.is_symlink() and name not in seen:
            seen.add(name)
            total += path.stat().st_size
    shared = root / "shared"
    if shared.is_dir():
        total += sum(p.stat().st_size for p in shared.rglob("*")
                     if p.is_file() and not p.is_symlink() and str(p.relative_to(root)) not in seen)
    return total


def _add_host_build(members: Members, ctx: Context, host: pins.HostBuild) -> dict:
    """The sdist of a host build (fetched, sha256 checked) as a member; its ``bundle.json`` entry."""
    art = host.artifact
    arc = f"host-builds/{art.filename}"
    members[arc] = pins.fetch(art, ctx.store, ctx.sources().artifacts)
    members.what[arc] = f"host build {host.name} (its sdist)"
    return {"name": host.name, "provides": host.provides, "file": arc, "sha256": sha256_file(members[arc]),
            "build_requires": list(host.build_requires), "install_with": list(host.install_with),
            "env": dict(host.env), "include_dirs": list(host.include_dirs), "timeout": host.timeout}


def parts_dir(output: Path) -> Path:
    """Where ``make`` writes the parts of the payloads of the bundle ``output``."""
    return output.with_name(output.name + ".parts")


def pack_payloads(ctx: Context, chosen: list[pins.Payload], dest: Path, part_size: int, scratch: Path) -> list[dict]:
    """Each payload fetched (sha256 checked), pruned where asked (in ``scratch``), packed and cut into parts in
    ``dest``.

    ``dest`` is emptied first: parts of an earlier bundle must not sit beside this one's.
    """
    shutil.rmtree(dest, ignore_errors=True)
    entries = []
    for payload in chosen:
        art = payload.artifact
        with ui.status(f"payload {payload.name}: {art.filename}") as act:
            src = pins.fetch(art, ctx.store, ctx.sources().artifacts)
            entry: dict = {"name": payload.name, "provides": payload.provides, "file": f"wheels/{art.filename}",
                           "source": {"filename": art.filename, "sha256": art.sha256, "size": src.stat().st_size},
                           "prune_arch": payload.prune_arch}
            work = scratch / f"payload-{payload.name}"
            work.mkdir(parents=True)
            if payload.prune_arch:
                pruned = work / art.filename
                entry["pruned"] = fatbin.prune_wheel(src, pruned, payload.prune_arch)
                if not entry["pruned"]:
                    raise BundleError(f"payload {payload.name}: prune_arch {payload.prune_arch} is set, but "
                                      f"{art.filename} holds no shared object with CUDA device code")
                src = pruned
            entry |= payloads.pack(src, dest, art.filename, part_size)
            shutil.rmtree(work, ignore_errors=True)
            act.result = (f"{entry['size']} bytes -> {entry['packed']['size']} packed, "
                          f"{len(entry['parts'])} part(s) in {dest}")
        entries.append(entry)
    return entries


def builder(ctx: Context, python_version: str, selected: list[tuple[Pack, list[Lane]]]) -> Context:
    """``ctx`` with an interpreter of the bundle's Python to build with.

    A wheel build is tagged for, and keyed by, the interpreter that made it: a bundle that says 3.12 must
    not carry cp311 wheels (the GPU host would look for the 3.12 key and not find it). The interpreter is
    found as the megatron sessions find it (``python<X.Y>`` on PATH, else pyenv's). Overlay builds do not
    depend on it: without one, a bundle of overlays only is still made.
    """
    current = builds.interpreter_version(ctx.python)
    if current == python_version:
        return ctx
    found = interpreters.find_interpreter(python_version)
    if found is not None:
        ui.note(f"building with {found} (Python {python_version}, the bundle's), not {ctx.python} "
                f"(Python {current})")
        return dataclasses.replace(ctx, options=dataclasses.replace(ctx.options, python=found))
    wheel_targets = sorted({target for pack, chosen in selected for target in _targets(pack, chosen)
                            if ctx.manifest(target).build == "wheel"})
    if wheel_targets:
        raise BundleError(f"the bundle is for Python {python_version}, but {ctx.python} is Python {current} and no "
                          f"python{python_version} was found (on PATH or under pyenv); {', '.join(wheel_targets)} "
                          f"build(s) wheels, which are made for one Python",
                          hint=f"install python{python_version}, or pass --python-version {current} if the GPU "
                               f"host runs Python {current}")
    return ctx


def _targets(pack: Pack, chosen: list[Lane]) -> set[str]:
    """The targets whose builds the pack's chosen lanes take: its own, and those of ``with_builds``."""
    return {pack.target} | {target for lane in chosen for target, _ in lane.extra_builds}


def _add_build(index: dict, members: Members, ctx: Context, build: builds.Build, lane: str) -> None:
    """Record ``build`` (its wheel, or a tar of its overlay directory) once, noting which lanes use it."""
    key = build.key
    entry = index["builds"].setdefault(key, {"kind": build.kind, "lanes": []})
    entry["lanes"].append(lane)
    if "file" in entry:
        return
    damage = build.damage()  # checked again as it is packed: the bundle carries only what was built
    if damage:
        raise BundleError(f"build {lane}: the cache entry {build.path} is not as it was made ({damage[0]}); "
                          "nothing was written", hint=f"remove {build.path}; the next run builds it again")
    if build.wheel is not None:
        arc = f"builds/{key[:20]}/{build.wheel.name}"
        members[arc] = build.wheel
        members.what[arc] = f"build wheel {key[:12]}"
    else:
        arc = f"builds/{key[:20]}/site.tar"
        members[arc] = _tar_dir(build.site, members.work / f"{key[:20]}-site.tar")
    members.what[arc] = f"build {build.kind} {key[:12]}"
    entry["file"] = arc
    entry["sha256"] = sha256_file(members[arc])
    if build.wheel is not None and entry["sha256"] != build.wheel_sha256:
        raise BundleError(f"build {lane}: {build.wheel} changed while the bundle was made "
                          f"(sha256 {entry['sha256'][:12]}, sealed {build.wheel_sha256[:12]}); nothing was written",
                          hint=f"remove {build.path}; the next run builds it again")


def _add_published_wheel(index: dict, members: Members, ctx: Context, build: builds.Build, lane: str,
                         manifest: Manifest, base: pins.Base) -> bool:
    """Carry an unpatched overlay build of a published wheel as that wheel, once: the same file as the runtime
    wheel of that distribution when a base of the bundle pins it too (tilelang 0.1.8 is both mamba's runtime
    wheel and pack 02's ``with_builds``), instead of a second copy as a tar of the build's ``site/``. The GPU
    host lays the build out from the wheel as it was made here (``builds.adopt_overlay_wheel``).

    Only where that gives the very build: the layout made from the wheel must hold every file of the build's
    seal with its digest and nothing else; else (or for any other build) False, and the caller carries the
    build as it is."""
    art = base.artifact
    if manifest.build != "overlay" or base.git is not None or art is None or art.kind != "wheel":
        return False
    key = build.key
    entry = index["builds"].get(key)
    if entry is not None and "file" in entry:
        entry["lanes"].append(lane)
        return True
    damage = build.damage()
    if damage:
        raise BundleError(f"build {lane}: the cache entry {build.path} is not as it was made ({damage[0]}); "
                          "nothing was written", hint=f"remove {build.path}; the next run builds it again")
    wheel = pins.fetch(art, ctx.store, ctx.sources().artifacts)
    check = members.work / f"check-{key[:20]}"
    try:
        builds.overlay_from_wheel(wheel, manifest, check / "site", lane, check / "source")
        made = {str(p.relative_to(check)): sha256_file(p) for p in (check / "site").rglob("*")
                if p.is_file() or p.is_symlink()}
    finally:
        shutil.rmtree(check, ignore_errors=True)
    sealed = {name: digest for name, digest in (hashing.sealed(build.path) or {}).items()
              if name.startswith("site/")}
    if made != sealed:
        differ = sorted(set(made) ^ set(sealed)) or sorted(n for n in made if made[n] != sealed[n])
        ui.note(f"build {lane}: laid out from {art.filename} it would differ from the cached build "
                f"({differ[0]}{f' and {len(differ) - 1} more' if len(differ) > 1 else ''}); carried as a tar of "
                "the build instead of the wheel")
        return False
    arc = f"wheels/{art.filename}"
    if arc not in members:
        members[arc] = store_uncompressed(wheel, members.work / art.filename)
        members.origin[arc] = art.sha256
        members.what[arc] = f"build overlay {key[:12]} (as its published wheel)"
    index["builds"][key] = {"kind": build.kind, "lanes": [lane], "file": arc, "sha256": sha256_file(members[arc]),
                            "from_wheel": art.filename}
    return True


def _add_tests_tree(index: dict, members: Members, ctx: Context, key: str, tree: Path, lane: str) -> None:
    """Record an upstream-test lane's test tree (a tar of its ``tree/``) once, noting which lanes use it."""
    entry = index.setdefault("tests_trees", {}).setdefault(key, {"lanes": []})
    entry["lanes"].append(lane)
    if "file" in entry:
        return
    arc = f"tests/{key[:20]}/tree.tar"
    tar = members.work / f"{key[:20]}-tests.tar"
    with tarfile.open(tar, "w") as tf:
        tf.add(tree, arcname="tree")
    members[arc] = tar
    members.what[arc] = f"upstream test tree {key[:12]}"
    entry["file"] = arc
    entry["sha256"] = sha256_file(tar)


def _add_kernel_caches(index: dict, members: Members, ctx: Context) -> None:
    """Carry every kernel-cache entry of the store whose build keys are all in the bundle, each as a tar of its
    sealed files (checked against its seal first; a damaged or unsealed one is left out, said). On the GPU
    host a lane installs the one of its own key, when its store has none: an entry made under another
    driver, GPU or compiler has another key there and is simply not used."""
    where = kernel_cache.root(ctx.store)
    carried = index["kernel_caches"] = {}
    if where is None:
        ui.warn(f"{kernel_cache.ROOT_ENV}=off: no kernel cache to carry")
        return
    keys = set(index["builds"])
    for entry in kernel_cache.entries(where):
        if entry.facts is None or not entry.facts.builds or not set(entry.facts.builds) <= keys:
            continue
        damage = kernel_cache.damage(entry.path)
        if damage:
            ui.warn(f"kernel cache {entry.key[:12]}: not as it was sealed ({damage[0]}); not carried")
            continue
        if entry.files == 0:
            continue  # nothing compiled yet
        arc = f"kernel-cache/{entry.path.name}.tar"
        tar = members.work / f"{entry.path.name}-kernel-cache.tar"
        with tarfile.open(tar, "w") as tf:
            size = kernel_cache.pack(entry.path, tf)
        members[arc] = tar
        members.what[arc] = f"kernel cache {entry.key[:12]}"
        carried[entry.key] = {"file": arc, "sha256": sha256_file(tar), "bytes": size, "files": entry.files,
                              "builds": list(entry.facts.builds), "gpu": entry.facts.gpu}
        ui.info(f"kernel cache {entry.key[:12]}: {entry.files} file(s), {ui.human_bytes(size)} "
                f"({entry.facts.summary()})")
    total = sum(e["bytes"] for e in carried.values())
    ui.info(f"{len(carried)} kernel-cache entr{'y' if len(carried) == 1 else 'ies'} carried, "
            f"{ui.human_bytes(total)} before compression")


def store_uncompressed(wheel: Path, dest: Path) -> Path:
    """``wheel`` rewritten with stored (uncompressed) members, so the bundle's xz sees the raw files.

    A wheel's members are deflated; xz cannot shrink deflated bytes, and tilelang + z3 would not fit
    a 64 MiB bundle that way. The rewritten wheel installs the same files (RECORD hashes are of
    the member contents, which do not change); its own sha256 is the one in bundle.json, the
    downloaded file's is kept next to it as ``downloaded_sha256``.
    """
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as out:
        for info in src.infolist():
            copy = zipfile.ZipInfo(info.filename, info.date_time)
            copy.external_attr = info.external_attr
            copy.compress_type = zipfile.ZIP_STORED
            with src.open(info) as fh:
                out.writestr(copy, fh.read())
    return dest


def _tar_dir(src: Path, dest: Path) -> Path:
    """A tar of an overlay's ``site/`` as it was sealed: without the bytecode caches imports wrote into it since."""
    def sealed_only(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if "__pycache__" in Path(info.name).parts else info

    with tarfile.open(dest, "w") as tf:
        tf.add(src, arcname="site", filter=sealed_only)
    return dest
