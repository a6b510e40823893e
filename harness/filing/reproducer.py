"""The self-contained reproducer that goes with a body (``harness/filing/standalone.py`` amalgamates it) and the
body's section that inlines or links it."""

from __future__ import annotations

import ast
import functools
import re
import shlex
import sys
import textwrap
from pathlib import Path

from harness.filing import standalone
from harness.filing.parts import base_label, is_release, unchanged_label
from harness.lane.tracking import Pack
from harness.upstream import pins

PLACEHOLDER = "@@REPRODUCER_URL@@"  # replaced by the gist URL when the gh command runs


def script_name(pack: Pack) -> str:
    stem = Path(pack.reproducer or "reproducer.py").stem
    rest = re.sub(r"^(?:pack|contract)\d+_?", "", stem)
    return f"repro_{rest or pack.target.replace('-', '_')}.py"


# Run first in the self-contained script: its command-line flags set what a lane's runner sets in the
# environment, so a reader runs `python repro.py --unpatched` with nothing of ours to export.
FLAGS_PROLOGUE = '''
# Command-line flags: --patched / --unpatched (which build this process holds), --run-dir DIR (the
# directory the runs of one comparison share; default ./repro-run), --baseline-site DIR (a directory
# holding the unchanged release, for the runs that compare against it in one process).
import os as _os
import sys as _sys

_FLAG_ENV = {"--run-dir": "HARNESS_RUN_DIR", "--baseline-site": "HARNESS_BASELINE_SITE"}


def _take_flags(argv):
    rest, args = [], iter(argv)
    for arg in args:
        flag, eq, value = arg.partition("=")
        if flag in _FLAG_ENV:
            _os.environ[_FLAG_ENV[flag]] = value if eq else next(args, "")
        elif arg in ("--patched", "--unpatched"):
            _os.environ["HARNESS_PATCHED"] = "1" if arg == "--patched" else "0"
        else:
            rest.append(arg)
    return rest


_sys.argv[1:] = _take_flags(_sys.argv[1:])
_os.environ.setdefault("HARNESS_RUN_DIR", "./repro-run")
'''
_ENV_FLAG = {"HARNESS_RUN_DIR": "--run-dir", "HARNESS_BASELINE_SITE": "--baseline-site", "HARNESS_LANE": "--lane"}
_COMMAND = re.compile(r"^(\s*)((?:HARNESS_\w+=\S+\s+)+)(python\b.*)$", re.M)


def plain_flags(text: str) -> str:
    """Commands in ``text`` that set HARNESS_* variables rewritten with the script's flags instead."""
    def one(m: re.Match) -> str:
        flags = []
        for name, value in re.findall(r"(HARNESS_\w+)=(\S+)", m.group(2)):
            if name == "HARNESS_PATCHED":
                flags.append("--patched" if value == "1" else "--unpatched")
            elif name in _ENV_FLAG:
                flags.append(f"{_ENV_FLAG[name]} {value}")
            else:
                return m.group(0)  # a variable without a flag: left as written
        command, hashed, comment = m.group(3).partition(" #")
        return f"{m.group(1)}{command.rstrip()} {' '.join(flags)}" + (f"  #{comment}" if hashed else "")
    return _COMMAND.sub(one, text)


def _mentions(requirement: str, code: str) -> bool:
    """Whether ``code`` names the distribution ``requirement`` pins (by its name or a distinctive part)."""
    name = re.split(r"[=<>!~ \[]", requirement, maxsplit=1)[0].lower()
    words = {name.replace("-", "_")} | {w for w in name.split("-") if w not in ("apache", "solver", "python", "py")}
    return any(re.search(rf"\b{re.escape(w)}\b", code) for w in words if w)


def _runs(manifest: pins.Manifest, pack: Pack, base_name: str, name: str, change_name: str) -> list[str]:
    """The commands of the header: one per lane on the filed base that runs this script, with the flags it takes
    (a minimal, upstream-test, suite or domain lane runs another script)."""
    lanes = [lane for lane in pack.lanes if lane.base == base_name and not lane.minimal and not lane.suite
             and not lane.upstream_tests and not lane.domain]
    out = []
    for i, lane in enumerate(lanes, 1):
        env = []
        if lane.with_baseline:
            env.append("--baseline-site $RELEASED_SITE")
        launch = "python" if lane.nproc == 1 else f"python -m torch.distributed.run --standalone " \
                                                 f"--nproc_per_node={lane.nproc}"
        base = manifest.bases[base_name]
        build = (f"{base_label(manifest, base)} with {change_name}" if lane.patched
                 else unchanged_label(manifest, base)) \
            + (" (CUDA GPU)" if pack.lane_requires(lane) == "cuda" else " (CPU is enough)")
        cmd = " ".join([launch, name, "--patched" if lane.patched else "--unpatched", *env,
                        *map(shlex.quote, lane.args)])
        out.append(f"{i}. {build}:\n       {cmd}")
    return out


def reproducer_script(root: Path, manifest: pins.Manifest, pack: Pack, base_name: str, title: str,
                      change_name: str, needs: list[str]) -> tuple[str, str] | None:
    """(file name, text) of the self-contained reproducer, or None for a pack without one. ``needs``:
    ``script_needs``, which the body states too."""
    if not pack.reproducer:
        return None
    path = root / pack.reproducer
    name = script_name(pack)
    original = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    lanes = _script_lanes(pack, base_name)
    needs = [f"{manifest.distribution} (the package under test) importable", *needs]
    runs = _runs(manifest, pack, base_name, name, change_name)
    wrap = textwrap.TextWrapper(width=100)
    header = [f"{title}: a self-contained reproducer.", "",
              *wrap.wrap("Needs " + ", ".join(needs) + ". Nothing else: every helper it uses is copied in below."),
              ""]
    if runs:
        header += ["Run it once per build, from one directory:", "", *[f"  {r}" for r in runs], ""]
        if any(lane.with_baseline for lane in lanes):
            base = manifest.bases[base_name]
            how = (f"'pip install --no-deps --target DIR {manifest.distribution}=={base.version}'" if is_release(base)
                   else f"'pip install --no-deps --target DIR .' in a checkout of {base_label(manifest, base)}")
            header += wrap.wrap(f"RELEASED_SITE is a directory holding {unchanged_label(manifest, base)}, e.g. made "
                                f"with {how}: the run compares the changed function with that one in one "
                                "process.") + [""]
        header += ["Each run prints one JSON line per measurement and ends with a line naming what it observed."]
    header += ["", "Method notes:", "", plain_flags(original)]
    text = standalone.amalgamate(path, [root / "repros"], "\n".join(header), FLAGS_PROLOGUE)
    return name, public_dialect(text, pack.id, name)


# This repository's words in an attached script, and what a maintainer reads instead (case kept). The script keeps
# working: every replacement is made everywhere in the one file (names, strings, comments alike), and a
# replacement that would merge two distinct names is refused (``public_dialect``).
_SENTINEL = re.compile(r"\b(?:BUG|FIX|MEMORY_SAVE|EQUIVALENCE|REGRESSION_GUARD|CONTRACT(?:_VIOLATION)?)_"
                       r"(?:REPRODUCED|ABSENT|VALIDATED|FAILED|VERIFIED|MISSING|BROKEN|PASSED|HELD|DETECTED|MISSED)\b")
_FIXED = (
    (re.compile(r"\bHARNESS_"), "REPRO_"),
    (re.compile(r"\bHOST_STAMP\b"), "HOST_INFO"),
    (re.compile(r"\bpatch-lane\b"), "this project"),
    (re.compile(r"\btracking\.toml\b"), "the project's records"),
    # the reproducers' helper modules (repros/_lane.py, ...), named in comments and method notes: their code is
    # copied in, so the names point nowhere for a maintainer
    (re.compile(r"(?<![\w.])_lane\b"), "kit"),
    (re.compile(r"(?<![\w.])_(numerics|timing|minimal)\b"), r"\1_kit"),
    (re.compile(r"(?<![\w.])_mamba3\b"), "mamba3_kit"),
)
_WORDS = (("lanes", "jobs"), ("lane", "job"), ("sentinels", "outcomes"), ("sentinel", "outcome"),
          ("receipts", "results"), ("receipt", "result"), ("harness", "runner"))


def _case(word: str, like: str) -> str:
    return word.upper() if like.isupper() else word[:1].upper() + word[1:] if like[:1].isupper() else word


def _cased(word: str, m: re.Match) -> str:
    return _case(word, m.group(0))


def _one(text: str, pack_id: str) -> str:
    text = _SENTINEL.sub(lambda m: m.group(0).lower().replace("_", "-"), text)
    text = re.sub(r"(?<![.\w])[Pp]ack\d{2}", "repro", text)  # run-directory keys such as pack04-baseline
    text = re.sub(r"\b[Pp]acks? (\d{2})(?:'s)?\b",
                  lambda m: _case("this change" if m.group(1) == pack_id else "an earlier change", m.group(0)), text)
    for pattern, repl in _FIXED:
        text = pattern.sub(repl, text)
    for old, new in _WORDS:
        text = re.sub(rf"\b{old}\b", functools.partial(_cased, new), text, flags=re.I)
    return re.sub(r"(?<![.\w])[Pp]acks?\b(?!\.)", lambda m: _case("change", m.group(0)), text)


def public_dialect(text: str, pack_id: str, name: str) -> str:
    """``text`` (an attached script) without this repository's words: sentinels become plain words, HARNESS_*
    variables REPRO_*, lanes jobs, packs changes, receipts results. Refused (ConfigError) where a rename would make
    two distinct names of the script one, or the result no longer parses."""
    import io
    import tokenize

    from harness.errors import ConfigError

    seen: dict[str, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NAME:
                new = _one(tok.string, pack_id)
                if seen.setdefault(new, tok.string) != tok.string:
                    raise ConfigError(f"{name}: making it plain would merge the names {seen[new]!r} and "
                                      f"{tok.string!r} into {new!r}")
    except (tokenize.TokenError, SyntaxError):
        pass  # ast.parse below says what is wrong
    out = _one(text, pack_id)
    try:
        ast.parse(out)
    except SyntaxError as exc:
        raise ConfigError(f"{name}: the plain version does not parse (line {exc.lineno}: {exc.msg})") from None
    return out


def script_needs(root: Path, manifest: pins.Manifest, pack: Pack, base_name: str) -> list[str]:
    """What the attached script needs besides the package under test, for its header and the body alike: torch,
    a CUDA GPU, the builds its lanes put beside the package (each with the runtime pins its base installs), and
    the base's runtime pins that the script's own code names (04's Triton script needs no TileLang)."""
    if not pack.reproducer:
        return []
    path = root / pack.reproducer
    needs = []
    if re.search(r"^\s*(?:import|from) torch\b", path.read_text(encoding="utf-8"), re.M):
        needs.append("torch")
    lanes = _script_lanes(pack, base_name)
    if any(pack.lane_requires(lane) == "cuda" for lane in lanes):
        needs.append("a CUDA GPU")
    for target, extra in sorted({b for lane in lanes for b in lane.extra_builds}):
        other = pins.load_manifest(root, target)
        xbase = other.base(extra)
        with_pins = f" (with {', '.join(xbase.runtime_requires)})" if xbase.runtime_requires else ""
        needs.append(f"{other.distribution} {xbase.version}{with_pins}")
    code = standalone.amalgamate(path, [root / "repros"], "")
    needs += [r for r in manifest.bases[base_name].runtime_requires if _mentions(r, code)]
    return needs


def _script_lanes(pack: Pack, base_name: str) -> list:
    """The lanes on ``base_name`` that run the pack's own reproducer (not a minimal, suite or domain lane)."""
    return [lane for lane in pack.lanes if lane.base == base_name and not lane.minimal and not lane.suite
            and not lane.domain]


def _reproducer_section(script: tuple[str, str] | None, inline: bool, needs: list[str]) -> str:
    if script is None:
        return "No reproducer yet."
    name, text = script
    needs = ["the package under test", *needs]
    needs_text = ", ".join(needs[:-1]) + " and " + needs[-1] if len(needs) > 1 else needs[0]
    rest = f"is a single file needing only {needs_text}; its docstring gives the commands to run it."
    if inline:
        return f"`{name}` {rest}\n\n```python\n{text.rstrip()}\n```"
    return f"[`{name}`]({PLACEHOLDER}) ({len(text.splitlines())} lines) {rest}"



MINIMAL_KINDS = ("issue", "bug-report")  # bodies that inline the pack's minimal reproducer
MINIMAL_LINES = 40


def minimal_section(root: Path, pack: Pack, base_name: str, attachment: str) -> str | None:
    """The inline minimal reproducer of an issue or bug report (``minimal_repro``), with the long script
    as an attachment after it; None when the pack declares none or its kind does not inline one."""
    if pack.kind not in MINIMAL_KINDS or not pack.minimal_repro:
        return None
    text = (root / pack.minimal_repro).read_text(encoding="utf-8").rstrip()
    lanes = [lane for lane in pack.lanes if lane.minimal and lane.base == base_name]
    where = "on a GPU" if any(pack.lane_requires(lane) == "cuda" for lane in lanes) else "(no GPU needed)"
    out = (f"`python repro.py` {where} prints what it expected and what it got; it exits 1 while the problem "
           f"is there.\n\n```python\n{text}\n```")
    if attachment:
        out += f"\n\n{attachment}"
    return out


def minimal_problems(root: Path, pack: Pack, import_names: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, problem) of a minimal reproducer: too long, or importing more than upstream, torch and stdlib."""
    if not pack.minimal_repro:
        return []
    text = (root / pack.minimal_repro).read_text(encoding="utf-8")
    found = []
    if len(text.splitlines()) > MINIMAL_LINES:
        found.append((0, f"{pack.minimal_repro} has {len(text.splitlines())} lines (at most {MINIMAL_LINES})"))
    allowed = set(sys.stdlib_module_names) | {"torch", *(n.split(".")[0] for n in import_names)}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        for name in names:
            if name.split(".")[0] not in allowed:
                found.append((node.lineno, f"{pack.minimal_repro} imports {name} (only the upstream package, "
                                           "torch and the standard library)"))
    return found
