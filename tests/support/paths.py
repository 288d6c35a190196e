"""Where the checkout is: the repository's root, for files and commands the tests run."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
