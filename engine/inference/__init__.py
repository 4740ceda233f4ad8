"""Inference: backends, sampling, generation loop and the per-model inference thread."""

import os
import sys

# Variables Wren sets where the user did not; a resident engine's socket counts them as set
# (engine/engine_sockets.py), so leaving one unset and setting Wren's value start the same engine.
DEFAULT_ENVIRONMENT = {"THP_MEM_ALLOC_ENABLE": "1"} if sys.platform == "linux" else {}

if sys.platform == "linux":
    # Decoding streams every weight from memory once a token. In 4 KB pages each page read needs
    # its own address translation; in 2 MB pages one covers 512 of them. torch's CPU allocator
    # advises Linux to back its buffers of 2 MB or more with transparent huge pages when
    # THP_MEM_ALLOC_ENABLE is set, and it reads the variable at its first allocation, which no
    # Wren process makes before importing this package (torch is imported only below it). On a
    # 1B Q4_K_M model, one thread: 45 CPU ms a token against 52-60 in 4 KB pages. Set it to 0
    # to turn this off.
    for _name, _value in DEFAULT_ENVIRONMENT.items():
        os.environ.setdefault(_name, _value)
