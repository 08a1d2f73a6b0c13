# Two commands do everything on a fresh machine:
#   make demo   set up, then run the main job (loopscale demo) on the bundled default corpus
#   make test   set up, then run ruff and the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev,lmeval]'
	touch $(STAMP)

setup: $(STAMP)
	bash scripts/system_deps.sh
	bash scripts/fetch_corpus_sources.sh >/dev/null

demo: setup
	$(VENV)/bin/loopscale demo

test: setup
	bash scripts/test.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

bench: setup
	$(PY) benchmarks/fit_speed.py
	$(PY) benchmarks/train_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
