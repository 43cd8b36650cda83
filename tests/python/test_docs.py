"""The docs' examples run (docs/README.md): each page's ```python blocks, in order, as
one script in a fresh interpreter with OXIDE_FALLBACK=error, so every example runs
natively on oxide and the pages cannot rot."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if p.name != "README.md")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_every_page_is_listed_and_has_an_example():
    index = (DOCS / "README.md").read_text()
    for page in PAGES:
        assert f"]({page.name})" in index, f"{page.name} is not listed in docs/README.md"
        assert BLOCK.search(page.read_text()), f"{page.name} has no python example"


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_page_examples_run(page, tmp_path):
    script = tmp_path / f"{page.stem}.py"
    script.write_text("\n\n".join(BLOCK.findall(page.read_text())))
    env = {k: v for k, v in __import__("os").environ.items()}
    env["OXIDE_FALLBACK"] = "error"
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, f"{page.name}:\n{out.stderr[-4000:]}"
