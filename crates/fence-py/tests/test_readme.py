"""The README's Python example runs as written, on a machine where nothing was set up."""

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_example_runs_as_written(tmp_path):
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "README has one Python example"
    done = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "acknowledged at epoch" in done.stdout
