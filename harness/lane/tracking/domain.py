"""``pack.toml's [domain]``: what a change that widens what code accepts newly admits, as data.

A pack whose change lets in shapes, dtypes, GPU architectures or config values the base declined declares that
domain here, and a *domain lane* (``domain = true`` in one of its lanes, docs/domain.md) sweeps it point by point:

    [domain]
    axes = ["heads", "v_channels", "rope"]         # the axes, in the order a point is named
    devices = ["sm_90"]                             # where the claim is shown ("cpu" for a config-level domain)
    not_shown = ["sm_80", "sm_100"]                 # where it is not (a body says so)
    point = "repros/megatron-lm/pack02_domain_point.py"   # runs one point in a process of its own
    summary = "..."                                 # what the change admits, in words (no figures)
    method = "..."                                  # how the points ran, where that is not plain (a body says so):
                                                    # e.g. on the CPU with a GPU's capability query simulated

    [[domain.admits]]                      # points the change must admit (run and match a reference)
    heads = [16, 64, 128]                           # every axis, each a list: the grid is their product
    v_channels = [32, 512]
    rope = [64]

    [[domain.declines]]                    # points that must still be declined, as the base declines them
    heads = [64]
    v_channels = [512]
    rope = [128]
    note = "needs more shared memory than a block may use on sm_90"
    bound = true                                    # declined by a guard the change adds: a probe lane
                                                    # (--probe-declines) must show the code fails beyond it

Every key is declared (a closed schema); a value that does not fit names the file, the pack and the key.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from harness.base.tomlutil import field, str_list
from harness.errors import ConfigError

DOMAIN_KEYS = frozenset({"axes", "devices", "not_shown", "point", "summary", "method", "admits", "declines", "note"})
GRID_KEYS_EXTRA = frozenset({"note", "bound"})  # besides the axes
EXPECTATIONS = ("admit", "decline")
# a device: a CUDA architecture (sm_90, sm_90a, sm_100) or "cpu" (a config-level domain needs no GPU)
DEVICE = re.compile(r"^(sm_[0-9]{2,3}a?|cpu)$")
_AXIS = re.compile(r"^[a-z][a-z0-9_]*$")
Scalar = int | float | str | bool


@dataclass(frozen=True)
class Grid:
    """One ``pack.toml's [[domain.admits]]`` / ``declines`` table: the product of its axes' values."""

    values: tuple[tuple[str, tuple[Scalar, ...]], ...]  # (axis, values), in the domain's axis order
    note: str = ""
    bound: bool = False  # a decline grid refused by a guard the change adds (a probe lane must back it)

    def points(self) -> list[dict[str, Scalar]]:
        names = [a for a, _ in self.values]
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in self.values))]


@dataclass(frozen=True)
class Point:
    """One point of the sweep and what the change must do there."""

    values: tuple[tuple[str, Scalar], ...]
    expect: str  # "admit" or "decline"
    note: str = ""
    bound: bool = False

    @property
    def name(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.values)

    def as_dict(self) -> dict[str, Scalar]:
        return dict(self.values)


@dataclass(frozen=True)
class Domain:
    axes: tuple[str, ...]
    admits: tuple[Grid, ...]
    declines: tuple[Grid, ...]
    devices: tuple[str, ...]
    not_shown: tuple[str, ...]
    point: str  # repository-relative path of the script that runs one point
    summary: str = ""
    method: str = ""  # how the points ran, where it is not plain; the body's table says it

    def points(self) -> list[Point]:
        """Every point, admitted ones first, in declaration order; each once."""
        out: dict[tuple, Point] = {}
        for expect, grids in (("admit", self.admits), ("decline", self.declines)):
            for grid in grids:
                for p in grid.points():
                    key = tuple(p[a] for a in self.axes)
                    out.setdefault(key, Point(tuple((a, p[a]) for a in self.axes), expect, grid.note, grid.bound))
        return list(out.values())

    @property
    def bound_declines(self) -> list[Point]:
        """The declines a guard of the change decides: what a probe lane must back."""
        return [p for p in self.points() if p.bound]

    def declaration(self) -> str:
        """The declaration as one JSON line (what a domain lane is given, and what its receipt records)."""
        return json.dumps({"axes": list(self.axes), "devices": list(self.devices),
                           "points": [{"values": p.as_dict(), "expect": p.expect, "note": p.note,
                                       **({"bound": True} if p.bound else {})}
                                      for p in self.points()]}, sort_keys=True, separators=(",", ":"))


def _scalar_list(t, key: str, where: str) -> tuple[Scalar, ...]:
    value = field(t, key, list, where)
    if not value:
        raise ConfigError(f"{where}: key '{key}' must list at least one value")
    for item in value:
        if not isinstance(item, (int, float, str, bool)):
            raise ConfigError(f"{where}: key '{key}': every value must be a number, string or boolean, "
                              f"found {item!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: key '{key}' lists a value twice")
    return tuple(value)


def _grid(t, axes: tuple[str, ...], where: str) -> Grid:
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: must be a table naming every axis ({', '.join(axes)})")
    extra = sorted(set(t) - set(axes) - GRID_KEYS_EXTRA)
    if extra:
        raise ConfigError(f"{where}: unknown key '{extra[0]}' (the axes are {', '.join(axes)})")
    missing = [a for a in axes if a not in t]
    if missing:
        raise ConfigError(f"{where}: missing key '{missing[0]}' (every axis needs its values)")
    return Grid(tuple((a, _scalar_list(t, a, where)) for a in axes), field(t, "note", str, where, default=""),
                field(t, "bound", bool, where, default=False))


def load_domain(root: Path, t, where: str) -> Domain:
    """``pack.toml's [domain]`` read with its closed schema; ``where`` names the file and pack."""
    where = f"{where} .domain"
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: must be a table (pack.toml's [domain])")
    extra = sorted(set(t) - DOMAIN_KEYS)
    if extra:
        raise ConfigError(f"{where}: unknown key '{extra[0]}' (known: {', '.join(sorted(DOMAIN_KEYS))})")
    axes = tuple(str_list(t, "axes", where))
    if not axes:
        raise ConfigError(f"{where}: key 'axes' must name at least one axis")
    bad = [a for a in axes if not _AXIS.match(a) or a in GRID_KEYS_EXTRA]
    if bad:
        raise ConfigError(f"{where}: key 'axes': {bad[0]!r} is not an axis name (lower case, digits, '_')")
    if len(set(axes)) != len(axes):
        raise ConfigError(f"{where}: key 'axes' names an axis twice")
    devices = tuple(str_list(t, "devices", where))
    not_shown = tuple(str_list(t, "not_shown", where))
    if not devices:
        raise ConfigError(f"{where}: key 'devices' must name the devices the claim is made for (sm_90, cpu)")
    for key, items in (("devices", devices), ("not_shown", not_shown)):
        wrong = [d for d in items if not DEVICE.match(d)]
        if wrong:
            raise ConfigError(f"{where}: key '{key}': {wrong[0]!r} is not a device (sm_NN, sm_NNa or cpu)")
    both = sorted(set(devices) & set(not_shown))
    if both:
        raise ConfigError(f"{where}: keys 'devices' and 'not_shown' both name {both[0]}")
    point = field(t, "point", str, where)
    if not (root / point).is_file():
        raise ConfigError(f"{where}: key 'point': {point} does not exist")
    grids = {}
    for key in ("admits", "declines"):
        items = t.get(key, [])
        if not isinstance(items, list):
            raise ConfigError(f"{where}: key '{key}' must be an array of tables ([[domain.{key}]])")
        grids[key] = tuple(_grid(g, axes, f"{where} {key}[{i}]") for i, g in enumerate(items))
    bound_admit = next((i for i, g in enumerate(grids["admits"]) if g.bound), None)
    if bound_admit is not None:
        raise ConfigError(f"{where} admits[{bound_admit}]: key 'bound' belongs to a decline grid (a point the "
                          "change's own guard refuses)")
    if not grids["admits"]:
        raise ConfigError(f"{where}: key 'admits' must hold at least one grid: what the change newly admits")
    domain = Domain(axes, grids["admits"], grids["declines"], devices, not_shown, point,
                    field(t, "summary", str, where, default=""), field(t, "method", str, where, default=""))
    admitted = {tuple(p.values) for g in domain.admits for p in _as_points(g, axes)}
    clash = [p for g in domain.declines for p in _as_points(g, axes) if tuple(p.values) in admitted]
    if clash:
        raise ConfigError(f"{where}: point {clash[0].name} is both in 'admits' and in 'declines'")
    return domain


def _as_points(grid: Grid, axes: tuple[str, ...]) -> list[Point]:
    return [Point(tuple((a, p[a]) for a in axes), "admit") for p in grid.points()]


PROBE_FLAG = "--probe-declines"  # a domain lane's argument: run the bound declines with the change's guards lifted


def is_probe(args: tuple[str, ...] | list[str]) -> bool:
    """Whether a domain lane (its declared ``args``) probes the bound declines instead of sweeping the domain."""
    return PROBE_FLAG in args


def declared(args: tuple[str, ...] | list[str]) -> str | None:
    """The declaration a domain lane's receipt recorded (the value after ``--domain`` in its arguments)."""
    args = list(args)
    if "--domain" in args:
        i = args.index("--domain")
        return args[i + 1] if i + 1 < len(args) else None
    return None
