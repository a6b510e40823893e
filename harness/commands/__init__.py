"""The command line: one module per verb; each exposes ``register(sub)`` and ``main(args) -> int``.

``_args`` and ``_context`` are what the verbs share (options; a Context built from them), ``error_handler`` the
boundary that turns any failure into one clean line and an exit code. A verb parses, calls the library and
prints; the work is done below.

May import every package of the harness; nothing below imports this one.
"""
