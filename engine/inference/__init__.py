"""Inference: backends, sampling, generation loop and the per-model inference thread."""
