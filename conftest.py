"""Runs the ```python blocks of README.md and docs/*.md as tests (pytest-markdown-docs).

``python -m pytest`` collects them through pyproject's ``testpaths``; this hook hands
those Markdown files to pytest-markdown-docs' collector (``--markdown-docs`` would also
collect every test module's docstrings, which hold no examples). A block's info string
takes the tool's own options: ``notest`` (shown, not run), ``continuation`` (runs after
the block before it, in its namespace), ``fixture:NAME``. The fixtures here:

- ``fixture:cuda_gpu``: the block needs a CUDA GPU; skipped with that reason without one.

and one runner:

- ``runner:two_ranks``: the block is a script for two ranks (``RANK``/``WORLD_SIZE`` from the
  environment); it is saved as ``train.py`` and run as two processes, which must both exit 0.

Every block runs in a fresh temporary directory, so files it writes stay out of the tree.
Blocks that start processes (``LocalJob``, ``runner:two_ranks``) are marked ``slow`` and
``multiprocess`` like the tests that do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
DOC_FILES = {ROOT / "README.md", *(ROOT / "docs").glob("*.md")}

try:
    from pytest_markdown_docs._runners import _Runner, register_runner
    from pytest_markdown_docs.plugin import MarkdownInlinePythonItem, MarkdownTextFile
except ImportError:  # the `test` extra installs it; without it the docs are simply not collected
    MarkdownTextFile = MarkdownInlinePythonItem = None
else:

    @register_runner()
    class two_ranks(_Runner):  # noqa: N801 - the runner's name in the info string
        TIMEOUT_S = 240

        def runtest(self, test, args, *, asyncio_runner=None):
            Path("train.py").write_text(test.source)
            procs = [
                subprocess.Popen(
                    [sys.executable, "train.py"],
                    env={**os.environ, "RANK": str(rank), "WORLD_SIZE": "2"},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for rank in range(2)
            ]
            outputs = []
            try:
                for proc in procs:
                    outputs.append(proc.communicate(timeout=self.TIMEOUT_S)[0])
            finally:
                for proc in procs:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            failed = [(rank, p.returncode, out) for rank, (p, out) in enumerate(zip(procs, outputs)) if p.returncode]
            if failed:
                raise AssertionError(
                    "\n".join(f"rank {rank} exited with {rc}:\n{out}" for rank, rc, out in failed)
                )

        def repr_failure(self, test, excinfo, style=None):
            return f"{test.source_path}:{test.start_line}: {excinfo.value}"


def pytest_collect_file(file_path, parent):
    if MarkdownTextFile is None or parent.config.option.markdowndocs:
        return None  # --markdown-docs given: the plugin collects Markdown files itself
    if Path(file_path).resolve() in DOC_FILES:
        return MarkdownTextFile.from_parent(parent, path=Path(file_path))
    return None


def pytest_collection_modifyitems(config, items):
    if MarkdownInlinePythonItem is None:
        return
    for item in items:
        if isinstance(item, MarkdownInlinePythonItem):
            item.add_marker(pytest.mark.usefixtures("_doc_block_in_tmp_dir"))
            if item.runner_name == "two_ranks" or "LocalJob(" in item.code:  # real processes, 10-60 s
                item.add_marker(pytest.mark.multiprocess)
                item.add_marker(pytest.mark.slow)


@pytest.fixture
def _doc_block_in_tmp_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.fixture
def cuda_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
