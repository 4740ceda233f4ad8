"""The conversation list: grouped by day, searchable, with rename, pin and delete."""
