"""The ``inbox`` command line: ``app`` and its command groups.

May import: ``bus.api`` and anything below it.
"""
