"""A manifest as typed data: the target, its bases (a release artefact or a git commit), their payloads and
host builds, and the upstream's contribution policy with its checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ConfigError

BUILD_KINDS = ("wheel", "overlay")
ARTIFACT_KINDS = ("sdist", "wheel")
CHECK_KINDS = ("format", "lint")


@dataclass(frozen=True)
class Artifact:
    kind: str
    filename: str
    url: str
    sha256: str
    size: int | None = None


@dataclass(frozen=True)
class Payload:
    """A runtime wheel too large for one carry (``[[bases.NAME.payloads]]``): bundled in parts
    (harness/host/payloads.py).

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
class PinnedRevision:
    """A dependency the upstream's CI takes at a git revision (``[[bases.NAME.ci.pinned]]``), and the release the
    harness installs instead: the nearest one, with why."""

    package: str
    rev: str  # the upstream's pin (a commit id)
    declares: str  # the version that revision declares (uv.lock's ``version``)
    nearest: str  # the published release nearest that revision
    release: str  # the release installed here (``nearest`` unless ``why`` says otherwise)
    why: str


@dataclass(frozen=True)
class CiEnvironment:
    """What the upstream's CI installs and how it launches its unit tests, at one base (``[bases.NAME.ci]``).

    The suite lanes of the base run in it (docs/upstream-tests.md, "The upstream's CI environment"):
    ``with_builds`` (``TARGET@BASE``, e.g. TransformerEngine) join every suite lane's builds, ``requires``
    (exact pins: the test extras) its runtime, overriding the harness's own pytest pins of the same name;
    ``ranks`` is the number of processes its CI starts per node (``torch.distributed.run --nproc-per-node``),
    capped at the host's GPUs where a lane runs; ``cpu_ranks`` the gloo ranks a CPU run may use (0: none)."""

    with_builds: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    ranks: int = 1
    cpu_ranks: int = 0
    pinned: tuple[PinnedRevision, ...] = ()
    source: str = ""
    note: str = ""

    @property
    def launcher(self) -> str:
        return f"torch.distributed.run --nproc-per-node {self.ranks}" if self.ranks > 1 else "one process"


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
    ci: CiEnvironment | None = None  # the upstream CI's environment for unit tests at this base, when recorded

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
    # "lines": findings count on the lines the series adds or changes; "files": on every line of each changed file,
    # as the upstream's CI runs the tool (Megatron-LM's tools/autoformat.sh on whole changed files)
    scope: str = "lines"
    bases: tuple[str, ...] = ()  # the bases whose tree this check was read from (empty: every base)

    def applies_at(self, base: str | None) -> bool:
        return not self.bases or base is None or base in self.bases

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
