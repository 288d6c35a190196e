"""``python -m bus``: the ``inbox`` command."""

from bus.entry import main

main()
