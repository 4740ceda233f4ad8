"""Where the engine processes of one install and data folder listen, and the one-line
commands any of them answers.

Besides the process in hand, a data folder may have engines answering `wren ask` over Unix
sockets: the resident engine the terminal starts, and the engine of Wren's open window
(engine/terminal/resident_host.py answers; engine/terminal/resident.py asks). Removing a
model must reach them wherever it is done (the window, `wren models rm`, a test), so the
socket names and `release_model` live here, below the engine and its front ends; nothing
here imports the terminal.

The socket is the user's alone: it sits in a folder only its owner can open (the session's
runtime folder, else the data folder), and its name is a digest of Wren's version, its
install, the data folder and the environment that shapes an engine (the variables in
ENV_NAMES, thread counts, visible GPUs), so an engine answers only the askers that would
have started the same one.

The line protocol (JSON, one object a line): a client sends {"resident": PROTOCOL, "cmd":
"ask" | "status" | "quit" | "erase" | "drop", ...}; an engine answers with one object a line
(engine/terminal/resident.py describes each). An engine refuses a line of another PROTOCOL
({"type": "error", "refused": true}), and its asker answers the question itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from . import __version__, paths
from .errors import WrenError
from .inference import DEFAULT_ENVIRONMENT
from .keep_alive import KEEP_ALIVE_ENV

# 2: a question is one typed object, {"cmd": "ask", "question": AskRequest} (1 sent `wren ask`'s arguments)
PROTOCOL = 2
LINE_LIMIT = 64 * 2**20  # longest line read: a question is at most a few MB of text

# The environment that shapes an engine: an engine answers only the askers that would have
# started the same one. Only these variables count, so one that shapes nothing here
# (WREN_API_KEY, read by `wren serve`; WREN_KEEP_ALIVE, sent with each question) starts no
# second engine with a second copy of the model.
ENV_NAMES = (
    # the quantized kernels and how they are built into the model (engine/inference/quant)
    "WREN_ISA", "WREN_KERNELS", "WREN_REPACK", "WREN_GROUP_PAIRS", "WREN_HEAD_ACTIVATIONS", "WREN_EXACT_ACTIVATIONS",
    "WREN_KERNEL_RMS_NORM", "WREN_QLINEAR_GEMV_ROWS",
    # the integer prompt path (its rows, its exact tail, float A/B) and how experts are read
    "WREN_PROMPT_GEMM", "WREN_PROMPT_INTEGER_ROWS", "WREN_PROMPT_EXACT_TAIL", "WREN_PROMPT_INTEGER_WIDTH",
    "WREN_MAP_EXPERTS", "WREN_PREFETCH_EXPERTS", "WREN_EXPERTS_TEAM",
    # attention: a prompt chunk's kernel (WREN_ATTEND=sdpa: torch's) and a compiled step's
    # norm and one-query attention kernels (WREN_KERNEL_ATTEND=off: inductor's loops)
    "WREN_ATTEND", "WREN_KERNEL_ATTEND",
    # compiling, the compute threads' priority and core sharing, the safety notes' language
    "WREN_TORCH_COMPILE", "WREN_COMPUTE_NICE", "WREN_CPU_SHARE", "WREN_LANGUAGE",
    # threads and devices
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "WREN_GPU_LAYERS", "WREN_GPU_MEMORY",  # how many layers a GPU holds (engine/inference/placement.py)
    "WREN_TRITON_MATVEC",  # the GPU's matrix-vector kernels (quant/triton_gguf.py)
    "THP_MEM_ALLOC_ENABLE",  # huge pages for torch's large buffers (engine/inference/__init__.py)
    # the offline lock of a managed machine (engine/network/lock.py): a resident engine started
    # without it must not answer a shell that has it
    "WREN_OFFLINE",
)
# Secrets a remote model's answer reads from the environment (engine/providers/keys.py): an
# engine started without a shell's key must not answer that shell with another key, so they
# count, by a hash only (the socket's folder is the user's alone, and 8 hex digits of a hash
# of them all tell nothing of any one).
SECRET_NAMES = ("WREN_KEYRING_PASSPHRASE", "WREN_KEYS_PASSPHRASE")
SECRET_PREFIXES = ("WREN_KEY_",)
# Read by Wren but not shaping an engine (a test checks every WREN_ name is in one of these lists):
# the data folder is in the socket's name already, the keep-alive comes with each question,
# the server's key is `wren serve`'s alone, the audio devices are `wren chat --voice`'s (engine/voice/microphone.py).
NOT_SHAPING = ("WREN_HOME", KEEP_ALIVE_ENV, "WREN_API_KEY", "WREN_AUDIO_INPUT", "WREN_AUDIO_OUTPUT")


def supported() -> bool:
    return os.name == "posix" and hasattr(asyncio, "open_unix_connection")


def _environment_digest() -> str:
    env = {**DEFAULT_ENVIRONMENT, **os.environ}
    shaping = sorted((k, env[k]) for k in ENV_NAMES if k in env)
    secrets = sorted((k, env[k]) for k in env if k in SECRET_NAMES or k.startswith(SECRET_PREFIXES))
    return hashlib.sha256(json.dumps([shaping, secrets]).encode()).hexdigest()[:8]


def _socket_folder_and_digest(home: Path | None) -> tuple[Path, str]:
    """The sockets' folder and the digest of this install and data folder in their names
    ("engine-DIGEST-ENV.sock" for a resident engine, "window-DIGEST-ENV.sock" for a window)."""
    home = (home or paths.data_dir()).resolve()
    install = Path(__file__).resolve().parent
    digest = hashlib.sha256(f"{__version__}\0{install}\0{home}".encode()).hexdigest()[:16]
    return paths.runtime_dir(home), digest


def _socket(kind: str, home: Path | None) -> Path:
    folder, digest = _socket_folder_and_digest(home)
    return folder / f"{kind}-{digest}-{_environment_digest()}.sock"


def socket_path(home: Path | None = None) -> Path:
    """Where the resident engine for this install, data folder and environment listens."""
    return _socket("engine", home)


def window_socket_path(home: Path | None = None) -> Path:
    """Where the window's engine listens while Wren's window is open."""
    return _socket("window", home)


def sockets(home: Path | None = None) -> list[Path]:
    """The sockets of this install and data folder, whatever environment started them:
    the windows' first, then the resident engines'."""
    folder, digest = _socket_folder_and_digest(home)
    if not folder.is_dir():
        return []
    return [path for kind in ("window", "engine") for path in sorted(folder.glob(f"{kind}-{digest}-*.sock"))]


def private_folder(folder: Path) -> None:
    """The socket's folder, made and checked: owned by this user, closed to everyone else."""
    paths.private_runtime_dir(folder)


def send(writer: asyncio.StreamWriter, message: dict) -> None:
    """One JSON line down a socket (the caller drains)."""
    writer.write(json.dumps(message).encode() + b"\n")


async def connect(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A line to the engine listening on `path`, or None when none listens there."""
    from .network.purpose import Part, acting

    try:
        with acting(Part.ENGINE, "reaching a running Wren engine on its socket"):  # recorded in the network ledger
            return await asyncio.open_unix_connection(str(path), limit=LINE_LIMIT)
    except OSError:  # no socket there, or nobody listening on it (an engine that died)
        return None


async def request(cmd: str, **fields: Any) -> list[dict]:
    """One command ("status", "quit", "erase", "drop") to each running engine of this
    install and data folder (the window's first); their answers (none running: an empty list)."""
    answers = []
    for path in sockets():
        line = await connect(path)
        if line is None:
            continue
        reader, writer = line
        try:
            send(writer, {"resident": PROTOCOL, "cmd": cmd, **fields})
            await writer.drain()
            raw = await reader.readline()
            if raw:
                answers.append(json.loads(raw))
        except (ConnectionError, json.JSONDecodeError):
            continue
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()
    return answers


def release_model(name: str) -> None:
    """Before a model's files are deleted (`wren models rm NAME`, the window's Models page):
    a resident engine that has it loaded stops its answers on it (their askers are told
    why) and unloads it. Refused (WrenError, nothing deleted) while Wren's window has it loaded."""
    if not supported():
        return
    from .threadloop import run_plain  # the window's remove runs this on a worker thread

    reason = f"the answer was stopped: the model {name} is being removed (`wren models rm`)"
    for answer in run_plain(request("drop", model=name, reason=reason)):
        if answer.get("type") == "error":
            raise WrenError(str(answer.get("message")))
