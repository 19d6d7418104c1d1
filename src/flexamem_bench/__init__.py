"""Evaluation: data-set loaders, methods and measures over real histories."""
