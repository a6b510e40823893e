"""One module per verb; each exposes ``main(args) -> int``."""
