"""The facade's plain forwards: a :class:`~bus.api.Bus` method that only hands its call to
one service method takes that method's signature and docstring instead of repeating them."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def same_as(
    method: Callable[Concatenate[Any, P], R],
) -> Callable[[Callable[..., R]], Callable[Concatenate[Any, P], R]]:
    """Give the decorated forward ``method``'s parameters (for mypy, ``help`` and
    ``inspect``) and its docstring; the forward's body makes the call."""

    def wrap(forward: Callable[..., R]) -> Callable[Concatenate[Any, P], R]:
        forward.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
        forward.__doc__ = method.__doc__
        return forward

    return wrap
