"""``python -m bus``: the ``inbox`` command."""

from bus.lanes.entry import main

main()
