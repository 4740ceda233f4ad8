"""The chat view: messages, streaming Markdown, highlighted code blocks."""
