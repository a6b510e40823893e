"""What TileLang allocates for Megatron's SparseMLA kernels, against pack 02's estimate (no GPU needed).

Lowers the forward and backward kernel builders of a Megatron build for sm_90 at each (heads, value width, rope
tail) given, reads the dynamic shared memory the lowered host module passes at launch, and prints one JSON line
per shape beside ``_sparse_mla_shared_memory_bytes`` of the same build (the patched one: pack 02's estimate); a
builder that refuses a shape (its warp tiling, a power-of-two assert) gives the error instead.
Run it with the lane's interpreter and the build and tilelang runtime on PYTHONPATH:

    PYTHONPATH=<tilelang runtime site>:<patched megatron build site> python bench/sparse_mla_smem.py 32,512,128 ...
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor

OPS = "megatron.core.transformer.experimental_attention_variant.ops"
LAUNCH = re.compile(r'T\.call_packed\("(\w+)",.*?(\d+)\)\s*$')


def allocated(kind: str, heads: int, dim: int, tail: int) -> int:
    """The dynamic shared memory, in bytes, of the one kernel launch of the lowered ``kind`` builder."""
    import tilelang
    from tilelang import tvm

    if kind == "fwd":
        impl, args, kwargs = importlib.import_module(OPS + ".tilelang_sparse_mla_fwd").sparse_mla_fwd, \
            (heads, dim, tail, 64), {}
    else:
        impl, args, kwargs = importlib.import_module(OPS + ".tilelang_sparse_mla_bwd").bwd, \
            (heads, dim, tail, 64, 1, (dim + tail) ** -0.5), {"max_block_h": 32}
    func = impl.get_tir(*args, **kwargs)
    with tvm.target.Target("cuda -arch=sm_90"), tvm.transform.PassContext(opt_level=3,
                                                                          config=impl.pass_configs or {}):
        art = tilelang.lower(func, target=tvm.target.Target("cuda -arch=sm_90"))
    launches = [int(m.group(2)) for line in str(art.host_mod).splitlines()
                if (m := LAUNCH.search(line.strip())) and not m.group(1).startswith("__tvm")]
    if len(launches) != 1:
        raise SystemExit(f"{kind} {heads},{dim},{tail}: expected one kernel launch, found {launches}")
    return launches[0]


def shape(point: str) -> dict:
    """One shape's row; a builder that does not lower there gives its error instead of a byte count."""
    heads, dim, tail = (int(x) for x in point.split(","))
    dsa = importlib.import_module(OPS + ".tilelang_dsa")
    kernel_heads = max(16, 1 << (heads - 1).bit_length())
    row: dict = {"heads": heads, "v_channels": dim, "rope": tail}
    for kind in ("fwd", "bwd"):
        try:
            row[f"{kind}_bytes"] = allocated(kind, heads, dim, tail)
        except Exception as exc:  # noqa: BLE001 - a builder's refusal is the row's finding
            row[f"{kind}_error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}"
    if "fwd_bytes" in row and "bwd_bytes" in row:
        row["allocated"] = max(row["fwd_bytes"], row["bwd_bytes"])
        row["estimate"] = dsa._sparse_mla_shared_memory_bytes(kernel_heads, dim, tail)
        row["over_by"] = row["estimate"] - row["allocated"]
    return row


def main() -> int:
    points = sys.argv[1:]
    if not points:
        raise SystemExit(__doc__)
    with ProcessPoolExecutor(2) as pool:
        for row in pool.map(shape, points):
            print(json.dumps(row, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
