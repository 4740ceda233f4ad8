"""Voice in the window: dictation into the composer, read-aloud of answers and voice mode,
over the engine's recognizer and voice (engine.voice). Audio devices are PortAudio's through
`sounddevice` (devices.py); recording and synthesis run off the GUI thread."""
