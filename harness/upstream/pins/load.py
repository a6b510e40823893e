"""Reading ``upstream/<target>.toml`` into a ``Manifest``, with a closed schema: an unknown key is warned
about, a missing or ill-typed one is a ConfigError naming the file and the key."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from harness.base import regular, ui
from harness.base.tomlutil import choice, load_document, str_list
from harness.base.tomlutil import field as get
from harness.errors import ConfigError
from harness.upstream.pins.model import (
    ARTIFACT_KINDS,
    BUILD_KINDS,
    CHECK_KINDS,
    Artifact,
    Base,
    Check,
    CiEnvironment,
    GitPin,
    HostBuild,
    Manifest,
    Payload,
    PinnedRevision,
    Policy,
)

# The manifest's closed schema: unknown keys are warned about once per process (a typo must not pass silently).
_warned: set[str] = set()
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")

MANIFEST_KEYS = frozenset({"target", "repo", "distribution", "import_names", "build", "build_note", "default_base",
                           "filing_base", "python", "stubs", "bases", "policy"})
BASE_KEYS = frozenset({"version", "commit", "commit_note", "commit_source", "role", "runtime_requires", "artifact",
                       "git", "payloads", "host_builds", "ci"})
CI_KEYS = frozenset({"with_builds", "requires", "ranks", "cpu_ranks", "pinned", "source", "note"})
PINNED_KEYS = frozenset({"package", "rev", "declares", "nearest", "release", "why"})
ARTIFACT_KEYS = frozenset({"kind", "filename", "url", "sha256", "size"})
PAYLOAD_KEYS = ARTIFACT_KEYS - {"kind"} | {"provides", "prune_arch", "note"}
HOST_BUILD_KEYS = ARTIFACT_KEYS - {"kind"} | {"provides", "build_requires", "install_with", "env", "include_dirs",
                                              "timeout", "note"}
_PRUNE_ARCH = re.compile(r"^sm_[0-9]+$")
GIT_KEYS = frozenset({"commit", "ref", "date", "url"})
POLICY_KEYS = frozenset({"signoff", "contributing", "pr_template", "issue_templates", "source", "checks"})
CHECK_KEYS = frozenset({"name", "package", "module", "args", "files", "exclude", "kind", "config", "source",
                        "scope", "bases"})
CHECK_SCOPES = ("lines", "files")
_PYTHON = re.compile(r"^3\.[0-9]+$")
_TARGET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def manifest_path(root: Path, target: str) -> Path:
    """``upstream/<target>.toml``; a target is a plain name (it names directories under patches/ and repros/ too),
    never a path that leaves upstream/ (``../x``) or a hidden file."""
    if not _TARGET.fullmatch(target):
        raise ConfigError(f"target {target!r} is not a target name (letters, digits, '.', '_', '-', starting with "
                          "a letter or digit; never a path)")
    return root / "upstream" / f"{target}.toml"


def list_targets(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "upstream").glob("*.toml"))


def load_manifest(root: Path, target: str) -> Manifest:
    path = manifest_path(root, target)
    if not path.exists():
        known = ", ".join(list_targets(root)) or "none"
        raise ConfigError(f"no manifest for target '{target}' ({path} missing; targets: {known})")
    try:
        regular.check(path, root / "upstream")
    except regular.NotRegular as exc:
        raise ConfigError(f"manifest of target '{target}': {exc}") from None
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
        if isinstance(table.get("ci"), dict):
            out += [f"{where[:-1]}.ci]: unknown key '{k}'" for k in table["ci"] if k not in CI_KEYS]
            for i, pin in enumerate(table["ci"].get("pinned") or []):
                if isinstance(pin, dict):
                    out += [f"{where[:-1]}.ci.pinned] #{i + 1}: unknown key '{k}'" for k in pin if k not in PINNED_KEYS]
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
                 config=_tree_path(table, "config", where), source=get(table, "source", str, where, default=""),
                 scope=choice(table, "scope", CHECK_SCOPES, where, default="lines"),
                 bases=tuple(str_list(table, "bases", where)))


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
                  payloads=_load_payloads(table, where), host_builds=_load_host_builds(table, where),
                  ci=_load_ci(table, where))
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


def _pinned_file(raw, where: str, suffixes: tuple[str, ...], what: str) -> tuple[str, str]:
    """The ``sha256`` and plain ``filename`` of one pinned file of a base (a payload wheel, a host build's
    sdist): a table, 64 hex digits, a name with no directory that ends in one of ``suffixes``."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    sha = get(raw, "sha256", str, where).lower()
    if not _HEX64.match(sha):
        raise ConfigError(f"{where}: sha256 must be 64 hex digits, got {sha!r}")
    filename = get(raw, "filename", str, where)
    if "/" in filename or filename.startswith(".") or not filename.endswith(suffixes):
        raise ConfigError(f"{where}: filename must be a plain {what}, got {filename!r}")
    return sha, filename


def _load_payloads(table, where: str) -> tuple[Payload, ...]:
    out: list[Payload] = []
    requires = str_list(table, "runtime_requires", where)
    for i, raw in enumerate(get(table, "payloads", list, where, default=[])):
        pwhere = f"{where[:-1]}.payloads] #{i + 1}"
        sha, filename = _pinned_file(raw, pwhere, (".whl",), "wheel file name")
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


def _load_ci(table, where: str) -> CiEnvironment | None:
    """``[bases.NAME.ci]``: closed schema (an unknown key is an error here: the environment decides verdicts)."""
    if "ci" not in table:
        return None
    cwhere = f"{where[:-1]}.ci]"
    raw = get(table, "ci", dict, where)
    extra = sorted(set(raw) - CI_KEYS)
    if extra:
        raise ConfigError(f"{cwhere}: unknown key '{extra[0]}' (known: {', '.join(sorted(CI_KEYS))})")
    builds = tuple(str_list(raw, "with_builds", cwhere))
    for spec in builds:
        if not re.match(r"^[a-z0-9][a-z0-9-]*@[A-Za-z0-9._+-]+$", spec):
            raise ConfigError(f"{cwhere}: with_builds entry {spec!r} must read TARGET@BASE")
    requires = tuple(str_list(raw, "requires", cwhere))
    for pin in requires:
        if not _PIN.match(pin):
            raise ConfigError(f"{cwhere}: requires {pin!r} must be an exact pin like 'name==1.0'")
    ranks = get(raw, "ranks", int, cwhere)
    cpu_ranks = get(raw, "cpu_ranks", int, cwhere, default=0)
    if ranks < 1 or cpu_ranks < 0:
        raise ConfigError(f"{cwhere}: ranks must be at least 1 and cpu_ranks at least 0")
    pinned = []
    for i, pin in enumerate(get(raw, "pinned", list, cwhere, default=[])):
        pwhere = f"{cwhere[:-1]}.pinned] #{i + 1}"
        if not isinstance(pin, dict):
            raise ConfigError(f"{pwhere}: must be a table")
        extra = sorted(set(pin) - PINNED_KEYS)
        if extra:
            raise ConfigError(f"{pwhere}: unknown key '{extra[0]}' (known: {', '.join(sorted(PINNED_KEYS))})")
        rev = get(pin, "rev", str, pwhere)
        if not _HEX40.match(rev):
            raise ConfigError(f"{pwhere}: rev must be a full 40-hex commit id, got {rev!r}")
        fields = {k: get(pin, k, str, pwhere) for k in ("package", "declares", "nearest", "release", "why")}
        if not fields["why"].strip():
            raise ConfigError(f"{pwhere}: 'why' must say why that release stands in for the revision")
        pinned.append(PinnedRevision(rev=rev, **fields))
    source = get(raw, "source", str, cwhere)
    if not source.strip():
        raise ConfigError(f"{cwhere}: 'source' must name the upstream files the environment was read from")
    return CiEnvironment(with_builds=builds, requires=requires, ranks=ranks, cpu_ranks=cpu_ranks,
                         pinned=tuple(pinned), source=source, note=get(raw, "note", str, cwhere, default=""))


def _load_host_builds(table, where: str) -> tuple[HostBuild, ...]:
    out: list[HostBuild] = []
    requires = str_list(table, "runtime_requires", where)
    for i, raw in enumerate(get(table, "host_builds", list, where, default=[])):
        hwhere = f"{where[:-1]}.host_builds] #{i + 1}"
        sha, filename = _pinned_file(raw, hwhere, (".tar.gz", ".zip"), "sdist file name (.tar.gz or .zip)")
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
