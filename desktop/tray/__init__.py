"""Tray icon, quick prompt, single-instance hand-over and the global hotkey."""
