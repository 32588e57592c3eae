"""A one-line progress bar on stderr, so stdout stays clean for pipes."""

from __future__ import annotations

import time
from typing import IO

__all__ = ["ProgressBar"]


class ProgressBar:
    """A ``label [#####.....] done/total unit`` bar redrawn in place on ``stream``.

    Call it as ``bar(done, total)`` (the engines' ``progress_cb`` signature); it redraws
    at most ten times a second except for the final update, which is always drawn.
    """

    def __init__(self, label: str, unit: str, stream: IO[str], width: int = 30) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream
        self.width = width
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        filled = self.width if total <= 0 else min(self.width, int(self.width * done / total))
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done:,}/{total:,} {self.unit}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the bar's line (only if one was drawn)."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
