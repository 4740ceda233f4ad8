"""The settings dialog: models, generation, custom instructions, memory, safety, hotkey, diagnostics."""
