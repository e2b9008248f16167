# hangdoc: `make demo` shows a real hang diagnosed; `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test unit demo bench bench-scale clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: 2.13.0 is the CPU build; any other spec pulls CUDA wheels.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -q

unit: install
	$(PY) -m pytest -q tests/unit

demo: install
	$(PY) -m hangdoc demo

bench: install
	$(PY) -m benchmarks.bench

# One size of the many-node benchmark: N ranks of node bundles, then `hangdoc report DIR`.
RANKS ?= 4096
bench-scale: install
	nice -n 10 $(PY) -m benchmarks.bench_merge --scale $(RANKS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
