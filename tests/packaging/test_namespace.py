"""Wren installs one top-level name, `wren` (wren.engine from engine/, wren.desktop from
desktop/, wren.resources from resources/; setup.py), so it coexists with PyPI distributions
that install top-level `desktop`, `resources` or `engine` packages, and with the unrelated PyPI
`wren` (a REST client that owns wren/__init__.py: Wren ships no wren/__init__.py).

The wheel tests build Wren's wheel without its C++ kernels (WREN_BUILD_KERNELS=0: the layout is
the same, the compile is minutes) and install it into fresh venvs offline (--no-index)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

# namespace-migration: strings as written (the dummy distributions' bare `desktop` is meant)
REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("engine", "desktop", "resources")
DIST = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]


def _python_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py", "*.spec"], cwd=REPO,
                         capture_output=True, text=True, check=False)
    names = out.stdout.splitlines() if out.returncode == 0 else [
        str(p.relative_to(REPO)) for p in REPO.rglob("*.py") if ".venv" not in p.parts and "build" not in p.parts]
    return [REPO / n for n in names if (REPO / n).is_file() and not n.startswith("tests/data/")]


def test_no_code_imports_a_bare_folder_name():
    """`import engine` would load the checkout's folder as a second engine next to wren.engine."""
    offenders = []
    for path in _python_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert not offenders, "import wren.engine / wren.desktop / wren.resources instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_folder_imported_by_its_bare_name_says_what_to_import(folder):
    done = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0
    assert f"wren.{folder}" in done.stderr and "ImportError" in done.stderr, done.stderr[-2000:]


def test_entry_points_and_distribution_name():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] != "wren", "`wren` on PyPI is another project (a REST client)"
    assert project["scripts"]["wren"].startswith("wren.engine.")
    assert project["gui-scripts"]["wren-desktop"].startswith("wren.desktop.")
    assert not (REPO / "wren").exists(), "a wren/ folder in the checkout would shadow the installed namespace"


def test_installed_modules_live_under_wren():
    """The running environment's Wren (the editable install) is the namespaced one."""
    code = ("import importlib.util as u, sys\n"
            "import wren.engine, wren.desktop, wren.resources\n"
            "from importlib import resources\n"
            "assert (resources.files('wren.resources') / 'safety' / 'policy.toml').is_file()\n"
            "print(wren.engine.__file__)\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('engine', 'desktop', 'resources'))))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO.parent, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    where, bare = done.stdout.splitlines()
    assert Path(where).resolve() == (REPO / "engine" / "__init__.py").resolve()
    assert bare == ""


def test_kernels_are_a_wren_engine_module():
    """setup.py names the extension wren.engine.inference.quant._C; once built it loads under that name."""
    built = sorted((REPO / "engine" / "inference" / "quant").glob("_C*.so"))
    if not built:
        pytest.skip("Wren's C++ kernels are not built in this checkout (no compiler or WREN_BUILD_KERNELS=0)")
    code = "from wren.engine.inference.quant import kernels; print(kernels.available())"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO.parent, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "True"


# -- the wheel -------------------------------------------------------------------------


def _pip_wheel(source: Path, out: Path, **env: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out),
         str(source)],
        capture_output=True, text=True, timeout=600, check=False, env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def wren_wheel(tmp_path_factory) -> Path:
    return _pip_wheel(REPO, tmp_path_factory.mktemp("wren-wheel"), WREN_BUILD_KERNELS="0")


def _dummy(tmp: Path, name: str, package: str, files: dict[str, str]) -> Path:
    """A tiny distribution `name` installing the top-level package `package`."""
    src = tmp / f"{name}-src"
    (src / package).mkdir(parents=True)
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "1.0"
        [tool.setuptools]
        packages = ["{package}"]
        """), encoding="utf-8")
    for rel, text in files.items():
        (src / package / rel).write_text(text, encoding="utf-8")
    return _pip_wheel(src, tmp / f"{name}-wheel")


@pytest.mark.slow
def test_the_wheel_installs_only_the_wren_namespace(wren_wheel):
    names = zipfile.ZipFile(wren_wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"wren"}, sorted(tops)
    assert "wren/__init__.py" not in names, "wren/ is a namespace: the PyPI `wren` owns wren/__init__.py"
    for must in ("wren/engine/__init__.py", "wren/engine/terminal/main.py", "wren/engine/inference/quant/kernels.py",
                 "wren/desktop/app.py", "wren/resources/safety/policy.toml", "wren/resources/desktop/wren.svg",
                 "wren/resources/models/catalog.json"):
        assert must in names, f"{must} is missing from {wren_wheel.name}"
    # every package folder in the checkout is in the wheel (setup.py finds them at build time)
    for folder in FOLDERS:
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.relative_to(REPO).as_posix()
            if "__pycache__" not in rel:
                assert f"wren/{rel}" in names, f"{rel} is not in the wheel"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wren_wheel).read(entry_points).decode()
    assert "wren = wren.engine.terminal.launch:main" in text and "wren-desktop = wren.desktop.app:main" in text


@pytest.mark.slow
def test_wren_installs_beside_packages_named_desktop_and_wren(tmp_path, wren_wheel):
    """A fresh venv holds Wren, a distribution with a top-level `desktop` package and one with
    a regular `wren` package (as the PyPI `wren` has): each imports its own, and removing one
    leaves the others whole. Wren's dependencies come from this environment (a .pth line after
    the venv's own site-packages), nothing from the network."""
    desktop_dummy = _dummy(tmp_path, "desktop-dummy", "desktop", {"__init__.py": 'WHO = "desktop-dummy"\n'})
    wren_rest = _dummy(tmp_path, "wren-rest-dummy", "wren", {"__init__.py": 'WHO = "wren-rest-dummy"\n',
                                                             "client.py": "def get():\n    return 1\n"})
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "zz_wren_test_deps.pth").write_text("\n".join(deps) + "\n", encoding="utf-8")

    def pip(*args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args], capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    pip("install", "-q", "--no-deps", "--no-index", str(desktop_dummy), str(wren_rest), str(wren_wheel))
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "offscreen"}
    check = textwrap.dedent("""\
        import sys
        import desktop, wren, wren.client
        import wren.engine, wren.desktop, wren.resources
        import wren.desktop.app, wren.engine.api
        from importlib import resources
        assert desktop.WHO == "desktop-dummy", desktop.__file__
        assert wren.WHO == "wren-rest-dummy" and wren.client.get() == 1
        assert (resources.files("wren.resources") / "safety" / "policy.toml").is_file()
        for mod in (wren.engine, wren.desktop.app, wren.engine.api):
            assert mod.__file__.startswith(sys.prefix), mod.__file__
        print("ok")
        """)
    done = subprocess.run([str(python), "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-4000:]
    version = subprocess.run([str(env_dir / "bin" / "wren"), "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300, check=False)
    assert version.returncode == 0 and version.stdout.strip(), version.stderr[-3000:]

    # uninstalling the other two leaves Wren whole (no file was shared)
    pip("uninstall", "-q", "-y", "desktop-dummy", "wren-rest-dummy")
    after = subprocess.run([str(python), "-c", "import wren.desktop.app, wren.engine.api; import desktop"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert "No module named 'desktop'" in after.stderr, after.stderr[-3000:]
    assert "wren.desktop" not in after.stderr and "wren.engine" not in after.stderr, after.stderr[-3000:]
