"""The filing: a pack's change as it goes upstream, and whether it is ready to go.

Besides the bodies below the package owns the edit of a series as commits (``edit``), the series as it is
filed (``export``), the self-contained reproducer file (``standalone``), whether a pack is ready to file
(``readiness``), the landing order and filing waves (``landing``) and performance claims (``performance``).

May import: ``harness.errors``, ``harness.base``, ``harness.upstream``, ``harness.lane``, ``harness.watch``.

Filing bodies: the text a maintainer reads once and acts on, and the reproducer that goes with it.

``render`` fills ``templates/<kind>.md`` (``string.Template``) with parts that are all computed:

* ``$problem`` and ``$change``: the patch's own commit message (first paragraph: what breaks; the rest: the
  change), trailers of ours (``Upstream-Status:``, ``Pack:``) dropped, lines unwrapped. A pack without a
  patch uses its ``summary`` (and ``fix``) instead.
* ``$where``: the upstream file, line and function of every hunk in the series for the base the pack is
  filed against (``Pack.filing_base``), linked to GitHub when that base's commit is known.
* ``$evidence``: a short table of the figures that decide the claim, declared per pack as data
  (``pack.toml's [[evidence]]``, see ``tracking.EvidenceRow``) and read from the lanes' latest receipts, never
  typed: the result, its tolerance and control, timings -- plus the hosts (GPU, driver, CUDA, torch,
  triton, Python) and the builds they ran on.
* ``$reproducer``: a single self-contained script (``harness/filing/standalone.py``) written next to the body;
  inlined when small, else uploaded as a gist by the printed ``gh`` command and linked from the body.
* ``$diff`` (issues and comments): the change itself, folded; ``$related``: the other threads as
  ``owner/repo#N``.

Before anything is shown as postable the body and the script are linted: no internal host names or
private IP addresses, no private paths, no e-mail addresses, no tokens, and (body) none of this
repository's vocabulary. Posting runs ``gh`` only after a person typed the pack id at a terminal and
records who decided and when under ``[packs.NN.filing]``.

The package, one module per concept (imports go down this list):

* ``lint``: what must not leave this repository;
* ``parts``: commit message, hunk locations, diff, base labels;
* ``evidence``: the evidence table from receipts (also read by ``performance``);
* ``reproducer``: the self-contained script and its section of the body;
* ``body``: ``render``, the template filled;
* ``check``: the body check (layout, budget, anchors, evidence bases, names; lint included);
* ``send``: the ``gh`` plan and ``post``.

The names below are the package's public surface; callers use ``filing.render(...)`` and so on.
"""

from __future__ import annotations

from harness.filing.body import DIFF_LIMIT, INLINE_LIMIT, TEMPLATES, Rendered, render, template_path
from harness.filing.check import BUDGETS, prose_words
from harness.filing.check import check as body_check
from harness.filing.evidence import VERDICT_FIGURE, Evidence, evaluate, resolve_row, shown, table_cell
from harness.filing.lint import BODY_LIMIT, Finding, lint
from harness.filing.parts import Location, Message, base_label, hunk_locations, patch_diff, patch_message
from harness.filing.reproducer import PLACEHOLDER, reproducer_script, script_name
from harness.filing.send import GhPlan, decider, filing_thread, gh_plan, post

__all__ = [
    "BODY_LIMIT", "BUDGETS", "DIFF_LIMIT", "Evidence", "Finding", "GhPlan", "INLINE_LIMIT", "Location",
    "Message", "PLACEHOLDER", "Rendered", "TEMPLATES", "VERDICT_FIGURE", "base_label", "body_check", "decider",
    "evaluate", "filing_thread", "gh_plan", "hunk_locations", "lint", "patch_diff", "patch_message", "post",
    "prose_words", "render", "reproducer_script", "resolve_row", "script_name", "shown", "table_cell",
    "template_path",
]
