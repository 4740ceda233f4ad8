"""The terminal front end: `wren` and every subcommand (main.py builds the parser), and the
resident engine that answers `wren ask` between runs (resident.py asks, resident_host.py
answers). It sits above the engine and uses its public surface; nothing below imports it."""
