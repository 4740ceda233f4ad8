"""The main window: layout, shortcuts, status bar and the conversation it shows."""
