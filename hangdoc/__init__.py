"""hangdoc: name the rank and the root cause when a distributed PyTorch job hangs."""

__version__ = "0.1.0"
