"""Stand-in modules for overlay builds: modules the build cannot provide.

An overlay build lays out a package's Python tree without running its native
build, so a compiled extension the package imports unconditionally (mamba's
``selective_scan_cuda``) is missing, and so may be heavy runtime dependencies
that only unrelated parts of the package import at package-import time.
A manifest lists such modules with the reason in ``[stubs]``::

    [stubs]
    selective_scan_cuda = "compiled extension (csrc/): not built by the overlay"

The overlay then writes, for each listed module, a stub package into the
build's ``site/``. The stub is only a fallback:

* when the module is importable from anywhere else on ``sys.path`` (the host
  really has it), the stub loads that module in its own place, so a real
  installation always wins;
* otherwise the import succeeds, and every public attribute is a placeholder
  class whose use (call, instantiation) raises ``StubbedModuleError``, an
  ``ImportError`` naming the module and the manifest's reason. Subclassing a
  placeholder (``class M(nn.Module, PyTorchModelHubMixin)``) works, so the
  package imports; using what the stub stands for never passes silently.

Which stubs a build carries is in its ``build.json`` and in
``Build.describe()`` (hence in every receipt); the import check reports, per
stub, whether the stub or a real module was imported on that host.
"""

from __future__ import annotations

import json
from pathlib import Path

STUB_VERSION = "1"  # part of the build key: bump when the generated source changes
MARKER = "__patchlane_stub__"

_TEMPLATE = '''"""Stub written by patch-lane's overlay build (harness/lane/stubs.py); not upstream code.

{name}: {reason}
"""

import importlib.util as _ilu
import os as _os
import sys as _sys

{marker} = {info}


class StubbedModuleError(ImportError):
    """Raised when code uses a module that this overlay build only stubs."""


def _real_module():
    """Load the real module from elsewhere on sys.path in this stub's place, if there is one."""
    if "." in __name__:
        return None  # submodules follow their (stub or real) parent package
    site = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    path = [p for p in _sys.path if _os.path.abspath(p or ".") != site]
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(__name__, path)
    if spec is None or spec.loader is None:
        return None
    module = _ilu.module_from_spec(spec)
    _sys.modules[__name__] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _sys.modules.pop(__name__, None)
        raise
    return module


def _message(attr):
    return (f"{{__name__}}.{{attr}} is unavailable: {{__name__}} is a stub in this overlay build "
            f"({{{marker}['reason']}}); the code path that needs it cannot run here")


class _Placeholder:
    _stub_attr = "?"

    def __new__(cls, *args, **kwargs):
        raise StubbedModuleError(_message(cls._stub_attr))

    def __init_subclass__(cls, **kwargs):
        pass


_placeholders = {{}}


def __getattr__(attr):
    if attr.startswith("__") and attr.endswith("__"):
        raise AttributeError(attr)
    if attr not in _placeholders:
        _placeholders[attr] = type(attr, (_Placeholder,), {{"_stub_attr": attr, "__module__": __name__}})
    return _placeholders[attr]


_real_module()
'''


def write(site: Path, stubs: dict[str, str], target: str) -> list[str]:
    """Write a stub package under ``site`` for each module of ``stubs``; return their names, sorted."""
    names = sorted(stubs)
    for name in names:
        pkg = site.joinpath(*name.split("."))
        pkg.mkdir(parents=True, exist_ok=True)
        info = {"module": name, "target": target, "reason": stubs[name]}
        (pkg / "__init__.py").write_text(_TEMPLATE.format(
            name=name, reason=stubs[name], marker=MARKER, info=json.dumps(info, sort_keys=True)))
    return names


# Run by the import check (in the lane's Python): for each stub, was the stub or a real module imported?
REPORT_CODE = (
    "def _stub_report(names):\n"
    "    import importlib, sys\n"
    "    out = {}\n"
    "    for n in names:\n"
    "        m = sys.modules.get(n)\n"
    "        if m is None:\n"
    "            out[n] = 'not imported'\n"
    f"        elif getattr(m, {MARKER!r}, None) is None:\n"
    "            out[n] = 'real module: ' + str(getattr(m, '__file__', None))\n"
    "        else:\n"
    "            out[n] = 'stub'\n"
    "    return out\n"
)
