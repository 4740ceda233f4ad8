"""`wren serve`: Wren as an HTTP server (OpenAI-compatible endpoints and Wren's own
conversation stream). Importing this package costs nothing; the web framework is imported
by `engine.server.app` only."""
