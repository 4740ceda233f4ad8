"""Wren's desktop window (PySide6): talks to the engine only through `engine.api.Engine`."""
