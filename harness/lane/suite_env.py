"""The environment a suite lane ran in, as its receipt records it, and what follows from it.

The suite runner (``repros/upstream_suite.py``) records, in its sentinel's details, ``environment``: every
distribution importable in the run (``name==version``, sorted, as ``pip freeze`` lists them), the ranks it ran
at and the upstream CI's ranks, the backend (``nccl`` or ``gloo``) and the GPU architecture (``sm_90``). This
module

* refuses to pair a base receipt with a patched one from another environment (``check_pairing``): a case that
  passes on one and fails on the other would say nothing about the change;
* says whether an environment is the upstream CI's (``ci_gaps``): every pin its CI installs for unit tests
  (``[bases.NAME.ci]``: the test pins, and the runtime and host builds of its ``with_builds``) at that version.
  Only a case failing on both builds in such an environment may be called broken at the base.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from harness.errors import ConfigError
from harness.upstream import pins

ENV_KEY = "environment"


class EnvironmentMismatch(ConfigError):
    """A base and a patched suite receipt from different environments (packages, ranks or GPU architecture)."""


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def packages(env: Mapping) -> dict[str, str]:
    """name -> version of an environment's ``packages`` list."""
    out = {}
    for pin in env.get("packages") or ():
        name, _, version = str(pin).partition("==")
        out[_norm(name)] = version
    return out


def differences(a: Mapping | None, b: Mapping | None, ignore: Iterable[str] = ()) -> list[str]:
    """How environment ``b`` differs from ``a`` (empty: the same), ``ignore`` (distributions: the build under test,
    whose content differs by design) aside."""
    if a is None or b is None:
        return [] if a is None and b is None else ["one records no environment (a receipt from before the "
                                                   "suites ran in the upstream CI's environment)"]
    out = [f"{key} {a.get(key)} vs {b.get(key)}" for key in ("ranks", "gpu_arch", "backend")
           if a.get(key) != b.get(key)]
    skip = {_norm(n) for n in ignore}
    pa, pb = packages(a), packages(b)
    for name in sorted((set(pa) | set(pb)) - skip):
        if pa.get(name) != pb.get(name):
            out.append(f"{name} {pa.get(name, 'absent')} vs {pb.get(name, 'absent')}")
    return out


def check_pairing(receipts: Iterable[tuple[str, bool, Mapping | None]], ignore: Iterable[str] = ()) -> None:
    """``receipts``: (receipt path, patched, environment) of the suite lanes read for one verdict. Every one must
    share the first's environment; EnvironmentMismatch names both receipts and the first differences."""
    chosen = list(receipts)
    if not chosen:
        return
    first_path, first_side, first_env = chosen[0]
    for path, patched, env in chosen[1:]:
        diff = differences(first_env, env, ignore)
        if diff:
            shown = "; ".join(diff[:4]) + (f"; {len(diff) - 4} more" if len(diff) > 4 else "")
            raise EnvironmentMismatch(
                f"suite receipts from different environments: {first_path} "
                f"({'patched' if first_side else 'base'}) and {path} ({'patched' if patched else 'base'}): {shown}",
                hint="run both builds on one host in one environment (harness suite compare --ranks N picks the "
                     "receipts of one rank count)")


def ci_pins(manifest: pins.Manifest, base: str, load: Callable[[str], pins.Manifest]) -> tuple[str, ...]:
    """What the upstream's CI installs for unit tests at ``base`` that a run must show to be in its environment:
    the test pins, and for each ``with_builds`` (its manifest from ``load(target)``) its release, its runtime pins
    and its host builds."""
    ci = manifest.base(base).ci
    if ci is None:
        return ()
    out = list(ci.requires)
    for spec in ci.with_builds:
        target, _, name = spec.partition("@")
        other = load(target)
        b = other.base(name)
        out += [f"{other.distribution}=={b.version}", *b.runtime_requires, *(h.provides for h in b.host_builds)]
    return tuple(dict.fromkeys(out))


def ci_gaps(env: Mapping | None, wanted: Iterable[str]) -> list[str]:
    """Pins of ``wanted`` (``ci_pins``) the environment lacks or holds at another version (empty: the upstream's)."""
    if env is None:
        return ["no environment recorded"]
    have = packages(env)
    out = []
    for pin in wanted:
        name, _, version = pin.partition("==")
        got = have.get(_norm(name))
        if got != version:
            out.append(f"{name} {got or 'absent'} (its CI: {version})")
    return out
