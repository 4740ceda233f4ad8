"""The document library: files and folders the user added, indexed incrementally into
chunks with their place in the file, searched by words and meaning, cited in answers, and
grouped into projects (docs/architecture.md)."""
