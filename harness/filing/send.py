"""Posting a body with ``gh``: the plan (an optional gist upload, then the filing), a typed confirmation, and
the decision recorded under ``[packs.NN.filing]``."""

from __future__ import annotations

import getpass
import hashlib
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, UpstreamError, UsageError
from harness.filing.body import LINKED_ISSUE, Rendered
from harness.filing.reproducer import PLACEHOLDER
from harness.lane import receipts
from harness.lane.tracking import Pack, Tracking
from harness.upstream import git, pins
from harness.upstream.github import repo_slug
from harness.watch import decisions


def filing_thread(pack: Pack) -> str:
    """Where a comment is posted: the thread its ``comment-there`` decision names, else its filing target."""
    url = decisions.comment_target(pack)
    if url is None:
        raise ConfigError(f"pack {pack.id}: a comment needs a [[related]] decision in {pack.declared_in} "
                          f"'comment-there' or a thread with role = \"filing target\"")
    return url


@dataclass(frozen=True)
class GhPlan:
    """The gh commands that file a body: an optional gist upload of the reproducer, then the filing."""

    create: list[str]
    body_file: Path
    gist: list[str] | None = None
    feature_request: list[str] | None = None  # the issue a PR links (feature request or bug report), created first

    def shell(self) -> str:
        if self.gist is None and self.feature_request is None:
            return shlex.join(self.create)
        body = shlex.quote(_short(self.body_file))
        steps, edits = [], []
        if self.gist is not None:  # first: the linked issue may link the script too
            steps.append(f"url=$({shlex.join(self.gist)})")
            edits.append(f"s|{PLACEHOLDER}|$url|g")
        if self.feature_request is not None:
            issue = list(self.feature_request)
            source = issue[issue.index("--body-file") + 1]
            issue[issue.index("--body-file") + 1] = "-"
            fill = f"sed \"{';'.join(edits)}\" {shlex.quote(source)} | " if edits else f"cat {shlex.quote(source)} | "
            steps.append(f"issue=$({fill}{shlex.join(issue)})")
            edits.append(f"s|{LINKED_ISSUE}|$issue|g")
        return " && ".join(steps) + f" && sed \"{';'.join(edits)}\" {body} | {shlex.join(self.create)}"

    @property
    def target(self) -> str:
        return self.create[3] if self.create[2] == "comment" else self.create[4]


def _short(path: Path | str) -> str:
    """``path`` relative to the working directory when it lies under it (the command is run from there)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def gh_plan(root: Path, rendered: Rendered, body_file: Path, script_file: Path | None,
            head: str | None = None, feature_file: Path | None = None) -> GhPlan:
    pack = rendered.pack
    slug = repo_slug(pins.load_manifest(root, pack.target).repo)
    upload = rendered.needs_upload and script_file is not None
    linked = rendered.companion is not None and feature_file is not None
    source = "-" if upload or linked else _short(body_file)
    upload = upload or (linked and rendered.companion is not None and PLACEHOLDER in rendered.companion[1]
                        and script_file is not None)
    if pack.kind == "comment":
        url = filing_thread(pack)
        create = ["gh", "pr" if "/pull/" in url else "issue", "comment", url, "--body-file", source]
    elif slug is None:
        raise ConfigError(f"upstream/{pack.target}.toml: key 'repo' is not a github.com repository URL")
    elif pack.kind == "pr":
        create = ["gh", "pr", "create", "--repo", slug, "--title", rendered.title, "--body-file", source,
                  "--head", head or "<fork-owner>:<branch>"]
    else:
        create = ["gh", "issue", "create", "--repo", slug, "--title", rendered.title, "--body-file", source]
    gist = (["gh", "gist", "create", "--public", "--desc", f"Reproducer: {rendered.title}", _short(script_file)]
            if upload and script_file is not None else None)
    feature = (["gh", "issue", "create", "--repo", slug or "", "--title", rendered.companion[0], "--body-file",
                _short(feature_file)] if linked and rendered.companion is not None and feature_file is not None
               else None)
    return GhPlan(create, body_file, gist, feature)


def decider(root: Path) -> str:
    """Who typed the decision: git config user.name, else $USER."""
    done = git.in_user_repo(root, "config", "user.name")
    return (done.stdout.strip() if done is not None else "") or getpass.getuser()


def _gh(argv: list[str], pack: Pack, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, input=stdin)
    except FileNotFoundError:
        raise UsageError("gh not found on PATH; nothing was posted") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise UpstreamError(f"pack {pack.id}: {' '.join(argv[:3])} failed ({done.returncode}): {first}")
    return next((ln.strip() for ln in reversed(done.stdout.splitlines()) if ln.strip().startswith("https://")), "")


def post(root: Path, tracking: Tracking, rendered: Rendered, plan: GhPlan, confirm) -> dict:
    """Run the plan once ``confirm`` returned the pack id; record the decision."""
    pack = rendered.pack
    tracking.check_filing_slot(pack.id)  # before anything is posted
    if "<fork-owner>:<branch>" in plan.create:
        raise UsageError(f"pack {pack.id}: a PR needs --head OWNER:BRANCH before it can be posted")
    typed = confirm(f"Post pack {pack.id} ({pack.kind}) to {plan.target}? Type the pack id ({pack.id}) to confirm: ")
    if typed.strip() != pack.id:
        raise UsageError(f"pack {pack.id}: confirmation {typed.strip()!r} does not match; nothing was posted")
    body = rendered.body
    gist_url = None
    if plan.gist is not None:
        gist_url = _gh(plan.gist, pack)
        if not gist_url:
            raise UpstreamError(f"pack {pack.id}: gh gist create printed no URL; nothing else was posted")
        body = body.replace(PLACEHOLDER, gist_url)
    feature_url = None
    if plan.feature_request is not None and rendered.companion is not None:
        issue = list(plan.feature_request)
        issue[issue.index("--body-file") + 1] = "-"
        text = rendered.companion[1].replace(PLACEHOLDER, gist_url) if gist_url else rendered.companion[1]
        feature_url = _gh(issue, pack, stdin=text)
        if not feature_url:
            raise UpstreamError(f"pack {pack.id}: gh issue create printed no URL for the linked issue; the gist "
                                f"({gist_url or 'none'}) is all that was posted")
        body = body.replace(LINKED_ISSUE, feature_url)
    url = _gh(plan.create, pack, stdin=body if "-" in plan.create else None)
    entry = {
        "decided_by": decider(root),
        "decided_at": receipts.utc_now().isoformat().replace("+00:00", "Z"),
        "how": " ".join(plan.create[:3]),
        "url": url or None,
        "reproducer": gist_url,
        **({"linked_issue": feature_url} if feature_url else {}),
        "body_sha256": hashlib.sha256(body.encode()).hexdigest(),
    }
    tracking.record_filing(pack.id, entry)
    tracking.save()
    return entry
