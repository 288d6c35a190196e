"""The ``inbox`` console script of installs made before the entry point moved to
bus.lanes.entry: their script (``from bus.surfaces.entry import main``) keeps starting
until the next install writes the new one."""

from bus.lanes.entry import main

__all__ = ["main"]
