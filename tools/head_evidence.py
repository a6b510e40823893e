"""Print the "Evidence at upstream HEAD" table from the committed receipts (never typed by hand).

    python tools/head_evidence.py      # tools/pack_pages.py puts its output in docs/packs/README.md

Each row names the receipt it reads; a missing receipt or figure stops the script.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: the harness beside it reads the receipts

from harness.lane.receipts import Receipt, latest  # noqa: E402


def receipt(target: str, pack: str, lane: str) -> tuple[Receipt, str]:
    """The lane's latest receipt (its name exactly: a glob on the directory would also take '*-fix-main' for
    'stage-fix-main') and its directory name."""
    rec = latest(ROOT, target, pack, lane)
    if rec is None:
        raise SystemExit(f"no receipt for {target}/{pack} lane {lane}")
    return rec, rec.dir.name


def figures(rec: Receipt, name: str) -> list[dict]:
    return [f.data for f in rec.figures if f.name == name]


def host(rec: Receipt) -> str:
    return (rec.host.gpu if rec.host is not None else None) or "CPU"


def row(pack: str, base: str, lane_dir: str, rec: Receipt, shows: str) -> str:
    sentinel = rec.sentinels[-1] if rec.sentinels else "-"
    return f"| {pack} | {base} | `{lane_dir}` ({host(rec)}) | {sentinel} | {shows} |"


def main() -> None:
    rows = []
    d, n = receipt("mamba", "05", "regression-main")
    det = d.sentinel_details.get("BUG_ABSENT", {})
    rows.append(row("05", "mamba main", n, d, f"GQA backward runs at {', '.join(det.get('checked', []))}; every "
                    f"gradient within the control-derived tolerance of the G=H reference"))
    d, n = receipt("mamba", "05", "production-timing-main")
    t = {f["case"]: f for f in figures(d, "fwd_bwd_timing")}
    tf = {f["case"]: f for f in figures(d, "fwd_bwd_tflops") if f["basis"] == "kernel_ms"}
    ratio = figures(d, "kernel_time_ratio_gqa_over_g_eq_h")[0]
    rows.append(row("05", "mamba main", n, d,
                    f"H=128, G=8, B=2, S=4096: fwd+bwd kernel {t['gqa']['kernel_ms']:.1f} ms (wall "
                    f"{t['gqa']['wall_ms']:.1f} ms) vs G=H {t['g_eq_h']['kernel_ms']:.1f} ms (wall "
                    f"{t['g_eq_h']['wall_ms']:.1f} ms); ratio {ratio['value']:.3f}; "
                    f"{tf['gqa']['value']:.0f} TFLOP/s by the reproducer's FLOP count"))
    d, n = receipt("mamba", "04", "equivalence-main")
    be = figures(d, "bitwise_equal")
    rows.append(row("04", "mamba main", n, d, f"{sum(1 for f in be if f['value'])} of {len(be)} SISO backward "
                    "outputs bitwise equal to main's (dense and varlen)"))
    d, n = receipt("mamba", "07", "equivalence-main")
    g = figures(d, "grad_rel_fro_vs_baseline")
    worst = max(g, key=lambda f: f["value"])
    rows.append(row("07", "mamba main (+04, ported series)", n, d,
                    f"{sum(1 for f in g if f['value'] == 0)} of {len(g)} gradients bitwise equal to main's, worst "
                    f"{worst['value']:.1e} (tolerance {worst.get('tolerance', float('nan')):.1e})"))
    d, n = receipt("mamba", "07", "timing-main")
    t = {f["build"]: f for f in figures(d, "fwd_bwd_timing")}
    ratio = figures(d, "fwd_bwd_time_ratio_patched_over_baseline")[0]
    rows.append(row("07", "mamba main (+04, ported series)", n, d,
                    f"H=128, G=8, B=2, S=4096, one process: fwd+bwd kernel {t['patched']['kernel_ms']:.2f} ms "
                    f"vs main's backward {t['baseline']['kernel_ms']:.2f} ms; ratio {ratio['value']:.3f} "
                    f"(limit {ratio['max_allowed']})"))
    for lane in ("tma-probe-baseline-main", "tma-probe-patched-main"):
        d, n = receipt("mamba", "07", lane)
        f = figures(d, "lower_tma_on")[0]
        shows = (f"lowers with TMA on: {f.get('tma_load')} tma_load" if f.get("value")
                 else f"TMA-on lowering fails: {str(f.get('error', ''))[:70]}")
        rows.append(row("07", "mamba main", n, d, shows))
    for lane in ("bug-dev", "fix-dev", "memory-dev"):
        d, n = receipt("megatron-lm", "10", lane)
        det = next(iter(d.sentinel_details.values()), {})
        shows = {"bug-dev": f"raises `{det.get('error')}` on cc {det.get('compute_capability')}",
                 "fix-dev": f"fallback warns and matches F.cross_entropy in {det.get('cases')} cases (loss, both "
                            "gradients, bf16/fp32, ignore_index)",
                 "memory-dev": f"working set {det.get('ratio')}x the logits: the fallback materializes them"}[lane]
        rows.append(row("10", "megatron-lm dev", n, d, shows))
    for lane in ("bug-dev", "fix-dev"):
        d, n = receipt("megatron-lm", "11", lane)
        det = next(iter(d.sentinel_details.values()), {})
        shows = (f"output layer `{det.get('output_layer', '').rsplit('.', 1)[-1]}`; forward with labels raises"
                 if lane == "bug-dev" else "LinearCrossEntropyModule; loss and grads equal the plain path (fp32, bf16)")
        rows.append(row("11", "megatron-lm dev (+10)", n, d, shows))
    for lane in ("mamba3-stage-bug-main", "mamba3-stage-fix-main"):
        d, n = receipt("megatron-lm", "16", lane)
        det = next(iter(d.sentinel_details.values()), {})
        shows = (f"Float16Module casts {', '.join(det.get('cast_declared', []))} to bf16; Mamba3 MIMO raises "
                 f"`{det.get('error')}`" if lane.endswith("bug-main") else
                 f"the {len(det.get('declared', []))} declared fp32 parameters stay fp32; "
                 f"{det.get('n_failures')} failures against the unwrapped block")
        rows.append(row("16", "megatron-lm main + mamba main", n, d, shows))
    for lane in ("sweep-bug-0.19.2", "sweep-fix-0.19.2"):
        d, n = receipt("megatron-lm", "14", lane)
        det = next(iter(d.sentinel_details.values()), {})
        if lane.startswith("sweep-bug"):
            x = det["views"]["dkv_all"]["x"]
            shows = f"dKV error / bf16 floor {x['1024']:.2f} at KV 1k, {x['131072']:.2f} at 128k: no growth"
        else:
            shows = (f"hi/lo split: dKV {det['dkv_x_patched']:.3f}x floor at 128k (baseline "
                     f"{det['dkv_x_baseline']:.3f}x), kernel time ratio {det['time_ratio_median']:.2f}")
        rows.append(row("14", "megatron-core 0.19.2", n, d, shows))
    print("| pack | base | receipt | sentinel | what it shows |\n| --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
