"""The Models page: installed models, import, and the catalog of models to download."""
