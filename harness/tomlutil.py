"""Reading TOML with errors that name the file, the line and the key at fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError

from harness.errors import ConfigError

_MISSING = object()


def load_document(path: Path) -> tomlkit.TOMLDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    try:
        return tomlkit.parse(text)
    except ParseError as exc:
        raise ConfigError(f"{path}:{exc.line}: not valid TOML: {exc}") from None


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
