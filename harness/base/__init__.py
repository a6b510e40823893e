"""The shared base: utilities every stage uses and none of which knows a pack, a lane or an upstream.

Owns hashing, the local cache (``store``), console output (``ui``), child-process guards (``guard``), keys for
remembered answers (``fingerprint``), safe tar extraction, regular files read from a tree (``regular``), TOML
reading with located errors (``tomlutil``), the settings the noxfile and the CLI share, other Python
interpreters, and the static imports of a Python tree (``pyimports``).

May import: ``harness.errors`` and the standard library's neighbours here. Most modules are standard library
only: the noxfile and the bootstrap import them before any dependency is installed. Importing this package
imports nothing.
"""
