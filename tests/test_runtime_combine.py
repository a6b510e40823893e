"""runtime.combine: a lane's own base's runtime_requires merged with those of its with_builds bases."""

from __future__ import annotations

import pytest

from harness import runtime
from harness.errors import ConfigError


def test_combine_keeps_order_and_drops_duplicates():
    merged = runtime.combine([("megatron-lm 0.19.2", ()),
                              ("tilelang 0.1.8", ("apache-tvm-ffi==0.1.9", "z3-solver==4.15.4.0")),
                              ("other", ("apache-tvm-ffi==0.1.9", "tqdm==4.70.1"))])
    assert merged == ("apache-tvm-ffi==0.1.9", "z3-solver==4.15.4.0", "tqdm==4.70.1")


def test_combine_refuses_two_pins_of_one_distribution():
    with pytest.raises(ConfigError, match="apache-tvm-ffi==0.1.12"):
        runtime.combine([("tilelang 0.1.8", ("apache-tvm-ffi==0.1.9",)),
                         ("tilelang 0.1.15", ("apache-tvm-ffi==0.1.12",))])
