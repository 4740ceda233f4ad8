"""Wren's engine: store, models, inference and streaming; never imports Qt."""

if __name__ != "wren.engine":  # setup.py installs this folder as wren.engine; a second copy would split its state
    raise ImportError(f"{__name__}: Wren's engine/ folder is the package wren.engine; import that "
                      "(`pip install -e .` installs a checkout)")

__version__ = "0.1.0"
