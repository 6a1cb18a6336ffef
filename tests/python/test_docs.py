"""Every ```python block of docs/python.md runs, in order, from the repository root (a block that
starts with `# requires a GPU` runs only where there is one)."""

import os
import re

import pytest

import nextstat
from conftest import ROOT


def blocks(doc="python.md"):
    text = (ROOT / "docs" / doc).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_python_doc_snippets_run(capsys):
    found = blocks()
    assert len(found) >= 4
    namespace = {}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for code in found:
            if code.startswith("# requires a GPU") and not nextstat.has_cuda():
                continue
            exec(compile(code, "docs/python.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "95% CL upper limit" in out


def test_differentiable_doc_snippets_run(capsys):
    found = blocks("differentiable.md")
    assert len(found) == 2
    namespace = {}
    for code in found:
        exec(compile(code, "docs/differentiable.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "Z_A = " in out and "torch.Size([2, 3])" in out
