"""Weights in their file's own blocks (QuantLinear, QuantEmbedding over QTensors, multiplied
by Wren's kernels: docs/weights.md), and torch's packed int4 path for an explicit
re-quantization (GroupQuantLinear)."""

from .linear import QUANT_NAMES, GroupQuantEmbedding, GroupQuantLinear, quantize_linears
from .modules import QTensor, QuantEmbedding, QuantLinear

__all__ = ["QUANT_NAMES", "GroupQuantEmbedding", "GroupQuantLinear", "QTensor", "QuantEmbedding", "QuantLinear",
           "quantize_linears"]
