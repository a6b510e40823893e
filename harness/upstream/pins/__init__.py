"""Pinned upstreams: the manifests in ``upstream/`` and their materialization.

A manifest names the upstream repository and its named bases. A base is one of two kinds:

* a **release**: a registry artefact (file name, URL, size, sha256), with the upstream commit of its
  tag where one is known. Materializing downloads (or finds) the artefact, checks its sha256 before
  anything is extracted, unpacks it and records it as the single commit of a fresh git repository;
* a **git commit** (``[bases.NAME.git]``: full commit id, the ref it was read from and that ref's
  date): materializing fetches exactly that commit, one deep, from a local mirror when one is
  configured (``--git-mirrors DIR`` / ``$PATCHLANE_GIT_MIRRORS``, holding ``owner+name.git``) and
  otherwise from the repository URL, and checks that HEAD is that id. Upstream main and dev branches
  are bases of this kind.

Either way the result is a git checkout tagged ``pristine`` in the store: the base every series
applies to. A base that cannot be had leaves nothing in the cache.

May import: ``harness.errors``, ``harness.base``, ``harness.upstream.git``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.base import tarsafe, ui
from harness.upstream import git
from harness.errors import ConfigError, PinError, WriteError, cannot_write, write_reason
from harness.base.hashing import sha256_file
from harness.base.store import Store
from harness.base.tomlutil import choice, load_document, str_list
from harness.base.tomlutil import field as get

BUILD_KINDS = ("wheel", "overlay")
ARTIFACT_KINDS = ("sdist", "wheel")
MIRRORS_ENV = "PATCHLANE_GIT_MIRRORS"
PYPI_URL = "https://pypi.org/pypi"
# The manifest's closed schema: unknown keys are warned about once per process (a typo must not pass silently).
MANIFEST_KEYS = frozenset({"target", "repo", "distribution", "import_names", "build", "build_note", "default_base",
                           "filing_base", "python", "stubs", "bases", "policy"})
BASE_KEYS = frozenset({"version", "commit", "commit_note", "commit_source", "role", "runtime_requires", "artifact",
                       "git", "payloads", "host_builds"})
ARTIFACT_KEYS = frozenset({"kind", "filename", "url", "sha256", "size"})
PAYLOAD_KEYS = ARTIFACT_KEYS - {"kind"} | {"provides", "prune_arch", "note"}
HOST_BUILD_KEYS = ARTIFACT_KEYS - {"kind"} | {"provides", "build_requires", "install_with", "env", "include_dirs",
                                              "timeout", "note"}
_PRUNE_ARCH = re.compile(r"^sm_[0-9]+$")
GIT_KEYS = frozenset({"commit", "ref", "date", "url"})
POLICY_KEYS = frozenset({"signoff", "contributing", "pr_template", "issue_templates", "source", "checks"})
CHECK_KEYS = frozenset({"name", "package", "module", "args", "files", "exclude", "kind", "config", "source"})
CHECK_KINDS = ("format", "lint")
_warned: set[str] = set()
_PYTHON = re.compile(r"^3\.[0-9]+$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Artifact:
    kind: str
    filename: str
    url: str
    sha256: str
    size: int | None = None


@dataclass(frozen=True)
class Payload:
    """A runtime wheel too large for one carry (``[[bases.NAME.payloads]]``): bundled in parts (harness/host/payloads.py).

    ``provides`` is the ``runtime_requires`` pin it satisfies (the bundle downloads no other copy of it);
    ``prune_arch`` (``sm_90``), when set, keeps only that architecture's device code in the wheel's shared
    objects before it is packed (harness/host/fatbin.py), so the GPU host gets a smaller wheel that runs there only.
    """

    artifact: Artifact
    provides: str
    prune_arch: str = ""
    note: str = ""

    @property
    def name(self) -> str:
        return self.provides.split("==", 1)[0]


@dataclass(frozen=True)
class HostBuild:
    """A package compiled on the GPU host from a pinned sdist (``[[bases.NAME.host_builds]]``), by the bootstrap.

    For a compiled part that must match the host's own libraries (TransformerEngine's torch extension is built
    against the host's torch). ``harness bundle`` carries the sdist; ``python -m harness.bootstrap`` builds it with
    ``pip wheel --no-build-isolation`` before the run and installs it, with the runtime pins named in
    ``install_with``, into the interpreter's site-packages (where such a package looks for its pieces).
    ``build_requires`` are pins the bundle carries as wheels and puts on the build's path (``bin/`` on PATH);
    ``env`` is set for the build; each of ``include_dirs`` (relative to the interpreter's site-packages) that
    exists there goes onto ``CPLUS_INCLUDE_PATH``; ``timeout`` (seconds) bounds the build.
    """

    artifact: Artifact
    provides: str
    build_requires: tuple[str, ...] = ()
    install_with: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    include_dirs: tuple[str, ...] = ()
    timeout: int = 540
    note: str = ""

    @property
    def name(self) -> str:
        return self.provides.split("==", 1)[0]


@dataclass(frozen=True)
class GitPin:
    """An upstream commit as a base: ``url`` is the repository, ``ref`` what the commit was read from."""

    url: str
    commit: str
    ref: str
    date: str


@dataclass(frozen=True)
class Base:
    name: str
    version: str
    commit: str  # the upstream commit: a git base's own, a release's tag commit ("" when unknown)
    role: str
    artifact: Artifact | None  # a release base; None for a git base
    runtime_requires: tuple[str, ...] = ()
    git: GitPin | None = None  # a git base; None for a release base
    commit_source: str = ""  # for a release: where its commit was read ("none" when unknown)
    commit_note: str = ""
    payloads: tuple[Payload, ...] = ()
    host_builds: tuple[HostBuild, ...] = ()

    @property
    def release(self) -> Artifact:
        """The artefact of a release base; asking a git base for one is a bug in the caller."""
        if self.artifact is None:
            raise TypeError(f"base '{self.name}' is a git commit, not a release: it has no artefact")
        return self.artifact

    @property
    def kind(self) -> str:
        """``git`` for a commit base, else the artefact kind (``sdist`` or ``wheel``)."""
        return "git" if self.git is not None else self.release.kind

    @property
    def pin(self) -> str:
        """What identifies the base's content exactly: the artefact's sha256 or the full commit id."""
        return self.git.commit if self.git is not None else self.release.sha256

    @property
    def source_label(self) -> str:
        if self.git is not None:
            return f"{self.git.url} {self.git.ref} @ {self.git.commit}"
        return f"{self.release.filename} (sha256 {self.release.sha256})"

    def describe(self) -> dict:
        """The base as a receipt records it."""
        out = {"name": self.name, "version": self.version, "commit": self.commit, "kind": self.kind, "pin": self.pin}
        if self.git is not None:
            out |= {"repo": self.git.url, "ref": self.git.ref, "ref_date": self.git.date}
        else:
            out |= {"artifact": self.release.filename, "sha256": self.release.sha256}
        return out


@dataclass(frozen=True)
class Check:
    """One of the upstream's own formatters or linters, as its config runs it (see harness/upstream/linters.py).

    ``package`` is a PyPI requirement pinned exactly (``black==26.3.0``); the tool runs as
    ``python -m MODULE ARGS FILES`` in the patched tree, on the files the series touches that match
    ``files`` (a regex on the repository-relative path, as pre-commit's ``files``) and not ``exclude``.
    A ``format`` check rewrites files in place: its would-be diff is the finding. A ``lint`` check
    prints ``path:line: message`` lines. ``config`` is the file in the upstream tree the tool reads.
    """

    name: str
    package: str
    module: str
    args: tuple[str, ...]
    files: str
    kind: str
    exclude: str = ""
    config: str = ""
    source: str = ""

    @property
    def version(self) -> str:
        return self.package.split("==", 1)[1]


@dataclass(frozen=True)
class Policy:
    """How the upstream takes contributions: DCO sign-off, its templates, its own checks.

    Paths are in the upstream tree; ``source`` says which file at which commit each fact was read from.
    """

    signoff: bool = False
    contributing: str = ""
    pr_template: str = ""
    issue_templates: tuple[str, ...] = ()
    source: str = ""
    checks: tuple[Check, ...] = ()


@dataclass(frozen=True)
class Manifest:
    target: str
    path: Path
    repo: str
    distribution: str
    import_names: tuple[str, ...]
    build: str
    build_note: str
    default_base: str
    bases: dict[str, Base] = field(default_factory=dict)
    # the base a filing is made against (upstream main where the manifest has it); default: default_base
    filing_base: str = ""
    # overlay builds only: module name -> why it is replaced by a stub (see harness/lane/stubs.py)
    stubs: dict[str, str] = field(default_factory=dict)
    # how the upstream takes contributions (no [policy] table: no sign-off asked, no checks of its own)
    policy: Policy = field(default_factory=Policy)
    python: str = ""  # the interpreter version the target needs ("3.12"); "" when any will do

    def base(self, name: str | None) -> Base:
        name = name or self.default_base
        try:
            return self.bases[name]
        except KeyError:
            known = ", ".join(self.bases)
            raise ConfigError(f"{self.path}: target '{self.target}' has no base '{name}' (bases: {known})") from None


def manifest_path(root: Path, target: str) -> Path:
    return root / "upstream" / f"{target}.toml"


def list_targets(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "upstream").glob("*.toml"))


def load_manifest(root: Path, target: str) -> Manifest:
    path = manifest_path(root, target)
    if not path.exists():
        known = ", ".join(list_targets(root)) or "none"
        raise ConfigError(f"no manifest for target '{target}' ({path} missing; targets: {known})")
    doc = load_document(path)
    where = str(path)
    for line in manifest_unknown_keys(path, doc):
        if line not in _warned:
            _warned.add(line)
            ui.warn(line)
    python = get(doc, "python", str, where, default=None)
    if python is not None and not _PYTHON.match(python):
        raise ConfigError(f"{where}: key 'python' must read like \"3.12\" (the interpreter the lanes need), "
                          f"got {python!r}")
    if get(doc, "target", str, where) != target:
        raise ConfigError(f"{where}: key 'target' must equal the file name '{target}'")
    bases: dict[str, Base] = {}
    raw_bases = get(doc, "bases", dict, where)
    repo = get(doc, "repo", str, where)
    for name, table in doc["bases"].items():
        bases[name] = _load_base(name, table, f"{where} [bases.\"{name}\"]", repo)
    if not raw_bases:
        raise ConfigError(f"{where}: [bases] is empty")
    manifest = Manifest(
        target=target,
        path=path,
        repo=repo,
        distribution=get(doc, "distribution", str, where),
        import_names=tuple(str_list(doc, "import_names", where)),
        build=choice(doc, "build", BUILD_KINDS, where),
        build_note=get(doc, "build_note", str, where, default=""),
        default_base=get(doc, "default_base", str, where),
        bases=bases,
        filing_base=get(doc, "filing_base", str, where, default=""),
        stubs=_load_stubs(doc, where),
        policy=_load_policy(doc, where),
        python=python or "",
    )
    if manifest.stubs and manifest.build != "overlay":
        raise ConfigError(f"{where}: [stubs] only applies to build = \"overlay\"")
    if manifest.default_base not in bases:
        raise ConfigError(f"{where}: default_base '{manifest.default_base}' is not one of the [bases]")
    if manifest.filing_base and manifest.filing_base not in bases:
        raise ConfigError(f"{where}: filing_base '{manifest.filing_base}' is not one of the [bases]")
    return manifest


def manifest_unknown_keys(path: Path, doc) -> list[str]:
    """One line per manifest key its schema does not declare."""
    out = [f"{path}: unknown key '{k}'" for k in doc if k not in MANIFEST_KEYS]
    for name, table in (doc.get("bases") or {}).items():
        if not isinstance(table, dict):
            continue
        where = f'{path} [bases."{name}"]'
        out += [f"{where}: unknown key '{k}'" for k in table if k not in BASE_KEYS]
        for sub, known in (("artifact", ARTIFACT_KEYS), ("git", GIT_KEYS)):
            if isinstance(table.get(sub), dict):
                out += [f"{where[:-1]}.{sub}]: unknown key '{k}'" for k in table[sub] if k not in known]
        for i, payload in enumerate(table.get("payloads") or []):
            if isinstance(payload, dict):
                out += [f"{where[:-1]}.payloads] #{i + 1}: unknown key '{k}'" for k in payload if k not in PAYLOAD_KEYS]
        for i, host in enumerate(table.get("host_builds") or []):
            if isinstance(host, dict):
                out += [f"{where[:-1]}.host_builds] #{i + 1}: unknown key '{k}'" for k in host
                        if k not in HOST_BUILD_KEYS]
    policy = doc.get("policy")
    if isinstance(policy, dict):
        out += [f"{path} [policy]: unknown key '{k}'" for k in policy if k not in POLICY_KEYS]
        for i, check in enumerate(policy.get("checks") or []):
            if isinstance(check, dict):
                out += [f"{path} [[policy.checks]] #{i + 1}: unknown key '{k}'" for k in check if k not in CHECK_KEYS]
    return out


def _load_policy(doc, where: str) -> Policy:
    if "policy" not in doc:
        return Policy()
    table = get(doc, "policy", dict, where)
    pwhere = f"{where} [policy]"
    checks: list[Check] = []
    for i, raw in enumerate(get(table, "checks", list, pwhere, default=[])):
        cwhere = f"{where} [[policy.checks]] #{i + 1}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{cwhere}: must be a table")
        check = _load_check(raw, cwhere)
        if any(c.name == check.name for c in checks):
            raise ConfigError(f"{cwhere}: a second check named '{check.name}'")
        checks.append(check)
    return Policy(
        signoff=get(table, "signoff", bool, pwhere),
        contributing=_tree_path(table, "contributing", pwhere),
        pr_template=_tree_path(table, "pr_template", pwhere),
        issue_templates=tuple(_tree_path({"p": p}, "p", pwhere) for p in str_list(table, "issue_templates", pwhere)),
        source=get(table, "source", str, pwhere),
        checks=tuple(checks),
    )


def _tree_path(table, key: str, where: str) -> str:
    """A path in the upstream tree: relative, no '..' ("" when the key is absent)."""
    value = get(table, key, str, where, default="")
    p = PurePosixPath(value)
    if value and (p.is_absolute() or ".." in p.parts or value != str(p)):
        raise ConfigError(f"{where}: {value!r} must be a plain relative path in the upstream tree")
    return value


def _load_check(table, where: str) -> Check:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    name = get(table, "name", str, where)
    package = get(table, "package", str, where)
    try:
        req = Requirement(package)
        specs = list(req.specifier)
        exact = (len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version
                 and req.marker is None and req.url is None)
        if exact:
            Version(specs[0].version)
    except (InvalidRequirement, InvalidVersion):
        exact = False
    if not exact:
        raise ConfigError(f"{where}: package {package!r} must be a PyPI requirement pinned exactly, "
                          "like \"black==24.4.2\"")
    module = get(table, "module", str, where, default=req.name.replace("-", "_").lower())
    if not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(f"{where}: module {module!r} is not a module name (the tool runs as python -m MODULE)")
    files = get(table, "files", str, where)
    exclude = get(table, "exclude", str, where, default="")
    for key, pattern in (("files", files), ("exclude", exclude)):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{where}: key '{key}' is not a valid regex: {exc}") from None
    return Check(name=name, package=package, module=module, args=tuple(str_list(table, "args", where)),
                 files=files, exclude=exclude, kind=choice(table, "kind", CHECK_KINDS, where),
                 config=_tree_path(table, "config", where), source=get(table, "source", str, where, default=""))


def _load_stubs(doc, where: str) -> dict[str, str]:
    table = get(doc, "stubs", dict, where, default={})
    stubs = {}
    for name, why in table.items():
        if not isinstance(why, str) or not why.strip():
            raise ConfigError(f"{where} [stubs]: '{name}' needs a reason (a non-empty string)")
        if not all(part.isidentifier() for part in name.split(".")):
            raise ConfigError(f"{where} [stubs]: '{name}' is not a module name")
        stubs[str(name)] = str(why)
    return stubs


def _load_base(name: str, table, where: str, repo: str) -> Base:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    has_art, has_git = "artifact" in table, "git" in table
    if has_art == has_git:
        raise ConfigError(f"{where}: a base has exactly one of the tables 'artifact' (a release) "
                          "or 'git' (an upstream commit)")
    common = dict(name=name, version=get(table, "version", str, where), role=get(table, "role", str, where, default=""),
                  runtime_requires=tuple(str_list(table, "runtime_requires", where)),
                  payloads=_load_payloads(table, where), host_builds=_load_host_builds(table, where))
    if has_git:
        git_where = where[:-1] + ".git]"
        gt = get(table, "git", dict, where)
        commit = get(gt, "commit", str, git_where)
        if not _HEX40.match(commit):
            raise ConfigError(f"{git_where}: commit must be a full 40-hex commit id, got {commit!r}")
        if "commit" in table:
            raise ConfigError(f"{where}: a git base names its commit in [git] only")
        pin = GitPin(url=get(gt, "url", str, git_where, default=repo), commit=commit,
                     ref=get(gt, "ref", str, git_where), date=get(gt, "date", str, git_where))
        return Base(commit=commit, artifact=None, git=pin, commit_source="git", **common)
    art_where = where[:-1] + ".artifact]"
    art = table["artifact"]
    sha = get(art, "sha256", str, art_where).lower()
    if not _HEX64.match(sha):
        raise ConfigError(f"{art_where}: sha256 must be 64 hex digits, got {sha!r}")
    commit = get(table, "commit", str, where)
    if commit and not _HEX40.match(commit):
        raise ConfigError(f"{where}: commit must be a full 40-hex sha (or \"\" when unknown), got {commit!r}")
    filename = get(art, "filename", str, art_where)
    if "/" in filename or filename.startswith("."):
        raise ConfigError(f"{art_where}: filename must be a plain file name, got {filename!r}")
    return Base(
        commit=commit,
        commit_source=get(table, "commit_source", str, where, default=""),
        commit_note=get(table, "commit_note", str, where, default=""),
        artifact=Artifact(
            kind=choice(art, "kind", ARTIFACT_KINDS, art_where),
            filename=filename,
            url=get(art, "url", str, art_where),
            sha256=sha,
            size=get(art, "size", int, art_where, default=None),
        ),
        **common,
    )


def _load_payloads(table, where: str) -> tuple[Payload, ...]:
    out: list[Payload] = []
    requires = str_list(table, "runtime_requires", where)
    for i, raw in enumerate(get(table, "payloads", list, where, default=[])):
        pwhere = f"{where[:-1]}.payloads] #{i + 1}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{pwhere}: must be a table")
        sha = get(raw, "sha256", str, pwhere).lower()
        if not _HEX64.match(sha):
            raise ConfigError(f"{pwhere}: sha256 must be 64 hex digits, got {sha!r}")
        filename = get(raw, "filename", str, pwhere)
        if "/" in filename or filename.startswith(".") or not filename.endswith(".whl"):
            raise ConfigError(f"{pwhere}: filename must be a plain wheel file name, got {filename!r}")
        provides = get(raw, "provides", str, pwhere)
        if provides not in requires:
            raise ConfigError(f"{pwhere}: provides {provides!r} must be one of the base's runtime_requires "
                              f"({', '.join(requires) or 'none'})")
        prune_arch = get(raw, "prune_arch", str, pwhere, default="")
        if prune_arch and not _PRUNE_ARCH.match(prune_arch):
            raise ConfigError(f"{pwhere}: prune_arch must read like \"sm_90\", got {prune_arch!r}")
        if any(p.provides == provides for p in out):
            raise ConfigError(f"{pwhere}: a second payload provides {provides!r}")
        out.append(Payload(artifact=Artifact(kind="wheel", filename=filename, url=get(raw, "url", str, pwhere),
                                             sha256=sha, size=get(raw, "size", int, pwhere, default=None)),
                           provides=provides, prune_arch=prune_arch, note=get(raw, "note", str, pwhere, default="")))
    return tuple(out)


_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _load_host_builds(table, where: str) -> tuple[HostBuild, ...]:
    out: list[HostBuild] = []
    requires = str_list(table, "runtime_requires", where)
    for i, raw in enumerate(get(table, "host_builds", list, where, default=[])):
        hwhere = f"{where[:-1]}.host_builds] #{i + 1}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{hwhere}: must be a table")
        sha = get(raw, "sha256", str, hwhere).lower()
        if not _HEX64.match(sha):
            raise ConfigError(f"{hwhere}: sha256 must be 64 hex digits, got {sha!r}")
        filename = get(raw, "filename", str, hwhere)
        if "/" in filename or filename.startswith(".") or not filename.endswith((".tar.gz", ".zip")):
            raise ConfigError(f"{hwhere}: filename must be a plain sdist file name (.tar.gz or .zip), got {filename!r}")
        provides = get(raw, "provides", str, hwhere)
        build_requires = tuple(str_list(raw, "build_requires", hwhere))
        for pin in (provides, *build_requires):
            if not _PIN.match(pin):
                raise ConfigError(f"{hwhere}: {pin!r} must be an exact pin like 'name==1.0'")
        install_with = tuple(str_list(raw, "install_with", hwhere))
        for pin in install_with:
            if pin not in requires:
                raise ConfigError(f"{hwhere}: install_with {pin!r} must be one of the base's runtime_requires "
                                  f"({', '.join(requires) or 'none'})")
        if provides in requires:
            raise ConfigError(f"{hwhere}: provides {provides!r} is also in runtime_requires; a host build is "
                              "compiled on the GPU host, never downloaded: take it out of runtime_requires")
        env = get(raw, "env", dict, hwhere, default={})
        for key, value in env.items():
            if not _ENV_NAME.match(key) or not isinstance(value, str):
                raise ConfigError(f"{hwhere}: env must map NAME = \"string\", got {key} = {value!r}")
        include_dirs = tuple(str_list(raw, "include_dirs", hwhere))
        for inc in include_dirs:
            if inc.startswith("/") or ".." in inc.split("/"):
                raise ConfigError(f"{hwhere}: include_dirs are relative to site-packages, got {inc!r}")
        timeout = get(raw, "timeout", int, hwhere, default=540)
        if timeout < 1:
            raise ConfigError(f"{hwhere}: timeout must be at least 1 second, got {timeout}")
        if any(h.name == provides.split("==", 1)[0] for h in out):
            raise ConfigError(f"{hwhere}: a second host build of {provides.split('==', 1)[0]!r}")
        out.append(HostBuild(artifact=Artifact(kind="sdist", filename=filename, url=get(raw, "url", str, hwhere),
                                               sha256=sha, size=get(raw, "size", int, hwhere, default=None)),
                             provides=provides, build_requires=build_requires, install_with=install_with,
                             env=tuple(sorted(env.items())), include_dirs=include_dirs, timeout=timeout,
                             note=get(raw, "note", str, hwhere, default="")))
    return tuple(out)


# --------------------------------------------------------------------------- fetching

def fetch(artifact: Artifact, store: Store, search_dirs: Sequence[Path] = ()) -> Path:
    """The verified artefact file in the store, downloading it if needed.

    ``search_dirs`` are looked at first (an offline mirror, a test fixture).
    A file whose sha256 differs from the pin is a hard error: nothing is kept.
    """
    dest_dir = store.area("downloads") / artifact.sha256[:16]
    dest = dest_dir / artifact.filename
    if dest.exists():
        if sha256_file(dest) == artifact.sha256:
            return dest
        dest.unlink()  # damaged cache entry: fetch again
    dest_dir.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    source = None
    for d in search_dirs:
        candidate = Path(d) / artifact.filename
        if candidate.is_file():
            try:
                shutil.copyfile(candidate, partial)
            except OSError as exc:  # disk full, read-only cache, unreadable mirror
                partial.unlink(missing_ok=True)
                if cannot_write(exc) or exc.filename == str(partial):
                    raise WriteError(f"cannot write {partial} (copying {candidate} into the cache): "
                                     f"{exc.strerror or exc}; nothing was kept",
                                     hint=f"free space in (or fix the permissions of) {partial.parent}") from None
                raise PinError(f"cannot copy {candidate} into the cache ({partial.parent}): "
                               f"{exc.strerror or exc}; nothing was kept") from None
            source = str(candidate)
            break
    if source is None:
        source = artifact.url
        _download(artifact.url, partial, artifact.size)
    got = sha256_file(partial)
    if got != artifact.sha256:
        partial.unlink()
        raise PinError(
            f"sha256 mismatch for {artifact.filename} from {source}: pinned {artifact.sha256}, got {got}; "
            "nothing was extracted"
        )
    partial.replace(dest)
    return dest


def _download(url: str, dest: Path, size: int | None) -> None:
    """Download ``url`` to ``dest``; a network failure and a failure to write ``dest`` are told apart."""
    writing = False  # True while the failure would be ours (opening, writing or closing dest), not the network's
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            writing = True
            with open(dest, "wb") as fh:
                writing = False
                total = size or int(resp.headers.get("Content-Length") or 0) or None
                with ui.Transfer(PurePosixPath(url).name, total) as bar:
                    for block in iter(lambda: resp.read(1 << 16), b""):
                        writing = True
                        fh.write(block)
                        writing = False
                        bar.advance(len(block))
                writing = True  # closing flushes what is buffered
            writing = False
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:  # ValueError: malformed URL
        dest.unlink(missing_ok=True)
        if writing:
            raise WriteError(f"cannot write {dest} while downloading {url}: "
                           f"{getattr(exc, 'strerror', None) or exc}; nothing was kept",
                           hint=f"free space in (or fix the permissions of) {dest.parent}") from None
        raise PinError(f"cannot download {url}: {exc}",
                       hint="offline? put the file in a directory and pass --artifacts DIR") from None


# --------------------------------------------------------------------------- materializing

@dataclass(frozen=True)
class Sources:
    """Where bases may come from besides their URLs: artefact directories and git mirror directories."""

    artifacts: tuple[Path, ...] = ()
    git_mirrors: tuple[Path, ...] = ()


def mirrors_from_env() -> tuple[Path, ...]:
    """``$PATCHLANE_GIT_MIRRORS``: directories (os.pathsep-separated) holding ``owner+name.git`` mirrors,
    made absolute against the working directory (git fetches from them with the new checkout as its own)."""
    return tuple(Path(os.path.abspath(os.path.expanduser(p)))
                 for p in os.environ.get(MIRRORS_ENV, "").split(os.pathsep) if p)


@dataclass(frozen=True)
class Checkout:
    """A pristine, git-initialised base: ``path`` holds the tree, ``commit`` its sha."""

    target: str
    base: Base
    path: Path
    commit: str


def base_dir(store: Store, target: str, base: Base) -> Path:
    return store.area("bases") / target / f"{base.name}-{base.pin[:12]}"


def materialize(manifest: Manifest, base_name: str | None, store: Store,
                sources: Sources | list[Path] | tuple[Path, ...] = ()) -> Checkout:
    """The base's checkout in the store, created on first use and reused afterwards.

    ``sources`` is a ``Sources``, or (older callers) just the artefact directories.
    """
    if not isinstance(sources, Sources):
        sources = Sources(artifacts=tuple(sources))
    base = manifest.base(base_name)
    final = base_dir(store, manifest.target, base)
    commit = _intact_checkout(final)  # lock-free: a cached base never waits behind another process's download
    if commit is None:
        commit = _make_checkout(manifest, base, final, store, sources)
    if base.git is not None and commit != base.git.commit:  # a cache entry someone changed by hand
        raise PinError(f"{final}: HEAD is {commit}, not the pinned {base.git.commit}",
                       hint="remove that directory; the next run fetches the commit again")
    return Checkout(manifest.target, base, final, commit)


def _intact_checkout(final: Path) -> str | None:
    """The commit of the cached checkout at ``final`` when it exists and is exactly that commit, asked without
    the store lock; None on any doubt (the caller then takes the lock and looks again)."""
    if not (final / ".git").is_dir():
        return None
    try:
        repo = git.repo(final)
        return None if repo.stray_paths() else repo.head()
    except (git.GitError, OSError):
        return None


def _make_checkout(manifest: Manifest, base: Base, final: Path, store: Store, sources: Sources) -> str:
    """Under the store lock: look again, and make (or remake) the checkout when it is missing or not its commit."""
    with store.locked():
        if (final / ".git").is_dir():
            stray = git.repo(final).stray_paths()  # a pristine checkout is exactly its commit
            if stray:
                ui.warn(f"base {manifest.target} {base.name}: the cache entry {final} is not its pinned commit "
                        f"({stray[0]}{f' and {len(stray) - 1} more' if len(stray) > 1 else ''} changed or added); "
                        "making it again")
                shutil.rmtree(final)
        if not (final / ".git").is_dir():
            if base.git is not None:
                first = git_sources(base.git, sources.git_mirrors)[0][0]
                origin = f"from mirror {first}" if first != base.git.url else f"from {base.git.url}"
                with ui.status(f"fetching {base.git.commit[:12]} ({base.git.ref}) {origin}") as act, \
                        store.new_entry(final) as tmp:
                    used = fetch_commit(base.git, tmp, sources.git_mirrors)
                    act.result = ui.human_bytes(ui.dir_size(tmp)) + ("" if used == first else f" (from {used})")
            else:
                art = base.release
                archive = fetch(art, store, list(sources.artifacts))
                with ui.status(f"unpacking {art.filename}") as act, store.new_entry(final) as tmp:
                    _extract(archive, art.kind, tmp)
                    act.result = ui.human_bytes(ui.dir_size(tmp))
                    message = f"{manifest.target} {base.version} pristine ({art.filename}, sha256 {art.sha256})"
                    try:
                        git.init_snapshot(tmp, message)
                    except git.GitError as exc:
                        if not cannot_write(exc.stderr):
                            raise
                        raise WriteError(f"cannot write {final} (recording {art.filename} as a git snapshot): "
                                         f"{write_reason(exc.stderr)}; nothing was kept",
                                         hint=f"free space in {final.parent}") from None
        return git.repo(final).head()


# --------------------------------------------------------------------------- git bases

def mirror_name(url: str) -> str:
    """``https://github.com/owner/name(.git)`` -> ``owner+name.git``, the mirrors' directory name."""
    parts = [p for p in url.rstrip("/").removesuffix(".git").split("/") if p]
    if len(parts) < 2:
        raise ConfigError(f"repository URL {url!r} has no owner/name")
    return f"{parts[-2]}+{parts[-1]}.git"


def git_sources(pin: GitPin, mirrors: tuple[Path, ...] = ()) -> tuple[list[str], list[str]]:
    """Where ``pin`` is fetched from, in order (each mirror directory, given or from the environment, that
    has the repository, then its URL), and the mirror paths looked at that do not have it. A directory
    named twice is looked at once."""
    name = mirror_name(pin.url)
    candidates = dict.fromkeys(str(Path(d) / name) for d in (*mirrors, *mirrors_from_env()))
    found = [c for c in candidates if Path(c).is_dir()]
    return found + [pin.url], [c for c in candidates if c not in found]


def fetch_commit(pin: GitPin, dest: Path, mirrors: tuple[Path, ...] = ()) -> str:
    """Make ``dest`` a git repository whose HEAD is exactly ``pin.commit``, fetched one commit deep; return the
    source it came from (a mirror's path or the URL).

    Each source is tried in turn; every failure is named in the error (exit 4). ``dest`` is a
    scratch directory the caller discards on failure, so nothing half-fetched stays in the cache.
    """
    env = {**git.clean_env(), "GIT_TERMINAL_PROMPT": "0",
           # give up on a stalled network fetch instead of hanging a CI job
           "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "60"}
    failures = []
    sources, missing = git_sources(pin, mirrors)
    dest.mkdir(parents=True, exist_ok=True)
    for source in sources:
        shutil.rmtree(dest / ".git", ignore_errors=True)
        steps = [("init", "-q", "--initial-branch=base"),
                 ("fetch", "-q", "--no-tags", "--depth", "1", source, pin.commit),
                 ("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", "FETCH_HEAD")]
        error = None
        for args in steps:
            try:
                done = git.call(dest, *args, env=env, timeout=1800)
            except git.GitNotFound:
                raise
            except git.GitError as exc:  # timed out
                error = exc.stderr
                break
            if not done.ok:
                error = _last_line(done.stderr) or f"exit {done.status}"
                break
        if error is None:
            head = git.call(dest, "rev-parse", "HEAD", env=env).stdout.strip()
            if head != pin.commit:
                error = f"HEAD is {head or '?'} after the fetch, not {pin.commit}"
            else:
                git.run(dest, "tag", "pristine", env=env)
                return source
        failures.append(f"{source}: {error}")
    tried = "; ".join(failures)
    if missing:
        tried += "; no mirror at " + ", ".join(missing)
    raise PinError(f"cannot fetch commit {pin.commit} ({pin.ref}): {tried}",
                   hint=f"offline? point --git-mirrors (or ${MIRRORS_ENV}) at a directory holding "
                        f"{mirror_name(pin.url)}")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _extract(archive: Path, kind: str, dest: Path) -> None:
    """Unpack an sdist (dropping its one top-level directory) or a wheel into ``dest``."""
    try:
        if kind == "wheel":
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    _check_member(name, archive)
                zf.extractall(dest)
            return
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            tops = {PurePosixPath(m.name).parts[0] for m in members if m.name.strip("./")}
            if len(tops) != 1:
                raise PinError(f"{archive.name}: expected one top-level directory in the sdist, "
                               f"found {sorted(tops)[:5]}")
            [top] = tops
            for m in members:
                _check_member(m.name, archive)
                parts = PurePosixPath(m.name).parts
                if len(parts) <= 1:
                    continue
                rel = PurePosixPath(*parts[1:])
                if m.issym():
                    _check_symlink(rel, m.linkname, archive)
                elif m.islnk():
                    m.linkname = _strip_top(m.linkname, top, m.name, archive)
                m.name = str(rel)
                tarsafe.extract(tf, m, dest)
    except OSError as exc:
        if cannot_write(exc):
            raise WriteError(f"cannot write {dest} (unpacking {archive.name}): {exc.strerror or exc}; nothing was "
                             "kept", hint=f"free space in (or fix the permissions of) {dest}") from None
        raise PinError(f"cannot unpack {archive.name}: {exc}") from None
    except (tarfile.TarError, zipfile.BadZipFile) as exc:
        raise PinError(f"cannot unpack {archive.name}: {exc}") from None


def extract_artifact(archive: Path, kind: str, dest: Path) -> None:
    """Unpack a release artefact (``sdist`` or ``wheel``) into ``dest`` as a base's tree is made from it."""
    _extract(archive, kind, dest)


def _check_member(name: str, archive: Path) -> None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        raise PinError(f"{archive.name}: refusing unsafe member path {name!r}")


def _check_symlink(rel: PurePosixPath, target: str, archive: Path) -> None:
    """A symlink at ``rel`` (inside the unpacked tree) must point inside the tree: resolved, not by spelling."""
    where = posixpath.normpath(posixpath.join(str(rel.parent), target))
    if posixpath.isabs(target) or where == ".." or where.startswith("../"):
        raise PinError(f"{archive.name}: refusing symlink {str(rel)!r} -> {target!r}: it points outside the tree")


def _strip_top(target: str, top: str, name: str, archive: Path) -> str:
    """A hard link names its target from the archive's root: the same path without the top directory."""
    parts = PurePosixPath(target).parts
    if PurePosixPath(target).is_absolute() or ".." in parts or len(parts) < 2 or parts[0] != top:
        raise PinError(f"{archive.name}: refusing hard link {name!r} -> {target!r}: its target is not in the tree")
    return str(PurePosixPath(*parts[1:]))


# --------------------------------------------------------------------------- a release not in the manifest

def pypi_base(manifest: Manifest, version: str) -> Base:
    """The base for release ``version`` from the PyPI JSON API, same artefact kind as the default base."""
    index = os.environ.get("PATCHLANE_PYPI_URL", PYPI_URL).rstrip("/")
    url = f"{index}/{manifest.distribution}/{version}/json"
    try:
        files = _read_json(url)["urls"]
    except PinError:
        # Some mirrors serve only the project document; its "releases" table has the same file entries.
        project = f"{index}/{manifest.distribution}/json"
        try:
            releases = _read_json(project)["releases"]
        except PinError:
            raise PinError(f"cannot read {url} nor {project}") from None
        if version not in releases:
            raise PinError(f"{project}: {manifest.distribution} has no release {version}") from None
        files, url = releases[version], project
    pinned = manifest.base(None) if manifest.base(None).artifact else next(
        (b for b in manifest.bases.values() if b.artifact is not None), None)
    if pinned is None:
        raise ConfigError(f"{manifest.path}: no release base to take the artefact kind from")
    ref = pinned.release
    want = "sdist" if ref.kind == "sdist" else "bdist_wheel"
    files = [u for u in files if u.get("packagetype") == want]
    if ref.kind == "wheel":  # same interpreter/ABI/platform tags as the current pin
        tags = ref.filename.rsplit("-", 3)[1:]
        files = [u for u in files if u["filename"].rsplit("-", 3)[1:] == tags]
    if not files:
        raise PinError(f"{url}: release {version} has no {want} like {ref.filename}")
    f = files[0]
    sha = f.get("digests", {}).get("sha256", "")
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise PinError(f"{url}: {f['filename']} has no sha256 digest")
    file_url = urllib.parse.urljoin(url, f["url"])  # mirrors may answer with URLs relative to the document
    art = Artifact(ref.kind, f["filename"], file_url, sha, f.get("size"))
    return Base(name=version, version=version, commit="", role="candidate pin (from the PyPI JSON API)",
                artifact=art, commit_note="not looked up: added by harness rebase --to-version")


def _read_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return json.load(resp)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PinError(f"cannot read {url}: {exc}") from None


def with_base(manifest: Manifest, base: Base) -> Manifest:
    return dataclasses.replace(manifest, bases={**manifest.bases, base.name: base})


def manifest_snippet(base: Base) -> str:
    a = base.release
    size = f"\nsize = {a.size}" if a.size is not None else ""
    return (f'[bases."{base.name}"]\nversion = "{base.version}"\ncommit = ""\n'
            f'commit_note = "not looked up: added by harness rebase --to-version"\ncommit_source = "none"\n'
            f'role = "{base.role}"\nruntime_requires = []\n\n'
            f'[bases."{base.name}".artifact]\nkind = "{a.kind}"\nfilename = "{a.filename}"\nurl = "{a.url}"\n'
            f'sha256 = "{a.sha256}"   # PyPI JSON digest; the download matched it{size}\n')


def write_manifest(manifest: Manifest, base: Base) -> None:
    """Append the base's tables to the manifest; the file is left as it was if the result does not load."""
    old = manifest.path.read_text(encoding="utf-8")
    manifest.path.write_text(old.rstrip("\n") + "\n\n" + manifest_snippet(base), encoding="utf-8")
    try:
        load_manifest(manifest.path.parent.parent, manifest.target)
    except ConfigError:
        manifest.path.write_text(old, encoding="utf-8")
        raise
