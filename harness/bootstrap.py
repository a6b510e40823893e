"""Start the harness from an offline bundle, with nothing but the standard library and pip.

Usage, on a GPU host without network, from the repository root::

    python3 -m harness.bootstrap dist/bundle.tar.xz -- run 09

It unpacks the bundle (once per bundle content) under ``$PATCHLANE_HOME`` or
``~/.cache/patchlane``, checks every file against ``bundle.json``, installs
the harness's dependency wheels into a private directory with
``pip --no-index``, and re-executes ``python -m harness <args> --bundle-dir``
so the run takes its builds from the bundle only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from harness.hashing import sha256_file

TOP = "patchlane-bundle"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or "--" not in argv:
        print(__doc__.strip())
        return 2 if not argv or argv[0] not in ("-h", "--help") else 0
    split = argv.index("--")
    archive, harness_args = Path(argv[0]), argv[split + 1:]
    if not archive.is_file():
        print(f"harness.bootstrap: error: bundle {archive} not found", file=sys.stderr)
        return 4
    home = Path(os.environ.get("PATCHLANE_HOME") or Path.home() / ".cache" / "patchlane")
    dest = home / "bundles" / sha256_file(archive)[:16]
    bundle_dir = dest / TOP
    if not (dest / ".complete").exists():
        print(f"> unpacking {archive} into {dest}", file=sys.stderr)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tf:
            for m in tf.getmembers():
                if not (m.name == TOP or m.name.startswith(TOP + "/")):
                    print(f"harness.bootstrap: error: {archive}: unexpected member {m.name!r}", file=sys.stderr)
                    return 4
            tf.extractall(dest, filter="data")
        index = json.loads((bundle_dir / "bundle.json").read_text())
        for entry in index["wheels"] + list(index["builds"].values()):
            if sha256_file(bundle_dir / entry["file"]) != entry["sha256"]:
                print(f"harness.bootstrap: error: {entry['file']} fails its sha256", file=sys.stderr)
                return 4
        wheels = [str(bundle_dir / w["file"]) for w in index["wheels"]]
        if wheels:
            print(f"> installing {len(wheels)} wheel(s) offline", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                            "--no-compile", "--disable-pip-version-check", "--target", str(dest / "site"),
                            *wheels], check=True)
        (dest / ".complete").write_text("ok\n")
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([here, str(dest / "site"), *inherited])
    cmd = [sys.executable, "-m", "harness", *harness_args, "--bundle-dir", str(bundle_dir)]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
