"""The starter's shapes with random bf16 weights and the starter's tokenizer, as a model folder
of Hugging Face layout, for `bench/serve.py --model` on a machine without the starter's package.

    python3 bench/device/random_starter.py OUT_FOLDER TOKENIZER_FOLDER

TOKENIZER_FOLDER holds tokenizer.json, tokenizer_config.json and generation_config.json
(bench/device/prepare.sh copies them from the installed starter). Random weights answer
nonsense at the starter's speed, which is all a serving benchmark needs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpu  # bench/gpu.py: the shapes and the random-weight writer


def main() -> None:
    out, tokenizer = Path(sys.argv[1]), Path(sys.argv[2])
    gpu.write_random_model(dict(gpu.SHAPES["starter"]), out, "cpu")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(tokenizer / name, out / name)
    print(f"random starter in {out}: {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
