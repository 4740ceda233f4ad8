"""The document library in the window: its page, an answer's sources and the projects list."""
