"""The settings dialog: models, backend, sampling defaults, system prompt, hotkey."""
