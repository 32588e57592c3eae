"""The run log is called "the run log": "Flight Recorder" is PyTorch's NCCL collective
tracer (``TORCH_FR_BUFFER_SIZE``, ``torchfrtrace``), named once, to tell the two apart."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[4]


def test_flight_recorder_names_pytorchs_tool_only() -> None:
    files = [
        *(ROOT / "src").rglob("*.py"),
        *(ROOT / "docs").glob("*.md"),
        ROOT / "README.md",
        *(ROOT / "notebooks").glob("*.ipynb"),
    ]
    assert len(files) > 50
    found = [
        (path.relative_to(ROOT).as_posix(), match.start())
        for path in files
        for match in re.finditer(r"flight[\s_-]*recorder", path.read_text(), re.IGNORECASE)
    ]
    assert [where for where, _ in found] == ["docs/health.md"], found
    text = (ROOT / "docs" / "health.md").read_text()
    sentence = text[found[0][1] - 200 : found[0][1] + 200]
    assert "PyTorch's Flight Recorder" in sentence and "NCCL" in sentence
