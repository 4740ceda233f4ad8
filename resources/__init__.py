"""Icons, style sheets and other files Wren ships beside its code."""
