"""repros/_timing.py: the arithmetic of its timing dict, and what it says without CUDA.

Kernel-time extraction from a real profiler needs a GPU; here it is fed (name, duration) records
as the profiler would give them, and the CUDA-absent path runs for real where torch is installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def timing(load_reproducer):
    return load_reproducer(ROOT / "repros" / "_timing.py", "_timing")


def test_device_totals_exclude_copies(timing):
    recs = [("gemm_kernel", 1500.0), ("Memcpy HtoD (Pageable -> Device)", 300.0), ("Memset (Device)", 20.0),
            ("reduce_kernel", 500.0)]
    assert timing.device_totals(recs) == {"kernel_ms": 2.0, "memcpy_ms": 0.32, "kernels": 2}


def test_host_bound_threshold(timing):
    assert timing.host_bound(1105.0, 27.9) is True
    assert timing.host_bound(17.9, 17.4) is False
    assert timing.host_bound(15.0, 10.0, ratio=1.5) is False  # at the threshold: not above it
    assert timing.host_bound(15.1, 10.0, ratio=1.5) is True
    assert timing.host_bound(10.0, None) is None and timing.host_bound(10.0, 0.0) is None


def test_assemble_with_and_without_kernels(timing):
    calls = [{"kernel_ms": k, "memcpy_ms": 0.0, "kernels": 12} for k in (10.0, 11.0, 12.0)]
    t = timing.assemble([30.0, 32.0, 31.0], calls, warmup=2)
    assert t["wall_ms"] == 31.0 and t["wall_spread_ms"] == [30.0, 32.0]
    assert t["kernel_ms"] == 11.0 and t["kernel_spread_ms"] == [10.0, 12.0] and t["kernels_per_call"] == 12
    assert t["wall_over_kernel"] == pytest.approx(31 / 11) and t["host_bound"] is True
    assert timing.headline(t) == (11.0, "kernel_ms")
    empty = timing.assemble([5.0], [{"kernel_ms": 0.0, "memcpy_ms": 0.0, "kernels": 0}], warmup=0)
    assert empty["kernel_ms"] is None and empty["host_bound"] is None and "no CUDA kernel" in empty["note"]
    assert timing.headline(empty) == (5.0, "wall_ms")
    with pytest.raises(ValueError):
        timing.summarize([])


def test_measure_without_cuda_says_so(timing):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test is about a host without CUDA")
    calls = []
    t = timing.measure(lambda: calls.append(1), warmup=2, repeat=5, profile_repeat=3)
    assert len(calls) == 7
    assert t["kernel_ms"] is None and t["host_bound"] is None and t["note"].startswith("CUDA absent")
    assert t["repeat"] == 5 and t["wall_ms"] >= 0


