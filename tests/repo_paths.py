"""Where the tests find the repository: its root, the shared fixtures and the golden files.

The test files sit in folders that mirror the source tree (``tests/theory``, ``tests/empirical/coupled``,
...), so each file's own depth differs; they import these paths instead of counting parents.
(``tests/`` is on ``sys.path`` because ``tests/conftest.py`` lives there.)"""
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"
