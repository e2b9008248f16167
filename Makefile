# hangdoc: `make demo` shows a real hang diagnosed; `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install browser numactl test unit fast zoo live demo bench bench-headline bench-scale dist clean

install: $(STAMP) browser numactl

# The HTML report's browser test opens the page in Debian's chromium. Without apt or root it is
# not installed, and that test skips saying so; the rest of the install goes on.
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends chromium) >/dev/null 2>&1 || \
		echo "make install: chromium not installed (no apt or not root): the HTML browser test will skip"

# The wrapped-ranks test runs its ranks under numactl too (Debian's numactl); without apt or root it
# skips saying so.
numactl:
	@command -v numactl >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends numactl) >/dev/null 2>&1 || \
		echo "make install: numactl not installed (no apt or not root): the numactl wrapper's test will skip"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: 2.13.0 is the CPU build; any other spec pulls CUDA wheels.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The unit tiers on both cores (pure, or processes of their own), then the real jobs one at a time:
# a real job's verdict times its steps, and a second job beside it would slow them.
test: install
	@rc=0; \
	$(PY) -m pytest -q -n 2 --durations=15 tests/unit || rc=$$?; \
	$(PY) -m pytest -q -p no:xdist --durations=25 tests/integration || rc=$$?; \
	exit $$rc

unit: install
	$(PY) -m pytest -q tests/unit

# The fast tier, before every commit: the unit tests and the replay tier but the bounds, fuzzers and
# wheel builds of tens of seconds each (marked `slow`), on both cores: about a minute on two idle
# cores. `make test` runs them all.
fast: install
	$(PY) -m pytest -q -n 2 -m "not slow" tests/unit

# Every zoo scenario live on real torchrun jobs (about 12 minutes); `make test` runs a hang, a crash
# and a healthy job live and replays the recordings of all of them (tests/replay/).
zoo: install
	HANGDOC_LIVE_ZOO=1 $(PY) -m pytest -q tests/integration/test_zoo.py tests/integration/test_scenarios_start.py

# Every real-job test live, those whose verdicts the replay tier holds too (about 35 minutes).
live: install
	HANGDOC_LIVE_ZOO=1 HANGDOC_LIVE_VERDICTS=1 $(PY) -m pytest -q -p no:xdist --durations=25 tests/integration

demo: install
	$(PY) -m hangdoc demo

# Every section; exits 1 when a headline figure is more than 25 % worse than benchmarks/baseline.json.
bench: install
	$(PY) -m benchmarks.bench

# The headline figures alone, held against the baseline (docs/benchmarks.md says how to change it).
bench-headline: install
	$(PY) -m benchmarks.bench --only headline

# A wheel in dist/, to install hangdoc as a tool of its own (README, "Install it for your jobs"):
# `pipx install dist/hangdoc-0.1.0-py3-none-any.whl`. Built with a small venv of its own (no torch)
# in a temporary directory, as the build itself is (build_backend/): only dist/ is written here.
dist:
	rm -rf dist
	@venv=$$(mktemp -d) && trap 'rm -rf "$$venv"' EXIT && \
	$(PYTHON) -m venv "$$venv" && \
	"$$venv/bin/python" -m pip install --quiet 'setuptools>=77' wheel && \
	"$$venv/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .
	@ls dist/*.whl

# One size of the many-node benchmark: N ranks of node bundles, then `hangdoc report DIR`.
RANKS ?= 4096
bench-scale: install
	nice -n 10 $(PY) -m benchmarks.bench_merge --scale $(RANKS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
