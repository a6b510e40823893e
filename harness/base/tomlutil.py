"""Reading TOML with errors that name the file, the line and the key at fault."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError, TOMLKitError

from harness.base import regular
from harness.errors import ConfigError

_MISSING = object()
MAX_BYTES = regular.MAX_TOML_BYTES


def load_document(path: Path) -> tomlkit.TOMLDocument:
    """The file as a round-trippable tomlkit document; any unreadable or invalid file is a ConfigError.

    The text is checked with the standard library's strict parser first (it rejects duplicate keys
    and tables that tomlkit accepts or reports without a line) and then parsed with tomlkit, so
    every problem is reported as ``<file>:<line>: ...``.
    """
    try:
        size = path.stat().st_size
    except OSError:
        size = 0  # read_bytes below says what is wrong with it
    if size > MAX_BYTES:
        raise ConfigError(f"{path}: {size} bytes, more than the {MAX_BYTES} a TOML file of this repository may hold; "
                          "not read (a paste or a generated table gone wrong?)")
    try:
        data = regular.read_bytes(path, follow=True)  # a FIFO, a device or a directory is refused, never waited on
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{lineno}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                          "TOML files are UTF-8") from None
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)|\(at end of document\)", str(exc))
        line = (m.group(1) or str(text.count("\n") + 1)) if m else "?"
        raise ConfigError(f"{path}:{line}: not valid TOML: {exc}") from None
    try:
        return tomlkit.parse(text)
    except ParseError as exc:
        raise ConfigError(f"{path}:{exc.line}: not valid TOML: {exc}") from None
    except TOMLKitError as exc:  # accepted by tomllib, refused by tomlkit: no line to name
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def key_line(lines: list[str], key: str, header: int) -> int | None:
    """The line number (from 1) of ``key = ...`` in the table whose header is ``lines[header]`` (``header`` -1: the
    top of the file, before its first table), looked for up to the next table header; None when it is not there.
    For errors that name a key: the file's line says where to look."""
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    for n in range(header + 1, len(lines)):
        if re.match(r"^\s*\[", lines[n]):
            break
        if pattern.match(lines[n]):
            return n + 1
    return None


def field(table: Any, key: str, kind: type | tuple[type, ...], where: str, default: Any = _MISSING) -> Any:
    """``table[key]`` unwrapped to plain Python and checked against ``kind``."""
    if key not in table:
        if default is _MISSING:
            raise ConfigError(f"{where}: missing key '{key}'")
        return default
    value = table[key]
    value = value.unwrap() if hasattr(value, "unwrap") else value
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}: key '{key}' must be {want}, not {type(value).__name__} ({value!r})")
    return value


def str_list(table: Any, key: str, where: str) -> list[str]:
    value = field(table, key, list, where, default=[])
    for item in value:
        if not isinstance(item, str):
            raise ConfigError(f"{where}: every entry of '{key}' must be a string, found {item!r}")
    return list(value)


def choice(table: Any, key: str, choices: tuple[str, ...], where: str, default: Any = _MISSING) -> str:
    value = field(table, key, str, where, default=default)
    if value not in choices:
        raise ConfigError(f"{where}: key '{key}' is {value!r}; expected one of {', '.join(choices)}")
    return value
