"""benchmarks/bench_first_contact.py times the README's quick start: what it runs is the python blocks of the
README's "Quick start" section, in order, and nothing else (the timing itself is the benchmark's, not a test's)."""
from benchmarks.bench_first_contact import README, quick_start

MADE_UP = """# tool

```python
print("not the quick start")
```

## Quick start: try it

Some words.

```python
import tool
```

```
pip install tool
```

```python
print(tool.answer())
```

### A sub-heading inside the section

```python
print("still the quick start")
```

## The theory

```python
print("not the quick start either")
```
"""


def test_the_quick_start_is_the_python_blocks_of_its_section(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(MADE_UP)
    assert quick_start(readme).splitlines() == [
        "import tool", "", "print(tool.answer())", "", 'print("still the quick start")']
    readme.write_text(MADE_UP.replace("## Quick start", "## Start"))
    assert quick_start(readme) == ""


def test_the_readme_has_a_quick_start_that_prints():
    code = quick_start(README)
    assert "import qkdyn" in code and "print(" in code
    compile(code, "quick start", "exec")  # it parses: the benchmark runs what a reader would paste
