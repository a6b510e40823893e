"""Release provenance: does a registry artefact hold the upstream git tree of its tag?

For a release base whose manifest names the upstream ``commit`` of its tag, the commit is fetched
like a git base (mirrors first, then the repository URL) and compared with the unpacked artefact,
file by file. Every difference is listed with its kind:

``only-in-artifact``  a file the artefact carries and the tree does not (PKG-INFO, egg-info,
                      compiled libraries of a wheel, generated version files);
``only-in-git``       a file of the tree's package directories the artefact lacks;
``differs``           the same path with other bytes (a version stamp, a build-time edit).

``package_identical`` is true when no difference falls inside the package directories (the
manifest's ``import_names``, found at the top or under ``src/``); ``tag_files_unchanged`` is true
when every file of the tag's package directories is in the artefact with the same bytes (a wheel
that only adds compiled libraries and vendored headers). Bases with no recorded commit are
reported with their ``commit_note``: nothing is guessed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from harness.base.hashing import sha256_file
from harness.lane.context import Context
from harness.upstream import pins


@dataclass(frozen=True)
class Difference:
    path: str
    kind: str  # only-in-artifact | only-in-git | differs
    in_package: bool


@dataclass
class Provenance:
    target: str
    base: str
    commit: str
    commit_source: str
    note: str = ""  # why nothing was compared (no commit recorded)
    compared: bool = False
    package_dirs: list[str] = field(default_factory=list)
    identical_files: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def package_identical(self) -> bool | None:
        if not self.compared:
            return None
        return not any(d.in_package for d in self.differences)

    @property
    def tag_files_unchanged(self) -> bool | None:
        if not self.compared:
            return None
        return not any(d.in_package and d.kind != "only-in-artifact" for d in self.differences)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.differences:
            key = f"{d.kind}{' (package)' if d.in_package else ''}"
            out[key] = out.get(key, 0) + 1
        return out

    def as_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["package_identical"] = self.package_identical
        out["tag_files_unchanged"] = self.tag_files_unchanged
        return out


def check(ctx: Context, manifest: pins.Manifest, base_name: str) -> Provenance:
    base = manifest.base(base_name)
    result = Provenance(manifest.target, base.name, base.commit, base.commit_source)
    if base.git is not None:
        result.note = "a git base: it is its commit"
        return result
    if not base.commit:
        result.note = base.commit_note or "no upstream commit recorded"
        return result
    release = ctx.materialize(manifest, base.name)
    tag = dataclasses.replace(base, name=f"{base.name}.tag", artifact=None,
                              git=pins.GitPin(manifest.repo, base.commit, base.commit_source or "tag", ""))
    tree = ctx.materialize(pins.with_base(manifest, tag), tag.name)
    art_root, git_root = release.path, tree.path  # an sdist is unpacked without its top directory
    art_files = _files(art_root)
    git_files = _files(git_root)
    packages = [d for d in (_package_dir(git_root, n) for n in manifest.import_names) if d]
    result.package_dirs = packages
    result.compared = True

    def in_package(path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in packages)

    for path in sorted(set(art_files) | {p for p in git_files if in_package(p)}):
        a, g = art_files.get(path), git_files.get(path)
        if a is not None and g is not None:
            if sha256_file(a) == sha256_file(g):
                result.identical_files += 1
            else:
                result.differences.append(Difference(path, "differs", in_package(path)))
        elif a is not None:
            result.differences.append(Difference(path, "only-in-artifact", in_package(path)))
        else:
            result.differences.append(Difference(path, "only-in-git", True))
    return result


def _files(root: Path) -> dict[str, Path]:
    """Every regular file under ``root`` by its POSIX path, the ``.git`` directory left out."""
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if rel.parts[0] == ".git" or not p.is_file() or p.is_symlink():
            continue
        out[rel.as_posix()] = p
    return out


def _package_dir(root: Path, name: str) -> str | None:
    top = name.split(".")[0]
    for candidate in (top, f"src/{top}"):
        if (root / candidate).is_dir():
            return candidate
    return None
