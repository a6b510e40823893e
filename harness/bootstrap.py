"""Start the harness from an offline bundle, with nothing but the standard library and pip.

Usage, on a GPU host without network, from the repository root::

    python3 -m harness.bootstrap dist/bundle.tar.xz -- run 09

It unpacks the bundle under the harness's cache (``$PATCHLANE_HOME``, else
``$XDG_CACHE_HOME/patchlane``, else ``~/.cache/patchlane``) into a directory named
by the archive's sha256, checks every file against ``bundle.json``, installs the
harness's dependency wheels with ``pip --no-index`` into a directory of that one
per interpreter (``site-<cache tag>``, e.g. ``site-cpython-312``), and re-executes
``python -m harness <args> --bundle-dir`` so the run takes its builds from the
bundle only. A later call with the same archive reuses all of it: it hashes the
archive, finds the directory complete, and starts the harness. Exit code 4 (PIN)
when the archive is missing, holds a foreign member, or a file fails its sha256.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from harness import tarsafe
from harness.errors import Exit
from harness.hashing import sha256_file, verify_files
from harness.store import default_root

TOP = "patchlane-bundle"
VERIFIED = ".verified.json"  # in the bundle directory: which files matched, and their identity then


def _fail(message: str) -> int:
    print(f"harness.bootstrap: error: {message}", file=sys.stderr)
    return int(Exit.PIN)


def expected_files(index: dict) -> dict[str, str]:
    """Every file ``bundle.json`` lists, with its sha256."""
    return {e["file"]: e["sha256"]
            for e in index["wheels"] + list(index["builds"].values()) + list(index.get("tests_trees", {}).values())
            + list(index.get("kernel_caches", {}).values())}


def unpack(archive: Path, dest: Path) -> int:
    """Extract and verify ``archive`` into ``dest`` (marked ``.complete`` when done); 0 or an exit code."""
    print(f"> unpacking {archive} into {dest}", file=sys.stderr)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tf:
        for m in tf.getmembers():
            if not (m.name == TOP or m.name.startswith(TOP + "/")):
                return _fail(f"{archive}: unexpected member {m.name!r}")
        tarsafe.extractall(tf, dest)
    bundle_dir = dest / TOP
    index = json.loads((bundle_dir / "bundle.json").read_text())
    bad = verify_files(bundle_dir, expected_files(index), bundle_dir / VERIFIED)
    if bad:
        return _fail(f"{bad[0]} fails its sha256")
    (dest / ".complete").write_text("ok\n")
    return 0


def install_site(bundle_dir: Path, site: Path) -> None:
    """The bundle's dependency wheels, installed for this interpreter into ``site`` (once)."""
    marker = site.with_name(site.name + ".complete")
    if marker.exists():
        return
    index = json.loads((bundle_dir / "bundle.json").read_text())
    # the harness's own dependencies only: the bases' runtime wheels go into each lane's runtime site (one
    # pip run over both could meet one distribution at two versions); bundles made before the split list none
    names = index.get("harness_wheels", [w["file"] for w in index["wheels"]])
    wheels = [str(bundle_dir / name) for name in names]
    if wheels:
        print(f"> installing {len(wheels)} wheel(s) offline for {sys.implementation.cache_tag}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                        "--no-compile", "--disable-pip-version-check", "--upgrade", "--target", str(site),
                        *wheels], check=True)
    marker.write_text("ok\n")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or "--" not in argv:
        print(__doc__.strip())
        return int(Exit.USAGE) if not argv or argv[0] not in ("-h", "--help") else int(Exit.OK)
    split = argv.index("--")
    archive, harness_args = Path(argv[0]), argv[split + 1:]
    if not archive.is_file():
        return _fail(f"bundle {archive} not found")
    dest = default_root() / "bundles" / sha256_file(archive)[:16]
    bundle_dir = dest / TOP
    if not (dest / ".complete").exists():
        code = unpack(archive, dest)
        if code:
            return code
    site = dest / f"site-{sys.implementation.cache_tag}"
    install_site(bundle_dir, site)
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([here, str(site), *inherited])
    cmd = [sys.executable, "-m", "harness", *harness_args, "--bundle-dir", str(bundle_dir)]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
