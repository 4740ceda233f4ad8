"""Weight-only quantized linear layers for the torch backend (CPU decode is memory-bound)."""

from engine.inference.quant.linear import QUANT_NAMES, GroupQuantEmbedding, GroupQuantLinear, quantize_linears

__all__ = ["QUANT_NAMES", "GroupQuantEmbedding", "GroupQuantLinear", "quantize_linears"]
