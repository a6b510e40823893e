"""Rebuild upstream/github/ (the recorded GitHub answers `harness related` reads offline).

The API itself cannot be reached from where this project runs, so the answers are reconstructed:

* ``pulls/{n}/files``: from a full clone of the upstream repository that holds GitHub's ``refs/pull/{n}/*``
  (``--clone``): the diff of ``refs/pull/{n}/merge`` against its first parent, else of ``refs/pull/{n}/head``
  against its merge base with the branch the PR targets. Only files a pack changes keep their ``patch``
  (GitHub itself omits the patch of large files; the others are listed with their line counts).
* the thread metadata (title, state, dates, author) and a one-sentence summary of the thread, written by us
  from the public thread text we read (see THREADS below; the README says which facts were not read).

Run: python tools/record_github_fixtures.py --clone /path/to/NVIDIA+Megatron-LM/repo
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "upstream" / "github"

# number: (kind, title, state, created_at, updated_at, merged_at, user, target branch, summary)
# Dates and titles are as read in the public thread text; "" where not read (README: what that means).
THREADS: dict[str, dict[int, dict]] = {
    "NVIDIA/Megatron-LM": {
        7208: dict(kind="pull", title="perf(dsa): tile indexer heads in the unfused score fallback", state="open",
                   created_at="2026-09-10T00:00:00Z", updated_at="2026-09-10T00:00:00Z", user="XiaomingFun233",
                   base="main", files=[("megatron/core/transformer/experimental_attention_variant/"
                                         "dsa_cudnn_kernels.py", None)],
                   body="Speeds up the PyTorch fallback of the DSA cuDNN wrapper: "
                        "_compute_indexer_scores_chunk_with_global_rows issues one BMM per group of up to 8 indexer "
                        "heads (bounded by a 256 MiB scratch budget) instead of one BMM per head."),
        4039: dict(kind="pull", title="", state="open", created_at="", updated_at="", user="xielaixin", base="main",
                   body="Adds a fused kernel path to megatron/core/transformer/experimental_attention_variant/dsa.py "
                        "for the DSA indexer scores, with a benchmark."),
        5099: dict(kind="pull", title="", state="merged", created_at="", updated_at="", user="HollowMan6",
                   base="main",
                   body="Adds dsa_cudnn_kernels.py (cuDNN DSA kernels with a PyTorch fallback that accumulates one "
                        "indexer head at a time) and routes dsa.py to it."),
        5049: dict(kind="pull", title="[2/2] Add TileLang fused DSA kernels support with THD and CP & Clean up",
                   state="merged", created_at="", updated_at="2026-07-23T00:00:00Z", user="HollowMan6", base="main",
                   body="Adds TileLang fused DSA kernels (indexer, sparse MLA forward and backward) for THD and "
                        "context parallel under experimental_attention_variant/ops/."),
        3345: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-03-24T00:00:00Z",
                   user="nenomigami", base="dev",
                   body="Adds a Hopper (compute capability 9) entry to the linear cross entropy fusion in "
                        "fused_linear_cross_entropy.py, with CuTe DSL kernels under linear_cross_entropy/hopper/."),
        2256: dict(kind="pull", title="[Dev] Feature: linear cross entropy fusion", state="merged",
                   created_at="", updated_at="2025-12-03T00:00:00Z", user="shjwudp", base="dev",
                   body="Adds megatron/core/fusions/fused_linear_cross_entropy.py with a Blackwell (compute "
                        "capability 10) entry, selected by --cross-entropy-fusion-impl linear."),
        2206: dict(kind="pull", title="Feature: linear cross entropy fusion", state="open",
                   created_at="2025-11-11T00:00:00Z", updated_at="2025-11-24T00:00:00Z", user="Jianbing-D",
                   base="main",
                   body="Fuses the lm_head linear layer with cross entropy so the logits are not materialized "
                        "(fused_linear_cross_entropy.py, Blackwell kernels)."),
        4312: dict(kind="pull", title="feat: Optimize memory footprint of long-context training via fused kernel "
                                      "and chunking", state="open", created_at="2026-04-15T00:00:00Z",
                   updated_at="2026-08-03T00:00:00Z", user="terminator123", base="main",
                   body="Chunks the output layer and uses a fused cross entropy kernel taken from Liger-Kernel to "
                        "lower the logits' peak memory in long-context training (fused_linear_cross_entropy.py)."),
        1738: dict(kind="issue", title="[ENHANCEMENT] Support for FusedLinear+CrossEntropy Loss", state="open",
                   created_at="2025-08-11T00:00:00Z", updated_at="2025-08-12T00:00:00Z", user="Skylion007",
                   body="Feature request: fuse the final linear layer with the cross entropy loss so the logits "
                        "are never materialized, as Liger-Kernel and Apple's Cut Cross Entropy do."),
        4825: dict(kind="pull", title="Add opt-in MXFP8 LM-head output projection", state="merged",
                   created_at="2026-05-15T00:00:00Z", updated_at="2026-05-24T00:00:00Z", user="gdengk", base="main",
                   files=[],
                   body="Behind a new fp8_output_proj flag, GPTModel builds its output layer as a TE module that "
                        "runs under the MXFP8 recipe; the main-branch port of two 26.04-alpha PRs, written as its "
                        "own module rather than on the alpha-only LinearCrossEntropyModule wrapper."),
        6252: dict(kind="pull", title="Add mixed-precision (FP32) LM output logits", state="merged",
                   created_at="2026-08-04T00:00:00Z", updated_at="", user="mkhona-nvidia", base="main", files=[],
                   body="Lets the language model's output_layer GEMM return float32 logits (a logit_dtype option) "
                        "instead of rounding them to bf16 before the cross entropy."),
        # added 2026-11-27 (issue 44): found by the files and defs they change, from the clone's refs/pull/N/merge
        # (their files.json: merge^1..merge); titles, states and dates from the stored issues corpus where it
        # holds the thread, else "(title not recorded)" and the state the snapshot implies (README)
        6756: dict(kind="pull", title="chore: AUT-1623 nightly sync main into dev (2026-08-21)", state="closed",
                   created_at="2026-08-21T00:00:00Z", updated_at="2026-08-23T00:00:00Z", user="svcnemo-autobot",
                   base="dev",
                   body="Nightly sync of main into dev; closed without merge (later syncs #6907, #7094 layered it)."),
        6279: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-12T00:00:00Z", user="",
                   base="dev", body="Ports the TileLang SparseMLA files of #5049 to dev."),
        4798: dict(kind="pull", title="[feat] Hybrid model ep overlapping main", state="open",
                   created_at="2026-05-14T00:00:00Z", updated_at="2026-07-27T00:00:00Z", user="Wohox", base="main",
                   body="Grouped HybridStack syntax and EP-overlap scheduling for hybrid layers; also drops an empty "
                        "output_layer._extra_state from HybridModel.sharded_state_dict."),
        4942: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-07-27T00:00:00Z",
                   user="Connor-XY", base="main", body="Part 2 of the split of #4798 (grouped HybridStack)."),
        4943: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-07-27T00:00:00Z",
                   user="Connor-XY", base="main", body="Part 3 of the split of #4798 (MTP chunk state)."),
        4944: dict(kind="pull", title="[fix] Training wire-up for hybrid EP-overlap (4/4 of #4798)", state="open",
                   created_at="2026-05-22T00:00:00Z", updated_at="2026-07-27T00:00:00Z", user="Connor-XY",
                   base="main", body="Part 4 of the split of #4798; stacked on #4942, so its diff carries "
                                     "hybrid_model.py."),
        5031: dict(kind="pull", title="Support HybridModelConfig recipes in HybridModel", state="open",
                   created_at="2026-05-27T00:00:00Z", updated_at="2026-06-01T00:00:00Z", user="Phlip79",
                   base="main", body="Wires recipe objects into the HybridModel constructor (split of #4537)."),
        6741: dict(kind="pull", title="[Dev] Add absolute row alignment for MTP sequence rolls", state="open",
                   created_at="2026-08-21T00:00:00Z", updated_at="2026-08-21T00:00:00Z", user="buptzyb", base="dev",
                   body="Moves MTP sequence-roll infrastructure into its own module and reuses it in GPT, "
                        "HybridModel and CUDA graph call paths."),
        6315: dict(kind="pull", title="[Dev] feat(multimodal): migrate Qwen3.5-VL to HybridModel", state="merged",
                   created_at="2026-08-06T00:00:00Z", updated_at="2026-08-06T00:00:00Z", user="BestJuly",
                   base="dev", body="Moves the Qwen3.5-VL example decoder from GPTModel to HybridModel."),
        4583: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-05-01T00:00:00Z", user="",
                   base="main", body="Changes HybridModel.forward's output-layer lines."),
        5645: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-07-03T00:00:00Z", user="",
                   base="main", body="Changes hybrid_model.py (HybridModel.__init__ and forward)."),
        6233: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-03T00:00:00Z", user="",
                   base="main", body="Context-parallel partition modes; touches HybridModel."),
        6648: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-20T00:00:00Z", user="",
                   base="dev", body="Exposes model tensors for metric observation; touches HybridModel.forward."),
        3747: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-06-01T00:00:00Z", user="",
                   base="main", body="Moves the DSA indexer loss helpers of dsa.py."),
        3044: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-04-21T00:00:00Z", user="",
                   base="dev", body="Moves the DSA helpers of dsa.py into a dsa_fused_kernels package."),
        5386: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-06-17T00:00:00Z", user="",
                   base="main", body="Re-quotes the einsum string of _compute_index_scores."),
        4897: dict(kind="pull", title="[dev] Enable cudnn fused kernel in dsa for DeepSeek-V3.2", state="closed",
                   created_at="", updated_at="2026-05-29T00:00:00Z", user="", base="dev",
                   body="The dev counterpart of the cuDNN DSA wiring (#5099 on main): replaces dsa.py's unfused "
                        "index-score helper with an unfused indexer-loss-and-top-k function; closed without merge."),
        4740: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-05-11T00:00:00Z", user="",
                   base="dev", body="Tokenizer and vocab changes; touches _VocabParallelCrossEntropy.forward."),
        2394: dict(kind="pull", title="", state="open", created_at="", updated_at="2025-12-02T00:00:00Z", user="",
                   base="dev", body="A gpt-oss continued-training example; touches ColumnParallelLinear."),
        3002: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-01-26T00:00:00Z", user="",
                   base="main", body="BitNet pretraining; touches tensor_parallel/layers.py."),
        4036: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-04T00:00:00Z", user="",
                   base="main", body="Adds stacklevel to warnings.warn() calls across megatron/core."),
        4179: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-07-07T00:00:00Z", user="",
                   base="main", body="Save and load in DTensor format; touches ColumnParallelLinear.__init__."),
        6249: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-04T00:00:00Z", user="",
                   base="main", body="Refines the use of pg_collection in GTP; touches ColumnParallelLinear."),
        5929: dict(kind="pull", title="", state="merged", created_at="", updated_at="", user="", base="main",
                   body="Adds mark_keep_in_fp32 and convert_module_to_dtype_except_fp32_marked to "
                        "megatron/core/transformer/module.py so marked parameters keep float32 through "
                        "Float16Module."),
    },
    "state-spaces/mamba": {
        # added 2026-11-27 (issue 44), files from the clone (refs/pull/N/merge, else head against its merge base
        # with main): the reverted fix in 04's kernel, and the PRs on the code contract 23 calls
        869: dict(kind="pull", title="fix: ensure dtype consistency in tensor operations in "
                                      "mamba3_siso_bwd_kernel_dqkv in mamba3_siso_bwd.py", state="merged",
                  created_at="2026-03-22T00:00:00Z", updated_at="2026-03-23T00:00:00Z", user="tuxunlu", base="main",
                  body="Casts ssm_states_block to the other operand's dtype in two dots of "
                       "mamba3_siso_bwd_kernel_dqkv (merged e85e92d, reverted the same day by #877)."),
        877: dict(kind="pull", title="Revert \"fix: ensure dtype consistency in tensor operations in "
                                      "mamba3_siso_bwd…\"", state="merged", created_at="2026-03-23T00:00:00Z",
                  updated_at="2026-03-23T00:00:00Z", user="caitWW", base="main",
                  body="Reverts #869 (d744961)."),
        914: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-04-12T00:00:00Z", user="",
                  base="main", body="ROCm support for the Mamba-3 Triton kernels."),
        946: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-05-10T00:00:00Z", user="",
                  base="main", body="Dynamic-dimension annotations of the MIMO TileLang kernels."),
        850: dict(kind="pull", title="feat: Add Mamba-3 implementation (ICLR 2026)", state="open",
                  created_at="2026-03-08T00:00:00Z", updated_at="2026-03-09T00:00:00Z", user="payk24", base="main",
                  body="A third party's Mamba-3 module and Triton kernels, opened before the official release."),
        913: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-04-12T00:00:00Z", user="",
                  base="main", body="Changes Mamba3.step."),
        976: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-06-15T00:00:00Z", user="",
                  base="main", body="Changes Mamba3.forward."),
        978: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-06-20T00:00:00Z", user="",
                  base="main", body="Changes Mamba3.forward."),
        1039: dict(kind="pull", title="fix: accept (B, 1, D) in Mamba3.step like Mamba2", state="open",
                   created_at="2026-09-04T00:00:00Z", updated_at="2026-09-20T00:00:00Z", user="Chessing234",
                   base="main", files=[("mamba_ssm/modules/mamba3.py", None),
                                       ("tests/modules/test_mamba3_step_shape.py", None)],
                   body="Mamba3.step accepts (B, 1, D) as Mamba2.step does, so decode through forward works."),
        904: dict(kind="issue", title="Mamba3 backward pass (mamba3_siso_bwd_kernel_dqkv) 38.7x slower on GB200 "
                                      "(SM100) due to ptxas C7907 eliminating autotuner configs", state="open",
                  created_at="", updated_at="2026-04-10T00:00:00Z", user="",
                  body="On SM100, ptxas rejects autotune configs of mamba3_siso_bwd_kernel_dqkv and the survivors "
                       "spill registers, so the SISO backward runs far slower than on Hopper."),
        905: dict(kind="pull", title="Add maxnreg autotuning to Mamba-3 Triton kernels", state="merged",
                  created_at="2026-04-07T00:00:00Z", updated_at="", user="caitWW", base="main",
                  body="Adds maxnreg (None, 128, 256) to the autotune configs of the Mamba-3 SISO forward and "
                       "backward Triton kernels, for SM100 where Triton may pick a low register count."),
        955: dict(kind="pull", title="Fix mimo_rank OOM on consumer GPUs via TileLang memory aliasing & chunk "
                                     "dynamic fallback and Jit Cache", state="closed",
                  created_at="2026-05-27T00:00:00Z", updated_at="", user="DiegoXAI-Shape", base="main",
                  body="Lowers the shared memory of the TileLang MIMO backward in mamba3_mimo_bwd.py by reusing "
                       "shared buffers, and caps mimo_rank on GPUs with less than 150 KB of shared memory; closed "
                       "without merge."),
        1025: dict(kind="pull", title="fix(mamba3): support GH200 256x256 SISO backward", state="open",
                   created_at="2026-08-29T00:00:00Z", updated_at="2026-08-29T00:00:00Z", user="klokedm",
                   base="main", files=[("mamba_ssm/ops/triton/mamba3/mamba3_siso_bwd.py", None)],
                   body="Tiles the SISO backward over value/state rows so 256x256 heads fit on GH200, accumulating "
                        "the shared gradients in a fixed order in fp32."),
        1044: dict(kind="issue", title="Mamba3 MIMO backward cannot launch on a lower-shared-memory Blackwell SKU "
                                       "(220 KB requested vs 99 KB limit)", state="open", created_at="",
                   updated_at="2026-09-13T00:00:00Z", user="",
                   body="mamba_mimo_bwd_bwd in mamba3_mimo_bwd.py asks for more shared memory than a 99 KB "
                        "Blackwell part allows; a follow-up counts every alloc_shared of the kernel."),
    },
    # added 2026-11-27 (issue 44): PRs on the Liger-Kernel file contract 21 exercises, from a clone with
    # refs/pull/* (main at ead96b6, 2026-08-21): each holds refs/pull/N/merge there; summaries from their commit
    # subjects, titles not read
    "linkedin/Liger-Kernel": {
        1126: dict(kind="pull", title="", state="draft", created_at="", updated_at="2026-08-20T00:00:00Z", user="",
                   base="main", body="Adds an assertion and edits comments in the fused linear cross entropy "
                                     "forward and backward."),
        1289: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-07-28T00:00:00Z", user="",
                   base="main", body="Avoids a ZeroDivisionError in fused linear cross entropy when the weight's "
                                     "vocab dimension is 0."),
        1292: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-12T00:00:00Z", user="",
                   base="main", body="Avoids a device-to-host sync from .item() in the cross entropy forward."),
        1324: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-21T00:00:00Z", user="",
                   base="main", body="Accumulates the fused linear cross entropy grad_weight directly across "
                                     "dtypes."),
        1328: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-21T00:00:00Z", user="",
                   base="main", body="Gates the grad_weight addmm out_dtype fast path off under torch.compile."),
        1331: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-20T00:00:00Z", user="",
                   base="main", body="Guards the Triton launches by the tensors' device."),
        1338: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-22T00:00:00Z", user="",
                   base="main", body="Accumulation dtype support in fused linear losses; ignore_index under "
                                     "torch.compile."),
        1353: dict(kind="pull", title="", state="open", created_at="", updated_at="2026-08-20T00:00:00Z", user="",
                   base="main", body="Avoids a ZeroDivisionError in fused linear cross entropy when the weight's "
                                     "vocab dimension is 0."),
    },
    "tile-ai/tilelang": {
        # added 2026-11-27 (issue 44): the threads that decide when 07's TMA-off mitigation can retire (read in
        # the tilelang clone's history and the issues corpus); they change no file of a pack
        1798: dict(kind="pull", title="[Feature] Introduce higher-dimensional gemm layout support", state="merged",
                   created_at="", updated_at="2026-02-25T00:00:00Z", user="LeiWang1999", base="main", files=[],
                   body="Among other changes, relaxes the TMA layout check of bulk copies from a 2-D shared layout "
                        "to 2-D or more (808b0ce, first released in 0.1.10)."),
        2024: dict(kind="pull", title="Re-enable deprecated `TL_DISABLE_TMA_LOWER` pass config for TMA store",
                   state="merged", created_at="2026-04-09T00:00:00Z", updated_at="2026-04-10T00:00:00Z",
                   user="LJC00118", base="main", files=[],
                   body="Keeps the deprecated global TL_DISABLE_TMA_LOWER working, with removal announced for "
                        "0.1.10; per-copy disable_tma is the replacement."),
        2380: dict(kind="pull", title="[Backend] Support TMA lowering for arbitrary (swizzled) SMEM layout",
                   state="merged", created_at="2026-06-11T00:00:00Z", updated_at="2026-06-18T00:00:00Z",
                   user="Yongqi-Zhuo", base="main", files=[],
                   body="TMA lowering for arbitrary swizzled shared-memory layouts (65dbc98, first released in "
                        "0.1.12)."),
        2394: dict(kind="issue", title="[BUG][Fuzzer][ice-on-valid-code] LayoutInference crashes with an internal "
                                       "\"Divide by zero\" instead of compiling — column-broadcast into a 2-D "
                                       "`T.Parallel` when the tile width isn't a power of two",
                   state="closed", created_at="2026-06-14T00:00:00Z", updated_at="", user="Hughshine",
                   body="Layout inference aborts with 'Check failed: pb->value != 0 : Divide by zero' when a "
                        "fragment is broadcast across the columns of a 2-D T.Parallel whose width is not a power "
                        "of two (reported against 0.1.11)."),
        2469: dict(kind="pull", title="[BugFix] Fix LayoutInference divide-by-zero on non-power-of-two broadcast",
                   state="merged", created_at="2026-06-28T00:00:00Z", updated_at="", user="Chennesxu", base="main",
                   body="Fixes the layout inference divide by zero of #2394: iterator splits that over-cover a "
                        "non-power-of-two extent count as full coverage."),
    },
}


def git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(clone), *args], check=True, capture_output=True, text=True).stdout


def pack_files() -> set[str]:
    """Every upstream file a pack declares it changes (each pack's pack.toml, docs/layout.md)."""
    from harness.lane.tracking import Tracking

    return {f for pack in Tracking.load(ROOT).packs.values() for f in pack.files}


_STATUS = {"A": "added", "M": "modified", "D": "removed", "R": "renamed", "C": "copied", "T": "modified"}


def pr_files(clone: Path, number: int, branch: str, ours: set[str]) -> list[dict] | None:
    refs = set(git(clone, "for-each-ref", "--format=%(refname)", f"refs/pull/{number}/").split())
    if f"refs/pull/{number}/merge" in refs:
        old, new = f"refs/pull/{number}/merge^1", f"refs/pull/{number}/merge"
    elif f"refs/pull/{number}/head" in refs:
        new = f"refs/pull/{number}/head"
        old = git(clone, "merge-base", new, f"refs/heads/{branch}").strip()
    else:
        return None
    status = {}
    for line in git(clone, "diff", "--name-status", "--no-renames", old, new).splitlines():
        code, name = line.split("\t", 1)
        status[name] = _STATUS.get(code[:1], "modified")
    out = []
    for line in git(clone, "diff", "--numstat", "--no-renames", old, new).splitlines():
        add, dele, name = line.split("\t", 2)
        added, deleted = (int(add), int(dele)) if add != "-" else (0, 0)
        entry = {"filename": name, "status": status.get(name, "modified"), "additions": added,
                 "deletions": deleted, "changes": added + deleted}
        if name in ours:
            diff = git(clone, "diff", old, new, "--", name)
            entry["patch"] = diff[diff.index("@@"):].rstrip("\n") if "@@" in diff else ""
        out.append(entry)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clone", action="append", default=[], metavar="[OWNER/REPO=]PATH",
                    help="full clone of an upstream with refs/pull/* (a bare PATH: NVIDIA/Megatron-LM), repeatable; "
                         "without one, the pulls/{n}/files.json computed from a clone earlier are kept as they are")
    ap.add_argument("--recorded", default="", help="the day these answers are recorded (YYYY-MM-DD), for "
                                                   "recorded.json; default: keep the day there")
    args = ap.parse_args()
    meta = OUT / "recorded.json"
    old = json.loads(meta.read_text()) if meta.is_file() else {}
    write(meta, {"recorded": args.recorded or old.get("recorded", ""),
                 "how": "reconstructed by tools/record_github_fixtures.py, not captured (README.md)"})
    ours = pack_files()
    clones = dict(c.split("=", 1) if "=" in c else ("NVIDIA/Megatron-LM", c) for c in args.clone)
    for slug, threads in THREADS.items():
        owner, repo = slug.split("/")
        clone = Path(clones[slug]) if slug in clones else None
        items = []
        pulls = []
        for number, t in sorted(threads.items()):
            url = f"https://github.com/{slug}/{'pull' if t['kind'] == 'pull' else 'issues'}/{number}"
            item = {"number": number, "html_url": url, "title": t["title"] or "(title not recorded)",
                    "state": "open" if t["state"] in ("open", "draft", "") else "closed",
                    "created_at": t["created_at"] or None, "updated_at": t["updated_at"] or None,
                    "user": {"login": t["user"]} if t["user"] else None, "body": t["body"]}
            if t["kind"] == "pull":
                item["pull_request"] = {"html_url": url,
                                        "merged_at": t["updated_at"] or "unknown" if t["state"] == "merged" else None}
                pulls.append({k: item[k] for k in ("number", "html_url", "title", "state", "created_at", "updated_at",
                                                   "user", "body")}
                             | {"merged_at": item["pull_request"]["merged_at"], "draft": t["state"] == "draft",
                                "base": {"ref": t.get("base") or "main"}})
            items.append(item)
            kind_dir = "pulls" if t["kind"] == "pull" else "issues"
            thread = (dict(item, merged=t["state"] == "merged", base={"ref": t.get("base") or "main"})
                      if t["kind"] == "pull" else item)
            write(OUT / "repos" / owner / repo / kind_dir / f"{number}.json", thread)
            if t["kind"] == "pull":
                if "files" in t:  # named from the thread text ([] when no file name was read: none recorded)
                    files = [{"filename": f, "status": "modified"} for f, _ in t["files"]] or None
                elif clone is not None:
                    files = pr_files(clone, number, t["base"], ours)
                else:
                    files = None  # keep what a clone gave earlier
                if files is not None:
                    write(OUT / "repos" / owner / repo / "pulls" / str(number) / "files.json", files)
        write(OUT / "search" / "issues" / f"{owner}+{repo}.json",
              {"total_count": len(items), "incomplete_results": False, "items": items})
        # GET /repos/{owner}/{repo}/pulls?state=all: every recorded PR (harness related lists them and reads
        # their files, whatever their words say)
        write(OUT / "repos" / owner / repo / "pulls.json", pulls)


def write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
