"""The upstream's own pull-request template, read from the filing base's tree and filled.

``template_location`` is the one place that says where a target keeps its template (today the
conventional ``.github/pull_request_template.md``; the manifest's ``[policy] pr_template`` key can take
over there). ``read_template`` reads it at the base's commit from a local mirror (``$PATCHLANE_GIT_MIRRORS``),
never from the network. ``fill`` keeps the template's headings, checklist and ``Label:`` fields, puts the
body under its "what does this PR do" heading, and drops its instructions to the author (HTML comments,
process notes). A box is ticked only from a fact the tool has (``Facts``), never by default.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError
from harness.upstream import pins

CONVENTIONAL_PATH = ".github/pull_request_template.md"


def template_location(manifest: pins.Manifest) -> str:
    """Where ``manifest``'s upstream keeps its PR template in its tree: its ``[policy] pr_template``, else the
    conventional path (TransformerEngine spells it PULL_REQUEST_TEMPLATE.md)."""
    policy = getattr(manifest, "policy", None)
    return getattr(policy, "pr_template", "") or CONVENTIONAL_PATH


RECORDED = Path("templates") / "upstream"  # per target: forms and PR template recorded from a tree with no mirror


def recorded_dir(manifest: pins.Manifest) -> Path | None:
    """``templates/upstream/<target>/`` of the repository ``manifest`` belongs to, when it exists: the upstream's
    templates recorded with their source commit (``SOURCE.toml``), for an upstream without a mirror here."""
    path = getattr(manifest, "path", None)
    if path is None:
        return None
    top = Path(path).parent.parent
    d = top / RECORDED / manifest.target
    here = top
    for part in Path(RECORDED, manifest.target).parts:  # a link on the way would put another tree's text in a body
        here = here / part
        if here.is_symlink():
            raise ConfigError(f"{here}: a symbolic link (to {os.readlink(here)}); recorded templates are the "
                              "repository's own files")
    return d if (d / "SOURCE.toml").is_file() else None


def recorded_commit(directory: Path) -> str:
    import tomllib

    return str(tomllib.loads((directory / "SOURCE.toml").read_text(encoding="utf-8")).get("commit", ""))


def recorded_file(directory: Path, rel: str) -> Path | None:
    """``directory / rel`` in a recorded tree when it is a regular file reached through directories, None where it
    is absent; a symbolic link (or a device, a FIFO, ...) on the way is a ConfigError: a recorded template is the
    tree's own text, never whatever a link points at."""
    path, mode = directory, 0
    for part in Path(rel).parts:
        path = path / part
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if stat.S_ISLNK(mode):
            raise ConfigError(f"{path}: a symbolic link in the recorded upstream tree {directory}; only its regular "
                              "files are read")
    if not stat.S_ISREG(mode):
        if stat.S_ISDIR(mode):
            return None
        raise ConfigError(f"{path}: not a regular file of the recorded upstream tree {directory}")
    return path


def recorded_files(directory: Path, rel: str) -> dict[str, str]:
    """The regular files directly in ``directory / rel`` of a recorded tree (name -> text); a link or other kind
    of file there is a ConfigError (``recorded_file``), a subdirectory is not a file of it."""
    where = directory / rel
    if recorded_file(directory, rel) is not None or not where.is_dir():  # checks every part on the way
        return {}
    out = {}
    for name in sorted(os.listdir(where)):
        path = recorded_file(directory, f"{rel}/{name}")
        if path is not None:
            out[name] = path.read_text(encoding="utf-8")
    return out


# Reading the pinned commit's tree, exactly: no replacement objects (refs/replace), object ids from ls-tree and
# blobs by id (no textconv, no path lookups through whatever the mirror's state adds), regular files only.
_PINNED_ENV = {"GIT_NO_REPLACE_OBJECTS": "1", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
_REGULAR = ("100644", "100755")


def pinned_git(mirror: str, *args: str) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **_PINNED_ENV}
    return subprocess.run(["git", "--no-replace-objects", "--git-dir", mirror, *args], capture_output=True,
                          text=True, errors="replace", env=env)


def pinned_has(mirror: str, commit: str) -> bool:
    return pinned_git(mirror, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


def pinned_entries(mirror: str, commit: str, path: str) -> dict[str, tuple[str, str]]:
    """name -> (mode, object id) of the entries of directory ``path`` in ``commit``'s tree (empty: no such
    directory)."""
    listed = pinned_git(mirror, "ls-tree", "-z", "--full-tree", commit, "--", f"{path.rstrip('/')}/")
    out = {}
    for entry in listed.stdout.split("\0") if listed.returncode == 0 else []:
        meta, _, name = entry.partition("\t")
        if len(meta.split()) == 3:
            mode, _kind, oid = meta.split()
            out[name.rsplit("/", 1)[-1]] = (mode, oid)
    return out


def pinned_text(mirror: str, commit: str, path: str) -> str | None:
    """The text of ``path`` in ``commit``'s tree when it is a regular file there (None: absent, or a link, a
    submodule or a directory)."""
    parent, _, name = path.rstrip("/").rpartition("/")
    mode, oid = pinned_entries(mirror, commit, parent).get(name, ("", "")) if parent else _top(mirror, commit, name)
    if mode not in _REGULAR:
        return None
    shown = pinned_git(mirror, "cat-file", "blob", oid)
    return shown.stdout if shown.returncode == 0 else None


def pinned_files(mirror: str, commit: str, directory: str) -> dict[str, str]:
    """The regular files directly in ``directory`` of ``commit``'s tree (name -> text)."""
    out = {}
    for name, (mode, oid) in sorted(pinned_entries(mirror, commit, directory).items()):
        if mode in _REGULAR:
            shown = pinned_git(mirror, "cat-file", "blob", oid)
            if shown.returncode == 0:
                out[name] = shown.stdout
    return out


def _top(mirror: str, commit: str, name: str) -> tuple[str, str]:
    listed = pinned_git(mirror, "ls-tree", "-z", "--full-tree", commit)
    for entry in listed.stdout.split("\0") if listed.returncode == 0 else []:
        meta, _, entry_name = entry.partition("\t")
        if entry_name == name and len(meta.split()) == 3:
            return meta.split()[0], meta.split()[2]
    return "", ""


@dataclass(frozen=True)
class Lookup:
    text: str | None  # the template, or None when the upstream has none at that base
    problem: str | None = None  # why it could not be read (no mirror, unknown commit)


def read_template(manifest: pins.Manifest, base) -> Lookup:
    """The PR template in the tree of ``base`` (a git base: read from a mirror; a release: none is read)."""
    pin = getattr(base, "git", None)
    path = template_location(manifest)
    if pin is None:
        recorded = recorded_dir(manifest)
        found = recorded_file(recorded, path) if recorded is not None else None
        if found is not None:  # a release base: the recorded tree's template
            return Lookup(found.read_text(encoding="utf-8"))
        return Lookup(None)
    sources, _missing = pins.git_sources(pin)
    mirrors = [s for s in sources if Path(s).is_dir()]
    if not mirrors:
        return Lookup(None, f"the PR template ({path}) of {manifest.target} at {pin.commit[:10]} was not read: no "
                            f"mirror of {pin.url} (${pins.MIRRORS_ENV})")
    for mirror in mirrors:
        if not pinned_has(mirror, pin.commit):
            continue
        return Lookup(pinned_text(mirror, pin.commit, path))
    return Lookup(None, f"the PR template ({path}) of {manifest.target} was not read: no mirror holds "
                        f"{pin.commit[:10]}")


def tree_text(manifest: pins.Manifest, base, paths: list[str]) -> str:
    """The text of ``paths`` (those that exist) in the tree of ``base``, read from a mirror; empty for a release
    base or where no mirror holds the commit."""
    pin = getattr(base, "git", None)
    if pin is None or not paths:
        return ""
    sources, _missing = pins.git_sources(pin)
    for mirror in (s for s in sources if Path(s).is_dir()):
        if not pinned_has(mirror, pin.commit):
            continue
        texts = [pinned_text(mirror, pin.commit, path) for path in paths]
        return "\n".join(t for t in texts if t is not None)
    return ""


def tree_files(manifest: pins.Manifest, base, paths: list[str]) -> dict[str, str] | None:
    """``paths`` -> text for those that exist in the tree of ``base``, read from a mirror; None for a release base
    or where no mirror holds the commit (nothing could be read, so nothing is known to be absent)."""
    pin = getattr(base, "git", None)
    if pin is None:
        return None
    sources, _missing = pins.git_sources(pin)
    for mirror in (s for s in sources if Path(s).is_dir()):
        if not pinned_has(mirror, pin.commit):
            continue
        out = {}
        for path in paths:
            shown = pinned_git(mirror, "show", f"{pin.commit}:{path}")
            if shown.returncode == 0:
                out[path] = shown.stdout
        return out
    return None


def touched_paths(diff: str) -> list[str]:
    """The files ``diff`` changes, by their name before the change."""
    return sorted(set(re.findall(r"^diff --git a/(\S+) b/\S+$", diff, re.M)))


def touches_tests(diff: str) -> bool:
    """Whether ``diff`` adds or changes a file of a test tree (``tests/``, ``test_*.py``, ``*_test.py``)."""
    for m in re.finditer(r"^diff --git a/\S+ b/(\S+)$", diff, re.M):
        parts = m.group(1).split("/")
        if any(p in ("tests", "test") for p in parts[:-1]) or re.match(r"test_.*\.py$|.*_test\.py$", parts[-1]):
            return True
    return False


@dataclass(frozen=True)
class Facts:
    """What the tool knows about a PR, each able to tick one kind of box."""

    adds_tests: bool = False  # the series adds or changes a file of the upstream's test tree
    # the upstream's own formatters are among its checks ([[policy.checks]] of kind "format"): ``harness export``
    # refuses a series they would rewrite, so a PR filed from an export has been through them
    formatted: bool = False
    linked: str = ""  # "Fixes #N" / "Related to #N", or empty


# (box text pattern, the fact that ticks it); a box no pattern names stays unticked
TICKS = ((re.compile(r"\bunit tests?\b", re.I), "adds_tests"),
         (re.compile(r"\bautoformat|\bcheckstyle\b", re.I), "formatted"))
_BOX = re.compile(r"^(\s*[-*]\s)\[[ xX]\](\s.*)$")
_WHAT = re.compile(r"^#+\s+(?:what does this pr do|description|summary)\b", re.I)  # where the body goes
_FIELD = re.compile(r"^([A-Z][\w ]{0,40}):(.*)$")  # a ``Label:`` field when what follows is blank (``_blank``)
_HEADING = re.compile(r"^#+\s")


def fill(template: str, body: str, facts: Facts) -> str:
    """``template`` with ``body`` under its "what does this PR do" heading (else first), boxes ticked from
    ``facts``, ``Label:`` fields filled, and its instructions to the author dropped."""
    text = drop_comments(template)
    out: list[str] = []
    placed = False
    for line in text.splitlines():
        if (m := _BOX.match(line)) is not None:
            ticked = any(p.search(m.group(2)) and getattr(facts, fact) for p, fact in TICKS)
            out.append(f"{m.group(1)}[{'x' if ticked else ' '}]{m.group(2)}")
        elif _WHAT.match(line):
            out += ["", line, "", body.strip(), ""]
            placed = True
        elif _HEADING.match(line):
            out += ["", line, ""]
        elif (m := _FIELD.match(line.strip())) is not None and _blank(m.group(2)) and "issue" in m.group(1).lower():
            out.append(f"{m.group(1)}: {facts.linked or 'none'}")
    filled = "\n".join(out)
    if not placed:
        filled = body.strip() + "\n\n" + filled
    filled = re.sub(r"\n{3,}", "\n\n", filled)
    return _drop_empty_headings(filled).strip() + "\n"  # a heading whose instructions were dropped goes


def _blank(rest: str) -> bool:
    """What follows a field's colon says nothing: blank, or one HTML comment."""
    rest = rest.strip()
    return not rest or (len(rest) >= 7 and rest.startswith("<!--") and rest.endswith("-->"))


def drop_comments(text: str) -> str:
    """``text`` without its HTML comments (``<!-- ... -->``; an unclosed one stays), in one pass: the regex
    ``<!--.*?-->`` rescans to the end from every unclosed ``<!--``, quadratic in a long line of them."""
    out, at = [], 0
    while (start := text.find("<!--", at)) >= 0 and (end := text.find("-->", start + 4)) >= 0:
        out.append(text[at:start])
        at = end + 3
    out.append(text[at:])
    return "".join(out)


def _drop_empty_headings(text: str) -> str:
    """Remove each heading whose section (up to the next heading of its level or higher) is empty."""
    lines = text.splitlines()
    keep = []
    for i, line in enumerate(lines):
        m = re.match(r"^(#+)\s", line)
        if m:
            level = len(m.group(1))
            j = i + 1
            empty = True
            while j < len(lines):
                n = re.match(r"^(#+)\s", lines[j])
                if n and len(n.group(1)) <= level:
                    break
                if lines[j].strip() and not n:
                    empty = False
                    break
                j += 1
            if empty:
                continue
        keep.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(keep))


def asks_linked_issue(template: str, feature: bool) -> bool:
    """Whether the template asks an outside contributor's PR to link an issue: a new feature (Megatron-LM:
    required), or a bug fix / small update (Megatron-LM: recommended)."""
    text = drop_comments(template)
    what = r"new features?" if feature else r"(?:bug fix(?:es)?|small updates?)"
    return re.search(rf"{what}\W.{{0,120}}?linked issue\W.{{0,40}}?(?:required|recommended)", text,
                     re.I | re.S) is not None


def section_lines(template: str) -> list[str]:
    """What a body filled into ``template`` must keep: its headings, its ``Label:`` fields and its checklist
    (each box by its text, ``- [ ] text``), as ``fill`` keeps them."""
    if not template:
        return []
    kept = fill(template, "-", Facts())
    out = []
    for line in kept.splitlines():
        if _HEADING.match(line) or _BOX.match(line):
            out.append(line)
        elif (m := _FIELD.match(line.split(":", 1)[0] + ":")) is not None and ":" in line:
            out.append(m.group(1) + ":")
    return out


def tree_has(manifest: pins.Manifest, base, names: set[str]) -> set[str] | None:
    """Which of ``names`` occur as a whole word anywhere in the tree of ``base`` (read from a mirror); None
    where no mirror holds the commit (nothing can be said)."""
    pin = getattr(base, "git", None)
    if pin is None:
        return None
    sources, _missing = pins.git_sources(pin)
    for mirror in (s for s in sources if Path(s).is_dir()):
        if not pinned_has(mirror, pin.commit):
            continue
        return {n for n in names if pinned_git(mirror, "grep", "-q", "-w", "-F", "-e", n, pin.commit).returncode == 0}
    return None
