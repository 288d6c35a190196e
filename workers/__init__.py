"""The Celery edge: ``celery -A workers worker|call|beat|flower``.

Thin by design: each task parses its arguments and makes one call into :mod:`bus`.
"""

from .app import app

__all__ = ["app"]
