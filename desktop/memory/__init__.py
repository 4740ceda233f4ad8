"""Memories in the window: chat notices, provenance, the editor and the settings page."""
