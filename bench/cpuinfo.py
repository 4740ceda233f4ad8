"""The CPU a benchmark ran on, for its report: model name, cores, vector flags, load."""

from __future__ import annotations

import os
from pathlib import Path


def cpu() -> dict:
    name = None
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name is None:
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    info = {"cpu": name, "cores": os.cpu_count(), "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "avx512_vnni": "avx512_vnni" in flags}
    if hasattr(os, "getloadavg"):
        info["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    return info
