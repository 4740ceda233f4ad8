"""Wren's desktop window (PySide6): talks to the engine through `engine.api.Engine` and its services."""

if __name__ != "wren.desktop":  # setup.py installs this folder as wren.desktop; a second copy would split its state
    raise ImportError(f"{__name__}: Wren's desktop/ folder is the package wren.desktop; import that "
                      "(`pip install -e .` installs a checkout)")
