"""Downloads: a pinned artefact found in a search directory or fetched, its size and sha256 checked before it
is used; JSON from the registry."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from harness.base import ui
from harness.base.hashing import sha256_file
from harness.base.store import Store
from harness.errors import PinError, WriteError, cannot_write
from harness.upstream.pins.model import Artifact

PYPI_URL = "https://pypi.org/pypi"


def fetch(artifact: Artifact, store: Store, search_dirs: Sequence[Path] = ()) -> Path:
    """The verified artefact file in the store, downloading it if needed.

    ``search_dirs`` are looked at first (an offline mirror, a test fixture).
    A file whose sha256 differs from the pin is a hard error: nothing is kept.
    """
    dest_dir = store.area("downloads") / artifact.sha256[:16]
    dest = dest_dir / artifact.filename
    if dest.exists():
        if sha256_file(dest) == artifact.sha256:
            return dest
        dest.unlink()  # damaged cache entry: fetch again
    dest_dir.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    source = None
    for d in search_dirs:
        candidate = Path(d) / artifact.filename
        if candidate.is_file():
            try:
                shutil.copyfile(candidate, partial)
            except OSError as exc:  # disk full, read-only cache, unreadable mirror
                partial.unlink(missing_ok=True)
                if cannot_write(exc) or exc.filename == str(partial):
                    raise WriteError(f"cannot write {partial} (copying {candidate} into the cache): "
                                     f"{exc.strerror or exc}; nothing was kept",
                                     hint=f"free space in (or fix the permissions of) {partial.parent}") from None
                raise PinError(f"cannot copy {candidate} into the cache ({partial.parent}): "
                               f"{exc.strerror or exc}; nothing was kept") from None
            source = str(candidate)
            break
    if source is None:
        source = artifact.url
        _download(artifact.url, partial, artifact.size)
    got = sha256_file(partial)
    if got != artifact.sha256:
        partial.unlink()
        raise PinError(
            f"sha256 mismatch for {artifact.filename} from {source}: pinned {artifact.sha256}, got {got}; "
            "nothing was extracted"
        )
    partial.replace(dest)
    return dest


def _download(url: str, dest: Path, size: int | None) -> None:
    """Download ``url`` to ``dest``; a network failure and a failure to write ``dest`` are told apart."""
    writing = False  # True while the failure would be ours (opening, writing or closing dest), not the network's
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            writing = True
            with open(dest, "wb") as fh:
                writing = False
                total = size or int(resp.headers.get("Content-Length") or 0) or None
                with ui.Transfer(PurePosixPath(url).name, total) as bar:
                    for block in iter(lambda: resp.read(1 << 16), b""):
                        writing = True
                        fh.write(block)
                        writing = False
                        bar.advance(len(block))
                writing = True  # closing flushes what is buffered
            writing = False
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:  # ValueError: malformed URL
        dest.unlink(missing_ok=True)
        if writing:
            raise WriteError(f"cannot write {dest} while downloading {url}: "
                           f"{getattr(exc, 'strerror', None) or exc}; nothing was kept",
                           hint=f"free space in (or fix the permissions of) {dest.parent}") from None
        raise PinError(f"cannot download {url}: {exc}",
                       hint="offline? put the file in a directory and pass --artifacts DIR") from None


def _read_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return json.load(resp)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PinError(f"cannot read {url}: {exc}") from None
