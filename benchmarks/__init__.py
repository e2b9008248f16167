"""hangdoc's benchmarks (`make bench`, `make bench-scale`): not shipped in the package.

They build their inputs with the test suite's factories (tests/factories.py).
"""
import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
