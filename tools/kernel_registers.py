#!/usr/bin/env python3
"""Registers and spills of the Triton kernels a pack's series changes, base against patched, without a GPU.

For mamba's SISO backward (pack 04, mamba#904): the upstream file is read from a git mirror at the base
commit, the pack's series is applied to a copy with ``git apply``, and both trees are imported as they are
(``mamba_ssm/ops/triton/mamba3/``). Every ``@triton.jit`` kernel whose source differs between the two trees
is measured. Its launch arguments come from upstream's own host function (``compute_dqkv`` for the dQKV
kernel), called with shape-only stand-in tensors: a stand-in ``torch`` module gives them shapes, contiguous
strides, a dtype and a 16-byte aligned address, and the kernel launch is intercepted so that nothing runs.
Those arguments go through Triton's own binder (the specialization a real launch makes: unit strides become
constants, multiples of 16 get the divisibility hint), then every config of the kernel's real
``@triton.autotune`` list is compiled for ``GPUTarget("cuda", ARCH, 32)`` and the bundled
``cuobjdump -res-usage`` reports REG, STACK (bytes of stack frame), LOCAL (bytes of local memory: spills)
and SHARED. ptxas also prints its spill counts with ``-v``; Triton keeps them out of the metadata, so the
cubin's own resource table is the record.

    python tools/kernel_registers.py --mirror ../shared/mirrors/state-spaces+mamba.git \\
        --base e9594ce1c732d97440f0332fdc43170a2294dbfa --series patches/mamba/04/main \\
        --arch 90 --arch 100 --out bench/results/<date>-cpu-pack04-siso-bwd-registers.json
    python tools/kernel_registers.py summarize bench/results/<date>-cpu-pack04-siso-bwd-registers.json

Needs ``triton`` (3.6: the version that compiles for sm_100 here) and ``einops``; torch is not needed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import types
from datetime import UTC, datetime
from pathlib import Path

SUBDIR = "mamba_ssm/ops/triton/mamba3"
MODULE = "mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd"


# ---------------------------------------------------------------------------------------------- trees

def export_tree(mirror: Path, commit: str, dest: Path) -> None:
    """``mamba_ssm/`` of ``commit`` from the mirror, unpacked under ``dest``."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(mirror), "archive", "--format=tar", commit, "mamba_ssm"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def apply_series(tree: Path, series: Path) -> list[str]:
    """Apply every ``*.patch`` of ``series`` that touches ``mamba_ssm/`` (tests are not exported here)."""
    applied = []
    for patch in sorted(series.glob("*.patch")):
        text = patch.read_text(encoding="utf-8")
        if "diff --git a/mamba_ssm/" not in text:
            continue
        subprocess.run(["git", "apply", "--include=mamba_ssm/*", str(patch.resolve())], cwd=tree, check=True)
        applied.append(patch.name)
    if not applied:
        raise SystemExit(f"{series}: no patch touches mamba_ssm/")
    return applied


# ---------------------------------------------------------------------------------------------- stand-ins

class FakeDtype:
    def __init__(self, name: str, itemsize: int) -> None:
        self.name, self.itemsize = name, itemsize

    def __str__(self) -> str:  # Triton reads a tensor's dtype by its torch name
        return f"torch.{self.name}"

    __repr__ = __str__


class FakeTensor:
    """Shape, dtype, contiguous strides and an aligned address: all that a Triton launch reads."""

    _next = 1 << 20

    def __init__(self, shape, dtype: FakeDtype) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.is_cuda = True
        self.device = "cuda"
        self._ptr = FakeTensor._next
        FakeTensor._next += 1 << 20  # every stand-in at a distinct, 16-byte (and larger) aligned address

    def stride(self, dim: int | None = None):
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= max(s, 1)
        strides = tuple(reversed(out))
        return strides if dim is None else strides[dim]

    def data_ptr(self) -> int:
        return self._ptr

    def is_contiguous(self) -> bool:
        return True

    def contiguous(self) -> FakeTensor:
        return self

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]


def fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.bfloat16 = FakeDtype("bfloat16", 2)
    torch.float16 = FakeDtype("float16", 2)
    torch.float32 = FakeDtype("float32", 4)
    torch.int32 = FakeDtype("int32", 4)
    torch.Tensor = FakeTensor
    torch.empty = lambda shape, dtype=None, device=None: FakeTensor(shape, dtype or torch.float32)
    torch.empty_like = lambda t, dtype=None: FakeTensor(t.shape, dtype or t.dtype)
    torch.zeros = torch.empty
    torch.zeros_like = torch.empty_like
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")
    nn.functional = functional
    torch.nn = nn
    torch.__fake__ = True
    return torch


@contextlib.contextmanager
def stand_in_torch():
    """``torch`` is imported by the upstream module for its host code only; the kernels never see it."""
    saved = {k: sys.modules.get(k) for k in ("torch", "torch.nn", "torch.nn.functional")}
    t = fake_torch()
    sys.modules.update({"torch": t, "torch.nn": t.nn, "torch.nn.functional": t.nn.functional})
    try:
        yield t
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def load_module(tree: Path, tag: str) -> types.ModuleType:
    """The upstream module from ``tree``, under its own package name, without ``mamba_ssm/__init__.py`` (that
    one imports the compiled CUDA extensions); the packages on the way are bare namespace modules."""
    for name in [k for k in sys.modules if k == "mamba_ssm" or k.startswith("mamba_ssm.")]:
        del sys.modules[name]
    parts = MODULE.split(".")[:-1]
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(tree / Path(*parts[:i]))]
        sys.modules[name] = pkg
    mod = importlib.import_module(MODULE)
    mod.__tree__ = tag
    return mod


# ---------------------------------------------------------------------------------------------- kernels

def jit_kernels(mod: types.ModuleType) -> dict[str, object]:
    """name -> the module's top-level Triton kernel object (an Autotuner or a JITFunction)."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    return {n: v for n, v in vars(mod).items() if isinstance(v, (Autotuner, JITFunction))}


def jit_fn(kernel):
    from triton.runtime.autotuner import Autotuner

    return kernel.fn if isinstance(kernel, Autotuner) else kernel


def changed_kernels(base: types.ModuleType, patched: types.ModuleType) -> list[str]:
    a, b = jit_kernels(base), jit_kernels(patched)
    return sorted(n for n in a.keys() & b.keys() if jit_fn(a[n]).src != jit_fn(b[n]).src)


class Launch(Exception):
    def __init__(self, args, kwargs) -> None:
        super().__init__("launch intercepted")
        self.args, self.kwargs = args, kwargs


class Interceptor:
    """Stands in for a kernel object in the module: ``kernel[grid](...)`` records the arguments and stops."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise Launch(args, kwargs)
        return launch


# Host functions that launch each measured kernel, and the shapes they are called with (mamba3 SISO's
# defaults: headdim_qk = d_state 128, headdim_v 64, chunk 64; 16 heads).
def dqkv_calls(torch) -> dict[str, tuple[str, dict]]:
    B, H, N, P, C = 2, 16, 128, 64, 64
    L = 4 * C
    nchunks = L // C
    bf16, f32 = torch.bfloat16, torch.float32

    def inputs(batch, seqlen, nc):
        e = torch.empty
        return {"q": e((batch, seqlen, H, N), dtype=bf16), "k": e((batch, seqlen, H, N), dtype=bf16),
                "v": e((batch, seqlen, H, P), dtype=bf16), "da_cs": e((batch, H, seqlen), dtype=f32),
                "da_cs_sum": e((batch, H, nc), dtype=f32), "qk_dot": e((batch, H, seqlen), dtype=f32),
                "SSM_States": e((batch, H, P, nc * N), dtype=bf16), "do": e((batch, seqlen, H, P), dtype=bf16),
                "D": e((H,), dtype=f32), "chunk_size": C}

    dense = inputs(B, L, nchunks)
    nseq = 2
    varlen = inputs(1, L, nseq + L // C)
    varlen |= {"Cu_Seqlens": torch.empty((nseq + 1,), dtype=torch.int32), "has_input_state": True,
               "d_ossm_state": torch.empty((nseq, H, P, N), dtype=f32)}
    return {"dense": ("compute_dqkv", dense), "varlen": ("compute_dqkv", varlen)}


HOST_CALLS = {"mamba3_siso_bwd_kernel_dqkv": dqkv_calls}


def launch_args(mod: types.ModuleType, kernel: str, host: str, call: dict) -> Launch:
    saved = getattr(mod, kernel)
    setattr(mod, kernel, Interceptor())
    try:
        getattr(mod, host)(**call)
    except Launch as launch:
        return launch
    finally:
        setattr(mod, kernel, saved)
    raise SystemExit(f"{host} returned without launching {kernel}")


def compile_one(fn, launch: Launch, arch: int, config) -> dict:
    """Compile ``fn`` as a launch with these arguments would, under ``config``, for sm_``arch``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(launch.kwargs) | dict(config.all_kwargs())
    kwargs.setdefault("debug", False)
    bound, specialization, _ = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, None)
    from triton import knobs

    started = time.monotonic()
    log = io.StringIO()
    # a fresh cache (set in main) makes every compile run ptxas, whose -v log Triton prints when asked
    with knobs.nvidia.scope(), contextlib.redirect_stdout(log):
        knobs.nvidia.dump_ptxas_log = True
        kernel = compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
    seconds = time.monotonic() - started
    usage = res_usage(kernel.asm["cubin"])
    ptx = kernel.asm["ptx"]
    # Triton lowers a config it cannot build for the target to a body that only traps (seen for sm_100 here):
    # such a kernel compiles but cannot run, so its registers are no measure of anything
    trap_only = "trap;" in ptx and "ld.global" not in ptx
    return usage | ptxas_spills(log.getvalue()) | {"trap_only": trap_only, "shared_metadata": kernel.metadata.shared,
                                                   "compile_s": round(seconds, 1)}


_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_spills(log: str) -> dict:
    """ptxas -v's spill figures for the one entry function (None when the log was not printed)."""
    m = _SPILL.search(log)
    if m is None:
        return {"spill_stores": None, "spill_loads": None}
    return {"spill_stores": int(m[2]), "spill_loads": int(m[3])}


_RES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def res_usage(cubin: bytes) -> dict:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(tool), "-res-usage", f.name], check=True, capture_output=True, text=True).stdout
    m = _RES.search(out)
    if m is None:
        raise SystemExit(f"cuobjdump -res-usage printed no resource line:\n{out}")
    return {"reg": int(m[1]), "stack": int(m[2]), "shared": int(m[3]), "local": int(m[4])}


def config_label(config) -> dict:
    return {"num_warps": config.num_warps, "num_stages": config.num_stages, "maxnreg": config.maxnreg,
            "kwargs": dict(config.kwargs)}


# ---------------------------------------------------------------------------------------------- summary

def summarize(result: dict) -> list[str]:
    """Base against patched, per kernel, shape, target and config, from a result file as it came out; then per
    target: configs whose figures differ, and the least-spilling config of each build among those that run."""
    rows = result["rows"]
    out = [f"{result['upstream']} {result['base_commit'][:9]}, series {', '.join(result['series_patches'])}, "
           f"Triton {result['triton']}, made {result['made']} on {result['host']}"]
    key = ("reg", "stack", "local", "spill_stores", "spill_loads", "trap_only")

    def cfg(r: dict) -> str:
        c = r["config"]
        return f"warps {c['num_warps']} stages {c['num_stages']} maxnreg {c['maxnreg']}"

    def fig(r: dict | None) -> str:
        if r is None:
            return "-"
        if r["trap_only"]:
            return f"trap only (reg {r['reg']})"
        return f"reg {r['reg']} stack {r['stack']} spill st/ld {r['spill_stores']}/{r['spill_loads']}"

    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault((r["kernel"], r["shape"], r["arch"], cfg(r)), {})[r["build"]] = r
    for (kernel, shape, arch, c), builds in groups.items():
        same = builds.get("base") is not None and builds.get("patched") is not None and all(
            builds["base"][k] == builds["patched"][k] for k in key)
        out.append(f"{kernel} {shape} {arch} {c}: base {fig(builds.get('base'))} | patched "
                   f"{'same' if same else fig(builds.get('patched'))}")
    for kernel, shape, arch in dict.fromkeys((k[0], k[1], k[2]) for k in groups):
        mine = {c: b for (k, s_, a, c), b in groups.items() if (k, s_, a) == (kernel, shape, arch)}
        differ = [c for c, b in mine.items() if "base" in b and "patched" in b
                  and any(b["base"][k] != b["patched"][k] for k in key)]
        traps = [c for c, b in mine.items() if any(r["trap_only"] for r in b.values())]
        line = (f"{kernel} {shape} {arch}: {len(mine)} configs, {len(differ)} differ between base and patched, "
                f"{len(traps)} trap only")
        for build in ("base", "patched"):
            runnable = [b[build] for b in mine.values() if build in b and not b[build]["trap_only"]]
            if runnable:
                best = min(runnable, key=lambda r: (r["spill_stores"] or 0) + (r["spill_loads"] or 0))
                line += f"; least spill ({build}): {cfg(best)}, {fig(best)}"
        out.append(line)
    return out


# ---------------------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["summarize"]:  # tools/kernel_registers.py summarize RESULT.json
        if len(args) != 2:
            raise SystemExit("usage: kernel_registers.py summarize RESULT.json")
        print("\n".join(summarize(json.loads(Path(args[1]).read_text(encoding="utf-8")))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", type=Path, required=True, help="bare git mirror of state-spaces/mamba")
    ap.add_argument("--base", required=True, help="the base commit (full sha)")
    ap.add_argument("--series", type=Path, required=True, help="directory of the pack's *.patch for that base")
    ap.add_argument("--arch", type=int, action="append", required=True, help="compute capability, e.g. 90, 100")
    ap.add_argument("--kernel", action="append", default=None,
                    help="measure only this kernel (default: every kernel the series changes)")
    ap.add_argument("--shape", action="append", default=None,
                    help="only these host-call shapes (e.g. dense, varlen; default: all)")
    ap.add_argument("--config-limit", type=int, default=0, help="first N autotune configs only (0: all)")
    ap.add_argument("--out", type=Path, required=True, help="the JSON result file")
    a = ap.parse_args(args)

    with tempfile.TemporaryDirectory() as tmp, stand_in_torch() as torch:
        os.environ["TRITON_CACHE_DIR"] = str(Path(tmp) / "triton-cache")  # fresh: every compile runs ptxas
        import triton

        base_tree, patched_tree = Path(tmp) / "base", Path(tmp) / "patched"
        export_tree(a.mirror, a.base, base_tree)
        export_tree(a.mirror, a.base, patched_tree)
        applied = apply_series(patched_tree, a.series)
        mods = {"base": load_module(base_tree, "base")}
        base_kernels = jit_kernels(mods["base"])
        mods["patched"] = load_module(patched_tree, "patched")
        changed = changed_kernels(mods["base"], mods["patched"])
        # load_module replaced the package: the base module's kernels are still its own objects
        kernels = a.kernel or changed
        missing = [k for k in kernels if k not in HOST_CALLS]
        if missing:
            raise SystemExit(f"no host call known for {', '.join(missing)}: add one to HOST_CALLS")
        rows = []
        for name in kernels:
            for shape, (host, call) in HOST_CALLS[name](torch).items():
                if a.shape and shape not in a.shape:
                    continue
                for build, mod in mods.items():
                    kobj = base_kernels[name] if build == "base" else jit_kernels(mod)[name]
                    launch = launch_args(mod, name, host, call)
                    configs = list(getattr(kobj, "configs", [None]))
                    if a.config_limit:
                        configs = configs[: a.config_limit]
                    for arch in a.arch:
                        for config in configs:
                            row = {"kernel": name, "shape": shape, "build": build, "arch": f"sm_{arch}",
                                   "config": config_label(config)}
                            row |= compile_one(jit_fn(kobj), launch, arch, config)
                            print(json.dumps(row), flush=True)
                            rows.append(row)
    series_sha = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(a.series.glob("*.patch")))).hexdigest()
    result = {
        "tool": "tools/kernel_registers.py",
        "made": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": f"{platform.node()} {platform.machine()} (no GPU)",
        "triton": triton.__version__,
        "upstream": "state-spaces/mamba",
        "base_commit": a.base,
        "series": str(a.series),
        "series_patches": applied,
        "series_sha256": series_sha,
        "changed_kernels": changed,
        "command": " ".join(["tools/kernel_registers.py", *args]),
        "specialization": "Triton's own binder on upstream's host call with stand-in tensors: contiguous, "
                          "16-byte aligned pointers; unit strides constant; ints divisible by 16 hinted",
        "columns": "reg: registers per thread; stack: stack frame bytes; local: local memory bytes; shared: "
                   "static shared bytes (cuobjdump -res-usage); spill_stores/spill_loads: bytes, ptxas -v; "
                   "trap_only: Triton emitted a body that only traps (the config cannot run on that target)",
        "rows": rows,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
