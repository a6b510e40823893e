"""Mamba-3 reproducers (packs 04, 05, 07): what can be checked without a GPU.

The decisions of pack 05 fed synthetic observations (every negative path must keep BUG_ABSENT
and FIX_VALIDATED away), its FLOP model against a hand count, its argument modes, the parallel
prewarm with a stand-in script, and, where torch is installed, the reference construction
(repeat per head, sum per group) against autograd through a toy grouped operator and the whole
correctness and production flows on a stand-in op with injected faults (wrong head-to-group
mapping, non-finite gradients, the 2.3.2.post1 refusal).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAMBA = ROOT / "repros" / "mamba"


@pytest.fixture(scope="module")
def p05(load_reproducer):
    sys.path.insert(0, str(MAMBA))  # _mamba3 lives beside the reproducers
    try:
        return load_reproducer(MAMBA / "pack05_mimo_gqa_backward.py", "pack05_mimo_gqa_backward")
    finally:
        sys.path.remove(str(MAMBA))


def _ok(p05, case):
    return p05.observation(case, compared=len(p05.GRADS))


# --------------------------------------------------------------------------- pack 05 decisions


def test_unpatched_raise_is_the_bug(p05):
    obs = [p05.observation("dense H=16 G=2", raised="G value of 2 is not currently supported!")]
    sentinel, details = p05.decide_unpatched(["dense H=16 G=2", "varlen H=16 G=2"], obs)
    assert sentinel == "BUG_REPRODUCED"
    assert details["symptom"] == "raises" and "not currently supported" in details["error"]


def test_unpatched_absent_only_when_every_case_agrees(p05):
    expected = ["dense H=16 G=2", "varlen H=16 G=2", "dense H=16 G=4", "varlen H=16 G=4"]
    sentinel, details = p05.decide_unpatched(expected, [_ok(p05, c) for c in expected])
    assert sentinel == "BUG_ABSENT"
    assert details["checked"] == expected


def test_unpatched_wrong_gradients_never_absent(p05):
    expected = ["dense H=16 G=2", "varlen H=16 G=2"]
    obs = [_ok(p05, expected[0]),
           p05.observation(expected[1], failures=["varlen H=16 G=2:Q rel_fro 0.3 > 0.0066"], compared=14)]
    sentinel, details = p05.decide_unpatched(expected, obs)
    assert sentinel == "BUG_REPRODUCED"
    assert details["symptom"].startswith("wrong gradients") and details["n_failures"] == 1


def test_unpatched_missing_case_gives_no_sentinel(p05):
    expected = ["dense H=16 G=2", "varlen H=16 G=2"]
    with pytest.raises(RuntimeError, match="varlen H=16 G=2"):
        p05.decide_unpatched(expected, [_ok(p05, expected[0])])
    partial = [_ok(p05, expected[0]), p05.observation(expected[1], compared=13)]  # a tensor not compared
    with pytest.raises(RuntimeError):
        p05.decide_unpatched(expected, partial)


def test_patched_decisions(p05):
    expected = ["dense H=16 G=2", "varlen H=16 G=2"]
    good = [_ok(p05, c) for c in expected]
    assert p05.decide_patched(expected, good, [])[0] == "FIX_VALIDATED"
    sentinel, details = p05.decide_patched(expected, good, ["G=1:Q differs from the baseline build"])
    assert sentinel == "FIX_FAILED" and details["n_failures"] == 1
    sentinel, details = p05.decide_patched(expected, good[:1], [])
    assert sentinel == "FIX_FAILED" and details["failures"] == ["varlen H=16 G=2: not checked"]
    raised = [p05.observation(expected[0], raised="G value of 2 is not currently supported!")]
    assert p05.decide_patched(expected, raised, [])[0] == "FIX_FAILED"


@pytest.mark.parametrize("patched, pos, neg", [(False, "BUG_ABSENT", "BUG_REPRODUCED"),
                                               (True, "FIX_VALIDATED", "FIX_FAILED")])
def test_production_decisions(p05, patched, pos, neg):
    assert p05.decide_production(patched, None, [], 0.91, 1.15)[0] == pos
    assert p05.decide_production(patched, None, [], 1.15, 1.15)[0] == pos
    sentinel, details = p05.decide_production(patched, None, [], 1.3, 1.15)
    assert sentinel == neg and details["symptom"] == "GQA slower than the G=H workaround"
    assert p05.decide_production(patched, "G value of 8 is not currently supported!", [], None, 1.15)[0] == neg
    assert p05.decide_production(patched, None, ["production:Q rel_fro 1 > 0.01"], 0.9, 1.15)[0] == neg
    assert p05.decide_production(patched, None, [], None, 1.15)[0] == "SKIPPED"


# --------------------------------------------------------------------------- pack 05 model and modes


def test_flop_model_by_hand(p05):
    # B=1, S=16 (one chunk), H=1, N=P=1, R=1, chunk=16: L=16; per GEMM 2*L*L*N = 512, 2*L*L*P = 512, 2*L*N*P = 32
    f = p05.mimo_gemm_flops(1, 16, 1, 1, 1, 1, 16)
    assert f["fwd"] == 2 * 512 + 512 + 2 * 32
    assert f["bwd"] == f["fwd"] + 3 * 512 + 3 * 512 + 4 * 32
    assert f["total"] == f["fwd"] + f["bwd"]
    assert p05.mimo_gemm_flops(1, 17, 1, 1, 1, 1, 16)["total"] == 2 * f["total"]  # a partial chunk is a whole one


def test_flop_model_at_the_production_shape(p05):
    f = p05.mimo_gemm_flops(2, 4096, 128, 128, 64, 4, 16)
    L = 64
    per_unit = 14 * L * L * 128 + 10 * L * L * 64 + 16 * L * 128 * 64
    assert f["total"] == 2 * 128 * 256 * per_unit
    assert f["total"] == pytest.approx(1.2026e12, rel=1e-4)


def test_modes_fill_their_shapes(p05):
    a = p05.parse_args([])
    assert (a.heads, a.groups, a.batch, a.seqlen, a.also_groups) == (16, 2, 2, 128, [4])
    a = p05.parse_args(["--production-timing"])
    assert (a.heads, a.groups, a.headdim_v, a.headdim_qk, a.rank, a.chunk, a.batch, a.seqlen) == \
        (128, 8, 64, 128, 4, 16, 2, 4096)
    a = p05.parse_args(["--production-timing", "--seqlen", "2048"])
    assert a.seqlen == 2048 and a.heads == 128
    assert p05.parse_args(["--also-groups"]).also_groups == []


def test_warm_cases_cover_what_the_checks_compile(p05):
    a = p05.parse_args([])
    cases = p05.warm_cases(a, [2, 4])
    shapes = {(c["groups"], c["batch"], c["seqlen"], tuple(c["lengths"] or ())) for c in cases}
    assert shapes == {(g, 2, 128, ()) for g in (2, 4, 16)} | {(g, 1, 192, (64, 48, 80)) for g in (2, 4, 16)}
    assert p05.case_names(a, [2, 4]) == ["dense H=16 G=2", "varlen H=16 G=2", "dense H=16 G=4", "varlen H=16 G=4"]


def test_bad_groups_refused(p05):
    for groups in ([16], [1], [3]):
        with pytest.raises(SystemExit):
            p05.validate_groups(16, groups)


# --------------------------------------------------------------------------- reference construction (torch)


def test_reference_equals_autograd_of_a_grouped_operator(p05):
    """Toy GQA operator: head h uses group h // (H/G) of q and its own bias. The G=H run on repeated
    q, with its q-gradient summed per group, must equal autograd's gradient of the grouped operator."""
    torch = pytest.importorskip("torch")
    B, S, R, G, H, N = 2, 3, 2, 2, 6, 4
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, S, R, G, N, generator=g, dtype=torch.float64)
    bias = torch.randn(H, R, N, generator=g, dtype=torch.float64)
    w = torch.randn(B, S, R, H, N, generator=g, dtype=torch.float64)

    def op(qq, bb):  # per-head q: [B, S, R, H, N]
        return ((qq + bb.permute(1, 0, 2)[None, None]) ** 2 * w).sum()

    def grouped(qg, bb):  # the mapping the kernels use: head h reads group h // (H/G)
        idx = torch.arange(H) // (H // G)
        return op(qg[:, :, :, idx], bb)

    qa, ba = q.clone().requires_grad_(), bias.clone().requires_grad_()
    grouped(qa, ba).backward()

    inputs = {"Q": q, "K": q, "Q_bias": bias, "K_bias": bias}
    rep = p05.repeat_per_head(inputs, H, G)
    assert rep["Q"].shape == (B, S, R, H, N) and rep["Q_bias"] is bias  # biases are per head: left alone
    qr, br = rep["Q"].clone().requires_grad_(), bias.clone().requires_grad_()
    op(qr, br).backward()
    names = p05.per_group_names(inputs, H, G)
    reduced = p05.reduce_reference({"Q": qr.grad, "K": qr.grad, "Q_bias": br.grad}, names, G)
    torch.testing.assert_close(reduced["Q"].double(), qa.grad.double(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(reduced["Q_bias"], ba.grad)
    # a wrong mapping (head h reads group h % G) is caught by the same comparison
    wrong = op(q[:, :, :, torch.arange(H) % G], bias)
    assert not torch.allclose(wrong, grouped(q, bias))


def test_per_group_biases_are_repeated_and_summed(p05):
    torch = pytest.importorskip("torch")
    H, G, R, N = 4, 2, 1, 3
    inputs = {"Q": torch.zeros(1, 1, R, G, N), "K": torch.zeros(1, 1, R, G, N),
              "Q_bias": torch.arange(G * R * N, dtype=torch.float32).reshape(G, R, N), "K_bias": torch.zeros(H, R, N)}
    names = p05.per_group_names(inputs, H, G)
    assert names == ["Q", "K", "Q_bias"]
    rep = p05.repeat_per_head(inputs, H, G)
    assert rep["Q_bias"].shape == (H, R, N) and torch.equal(rep["Q_bias"][1], inputs["Q_bias"][0])
    summed = p05.group_sum(torch.ones(H, R, N), G, dim=0)
    assert summed.shape == (G, R, N) and bool((summed == H // G).all())


# --------------------------------------------------------------------------- prewarm


STANDIN = """
import json, sys, time
sys.path[:0] = [{mamba!r}, {repros!r}]
from _mamba3 import prewarm
if "--warm-case" in sys.argv:
    case = json.loads(sys.argv[sys.argv.index("--warm-case") + 1])
    with open({out!r} + "/" + str(case["n"]), "w") as f:
        f.write(json.dumps([time.time(), sys.argv[1:sys.argv.index("--warm-case")]]))
    time.sleep(1.5)
    print("child says", case["n"])
    sys.exit(case.get("rc", 0))
prewarm([{{"n": 0}}, {{"n": 1}}, {{"n": 2, "rc": 1}}], jobs=0)
"""


def test_prewarm_runs_children_at_once_and_reports_failures(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "standin.py"
    script.write_text(textwrap.dedent(STANDIN.format(mamba=str(MAMBA), repros=str(ROOT / "repros"), out=str(out))))
    proc = subprocess.run([sys.executable, str(script), "--lane", "x"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line[len("FIGURE "):]) for line in proc.stdout.splitlines() if line.startswith("FIGURE ")]
    assert len(lines) == 1 and lines[0]["name"] == "prewarm_s" and lines[0]["jobs"] == 3
    children = {c["case"]["n"]: c for c in lines[0]["children"]}
    assert {n: c["rc"] for n, c in children.items()} == {0: 0, 1: 0, 2: 1}
    assert "child says 2" in children[2]["log_tail"] and "log_tail" not in children[0]
    # children never write to the lane's protocol stream: their output is only quoted inside the figure
    assert not any(line.startswith("child says") for line in proc.stdout.splitlines())
    starts = [json.loads((out / str(n)).read_text()) for n in range(3)]
    assert all(argv == ["--lane", "x"] for _, argv in starts)  # children get the parent's options
    assert max(t for t, _ in starts) - min(t for t, _ in starts) < 1.5  # started together, not one after another


# --------------------------------------------------------------------------- pack 05 end to end, stand-in op


def _toy_mimo(mapping="interleave", raise_gqa=False, nan=False):
    """A differentiable stand-in with mamba3_mimo's signature: head h reads Q/K group h // (H/G) (or a
    wrong group, or refuses 1 < G < H like 2.3.2.post1). Every input reaches the output."""
    import torch

    def op(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D, Z, chunk_size,
           rotary_dim_divisor, dtype, return_state=False, cu_seqlens=None):
        H, G = V.shape[2], Q.shape[3]
        if raise_gqa and 1 < G < H:
            raise ValueError(f"G value of {G} is not currently supported!")
        heads = torch.arange(H)
        idx = heads // (H // G) if mapping == "interleave" or G == H else heads % G
        q = Q.float()[:, :, :, idx] + Q_bias.permute(1, 0, 2)
        k = K.float()[:, :, :, idx] + K_bias.permute(1, 0, 2)
        score = (q * k).sum(-1).sum(2) + (ADT + DT + Trap.float()).permute(0, 2, 1) + Angles.sum(-1)
        mix = (MIMO_V * MIMO_Z * MIMO_Out).sum(1)
        y = score[..., None] * V.float() * mix + D[:, None] * V.float() + Z.float()
        if nan and 1 < G < H:
            y = y * float("nan")
        return y.to(dtype)

    return op


def _run(p05, monkeypatch, capsys, op, argv, patched=False):
    import torch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    a = p05.parse_args(["--prewarm-jobs", "1", "--heads", "8", "--seqlen", "32", "--varlen", "16", "8", *argv])
    try:
        if a.production_timing:
            p05.production(torch, op, a, patched, "cpu")
        else:
            p05.correctness(torch, op, a, patched, "cpu")
    except SystemExit as exc:
        assert exc.code == 3
    out = capsys.readouterr().out.splitlines()
    verdicts = [line for line in out if line.split(" ", 1)[0] in ("BUG_ABSENT", "BUG_REPRODUCED", "FIX_VALIDATED",
                                                                  "FIX_FAILED", "SKIPPED")]
    assert len(verdicts) == 1, out[-5:]
    tag, payload = verdicts[0].split(" ", 1)
    return tag, json.loads(payload), out


def test_end_to_end_absent_only_when_grouping_is_right(p05, monkeypatch, capsys, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setenv("HARNESS_RUN_DIR", str(tmp_path))
    tag, details, out = _run(p05, monkeypatch, capsys, _toy_mimo(), ["--groups", "2", "--also-groups", "4"])
    assert tag == "BUG_ABSENT"
    assert details["checked"] == ["dense H=8 G=2", "varlen H=8 G=2", "dense H=8 G=4", "varlen H=8 G=4"]
    assert sum(line.startswith("FIGURE") and '"grad_rel_fro"' in line for line in out) == 4 * 14
    tag, details, _ = _run(p05, monkeypatch, capsys, _toy_mimo(mapping="modulo"), ["--groups", "2"])
    assert tag == "BUG_REPRODUCED" and details["symptom"].startswith("wrong gradients")
    tag, details, _ = _run(p05, monkeypatch, capsys, _toy_mimo(nan=True), ["--groups", "2"])
    assert tag == "BUG_REPRODUCED" and any("not finite" in f for f in details["failures"])
    monkeypatch.delenv("HARNESS_RUN_DIR")  # a manual run still gets its verdict; the fix lane's inputs are not saved
    tag, _, out = _run(p05, monkeypatch, capsys, _toy_mimo(mapping="modulo"), ["--groups", "2", "--also-groups"])
    assert tag == "BUG_REPRODUCED" and any('"supported_cases_saved"' in line for line in out)


def test_end_to_end_bug_then_fix(p05, monkeypatch, capsys, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setenv("HARNESS_RUN_DIR", str(tmp_path))
    tag, details, _ = _run(p05, monkeypatch, capsys, _toy_mimo(raise_gqa=True), ["--groups", "2"])
    assert tag == "BUG_REPRODUCED" and details["symptom"] == "raises" and details["case"] == "dense H=8 G=2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack05-g1.pt", "pack05-g8.pt"]
    tag, details, _ = _run(p05, monkeypatch, capsys, _toy_mimo(), ["--groups", "2", "--no-perf"], patched=True)
    assert tag == "FIX_VALIDATED" and "G=1 unchanged" in details["cases"]
    tag, details, _ = _run(p05, monkeypatch, capsys, _toy_mimo(raise_gqa=True), ["--groups", "2", "--no-perf"],
                           patched=True)
    assert tag == "FIX_FAILED"


def test_end_to_end_production_without_cuda_is_skipped(p05, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test is about a host without CUDA")
    tag, details, out = _run(p05, monkeypatch, capsys, _toy_mimo(),
                             ["--production-timing", "--groups", "2", "--batch", "1", "--repeat", "2",
                              "--profile-repeat", "1", "--warmup", "0"])
    assert tag == "SKIPPED" and "kernel time not measured" in details["reason"]
    timings = [json.loads(line[7:]) for line in out if '"fwd_bwd_timing"' in line]
    assert [t["case"] for t in timings] == ["gqa", "g_eq_h"]
    assert all(t["kernel_ms"] is None and t["value_is"] == "wall_ms" for t in timings)
    tag, details, _ = _run(p05, monkeypatch, capsys, _toy_mimo(raise_gqa=True),
                           ["--production-timing", "--groups", "2", "--batch", "1", "--repeat", "1",
                            "--profile-repeat", "1", "--warmup", "0"])
    assert tag == "BUG_REPRODUCED" and details["symptom"] == "raises"


# --------------------------------------------------------------------------- pack 07 upstream grid


@pytest.fixture(scope="module")
def p07(load_reproducer):
    sys.path.insert(0, str(MAMBA))
    try:
        return load_reproducer(MAMBA / "pack07_mimo_bwd_flat_smem.py", "pack07_mimo_bwd_flat_smem")
    finally:
        sys.path.remove(str(MAMBA))


def test_grid_names_every_backward_test_id_once(p07):
    variants = p07.grid_variants()
    ids = [t for v in variants for t in v["tests"]]
    assert len(ids) == len(set(ids)) == 40  # 11 x 2 dense + 2 fused norm + 2 grouped + 6 x 2 varlen + 2 fused norm
    assert len(variants) == 40  # no two tests drive one build: the flags differ
    prefix = p07.UPSTREAM_TEST_FILE + "::"
    r1 = sorted(t[len(prefix):] for t in ids if "_R1_" in t)
    assert r1 == [f"{name}[N128_P64_R1_C64_BB256]" for name in (
        "test_bwd_varlen_prereduce_relative_errors_lt_10pct", "test_bwd_varlen_relative_errors_lt_10pct",
        "test_mamba_mimo_bwd_combined_prereduce_relative_errors_lt_10pct",
        "test_mamba_mimo_bwd_combined_relative_errors_lt_10pct")]
    grouped = [v for v in variants if any("grouped_heads" in t for t in v["tests"])]
    assert sorted((v["R"], v["G"]) for v in grouped) == [(2, 4), (4, 2)]
    fused = [v for v in variants if v["packed_dout"]]
    assert len(fused) == 4 and not any(v["hasZ"] or v["reduceO"] for v in fused)


def _stub_kernels(monkeypatch, fail_at_rank):
    """Stand-in tilelang and bwd_bwd factories (dense and varlen) whose TIR build raises at one rank."""
    import types

    calls = []

    class Factory:
        pass_configs: dict = {}

        def __init__(self, kernel):
            self.kernel = kernel

        def get_tir(self, *args, **kwargs):
            rank = args[6] if self.kernel == "dense" else args[5]  # dense: B, S, H, G, N, P, R; varlen: no S
            calls.append((self.kernel, rank, kwargs.get("isVarlen")))
            if rank == fail_at_rank:
                raise RuntimeError("Immutable variable `r_in` is used outside its defining region!")
            return object()

    tilelang = types.ModuleType("tilelang")
    tilelang.tvm = types.SimpleNamespace()
    monkeypatch.setitem(sys.modules, "tilelang", tilelang)
    dense = "mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd"
    for name, kernel in ((dense, "dense"), (dense + "_varlen", "varlen")):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(mamba_mimo_bwd_bwd=Factory(kernel)))
    return calls


def _grid_verdict(p07, capsys):
    import types

    p07.upstream_grid(types.SimpleNamespace(grid_stage="tir", jobs=1))
    out = capsys.readouterr().out.splitlines()
    verdicts = [line for line in out if line.split(" ", 1)[0] in ("CONTRACT_HELD", "CONTRACT_BROKEN")]
    assert len(verdicts) == 1, out[-3:]
    tag, payload = verdicts[0].split(" ", 1)
    return tag, json.loads(payload), out


def test_grid_holds_when_every_variant_builds(p07, monkeypatch, capsys):
    calls = _stub_kernels(monkeypatch, fail_at_rank=None)
    tag, details, out = _grid_verdict(p07, capsys)
    assert tag == "CONTRACT_HELD" and details["variants"] == 40 and details["test_ids"] == 40
    assert len(calls) == 40 and all(varlen is True for kernel, _, varlen in calls if kernel == "varlen")
    assert sum('"bwd_bwd_variant_builds"' in line for line in out) == 40


def test_grid_breaks_naming_the_failing_ids(p07, monkeypatch, capsys):
    _stub_kernels(monkeypatch, fail_at_rank=1)  # the fault the first flattening had: only R = 1 fails to build
    tag, details, _ = _grid_verdict(p07, capsys)
    assert tag == "CONTRACT_BROKEN" and details["n_failed"] == 4 and details["of"] == 40
    assert all(f["variant"]["R"] == 1 and "Immutable variable" in f["error"] for f in details["failed"])
    assert sorted(f["variant"]["kernel"] for f in details["failed"]) == ["dense", "dense", "varlen", "varlen"]
