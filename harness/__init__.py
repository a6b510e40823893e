"""patch-lane harness: pinned upstreams, ordered patch series, paired GPU runs and receipts."""

__version__ = "0.1.0"
