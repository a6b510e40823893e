"""Lint of a filed text: nothing of ours leaves (host names, private addresses and paths, e-mail, tokens,
and in a body this repository's vocabulary)."""

from __future__ import annotations

import re
from dataclasses import dataclass

BODY_LIMIT = 65000  # GitHub refuses bodies over 65536 characters

# (rule, pattern): each match is one lint finding. Body and reproducer alike.
LINT_RULES = (
    ("internal host name", re.compile(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*"
                                      r"\.(?:internal|local|lan|corp|intranet|home\.arpa)\b", re.I)),
    ("private IP address", re.compile(r"\b(?:10\.\d{1,3}|169\.254|192\.168|172\.(?:1[6-9]|2\d|3[01]))"
                                      r"\.\d{1,3}(?:\.\d{1,3})?\b")),
    ("private path", re.compile(r"(?<![\w.~/-])(?:/root|/work|/home/[^/\s]+)(?=[/\s`'\")\]:,]|$)")),
    ("e-mail address", re.compile(r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b")),
    ("token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
                         r"|(?:AKIA|ASIA)[0-9A-Z]{16})\b")),
)
# Body only: a temporary path or a loopback address in a filed text is a trace of one of our hosts; in a
# script they are ordinary code (a rendezvous on 127.0.0.1, a scratch directory).
BODY_RULES = (
    ("private IP address", re.compile(r"\b127\.\d{1,3}\.\d{1,3}(?:\.\d{1,3})?\b")),
    ("private path", re.compile(r"(?<![\w.~/-])/tmp(?=[/\s`'\")\]:,]|$)")),
)
# Bodies and the attached scripts alike: this repository's words (a script a maintainer runs is ours only in code).
VOCABULARY_RULES = (
    ("internal vocabulary", re.compile(
        r"\b(?:lanes?|receipts?|harness|sentinels?|packs?|tracking\.toml|patch-lane|HOST_STAMP|Upstream-Status"
        r"|packs? ?\d{2})\b"
        r"|\b(?:BUG|FIX|MEMORY_SAVE|EQUIVALENCE|REGRESSION_GUARD|CONTRACT(?:_VIOLATION)?)_"
        r"(?:REPRODUCED|ABSENT|VALIDATED|FAILED|VERIFIED|MISSING|BROKEN|PASSED|HELD|DETECTED|MISSED)\b"
        r"|^Pack: |\bHARNESS_\w+", re.I)),
)


@dataclass(frozen=True)
class Finding:
    line: int
    rule: str
    text: str
    where: str = "body"

    def describe(self, name: str | None = None) -> str:
        # line 0: a finding about the whole file (its budget, its template, a build), not one of its lines
        where = f"{name or self.where}:{self.line}" if self.line > 0 else f"{name or self.where} (the whole file)"
        return f"{where}: {self.rule}: {self.text!r}"


def lint(text: str, body: bool = True, where: str = "body", vocabulary: bool | None = None) -> list[Finding]:
    """Findings in ``text``; ``body=False`` lints a script (temporary paths and loopback addresses allowed; the
    vocabulary rule only with ``vocabulary=True``, as for the attached reproducer)."""
    rules = LINT_RULES + (BODY_RULES if body else ()) + (VOCABULARY_RULES if (body if vocabulary is None else
                                                                             vocabulary) else ())
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for rule, pattern in rules:
            for m in pattern.finditer(line):
                found.append(Finding(no, rule, m.group(0), where))
    if body and len(text) > BODY_LIMIT:
        found.append(Finding(0, "too long for GitHub", f"{len(text)} characters (limit {BODY_LIMIT})", where))
    return found

