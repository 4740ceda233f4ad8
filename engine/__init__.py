"""Wren's engine: store, models, inference and streaming; never imports Qt."""

__version__ = "0.1.0"
