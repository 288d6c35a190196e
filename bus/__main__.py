"""``python -m bus``: the ``inbox`` command."""

from bus.surfaces.entry import main

main()
