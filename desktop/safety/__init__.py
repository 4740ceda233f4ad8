"""Safety in the window: the check before sending, and Settings → Safety."""
