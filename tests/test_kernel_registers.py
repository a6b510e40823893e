"""tools/kernel_registers.py: the parts that need no Triton (the ptxas log, the summary of a result file)."""

from __future__ import annotations

import importlib.util
import json

from conftest import REPO

_spec = importlib.util.spec_from_file_location("kernel_registers", REPO / "tools" / "kernel_registers.py")
assert _spec is not None and _spec.loader is not None
kr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kr)


def _row(build: str, arch: str, warps: int, reg: int, spill: int, trap: bool = False) -> dict:
    return {"kernel": "k", "shape": "dense", "build": build, "arch": arch,
            "config": {"num_warps": warps, "num_stages": 1, "maxnreg": None, "kwargs": {}},
            "reg": reg, "stack": spill, "shared": 0, "local": 0, "spill_stores": spill, "spill_loads": spill,
            "trap_only": trap}


def test_ptxas_spills_read_from_the_log_and_none_without_it():
    log = ("ptxas info    : Function properties for k\n"
           "    21480 bytes stack frame, 44316 bytes spill stores, 50336 bytes spill loads\n")
    assert kr.ptxas_spills(log) == {"spill_stores": 44316, "spill_loads": 50336}
    assert kr.ptxas_spills("") == {"spill_stores": None, "spill_loads": None}


def test_res_usage_line_is_parsed():
    out = " Function k:\n  REG:255 STACK:560 SHARED:1024 LOCAL:0 CONSTANT[0]:856 TEXTURE:0\n"
    m = kr._RES.search(out)
    assert m is not None and (m[1], m[2], m[3], m[4]) == ("255", "560", "1024", "0")


def test_summary_counts_differences_and_trap_only_configs_and_skips_traps_for_the_least_spill():
    rows = [_row("base", "sm_90", 4, 255, 900), _row("patched", "sm_90", 4, 255, 800),
            _row("base", "sm_90", 8, 255, 500), _row("patched", "sm_90", 8, 255, 500),
            _row("base", "sm_100", 4, 4, 0, trap=True), _row("patched", "sm_100", 4, 4, 0, trap=True),
            _row("base", "sm_100", 8, 128, 700), _row("patched", "sm_100", 8, 128, 700)]
    result = {"upstream": "o/r", "base_commit": "a" * 40, "series_patches": ["0001.patch"], "triton": "3.6.0",
              "made": "2026-11-26T00:00:00+00:00", "host": "h (no GPU)", "rows": rows}
    lines = kr.summarize(json.loads(json.dumps(result)))
    assert "k dense sm_90 warps 8 stages 1 maxnreg None: base reg 255 stack 500 spill st/ld 500/500 | patched same" \
        in lines
    totals = {ln.split(":")[0]: ln for ln in lines if " configs, " in ln}
    assert "2 configs, 1 differ between base and patched, 0 trap only" in totals["k dense sm_90"]
    assert "least spill (patched): warps 8" in totals["k dense sm_90"]
    assert "1 trap only" in totals["k dense sm_100"] and "least spill (base): warps 8" in totals["k dense sm_100"]
