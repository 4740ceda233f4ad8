"""Icons, style sheets and other files Wren ships beside its code."""

if __name__ != "wren.resources":  # setup.py installs this folder as wren.resources; a second copy would split its state
    raise ImportError(f"{__name__}: Wren's resources/ folder is the package wren.resources; import that "
                      "(`pip install -e .` installs a checkout)")
