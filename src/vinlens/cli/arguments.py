"""Argument types shared by the commands (argparse turns their errors into exit code 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["int_at_least", "non_negative_int", "positive_int"]


def int_at_least(least: int, what: str) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers >= ``least`` (``what`` names them in errors)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


positive_int = int_at_least(1, "a positive integer")
non_negative_int = int_at_least(0, "a non-negative integer")
