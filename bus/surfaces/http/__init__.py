"""The HTTP gateway (``inbox serve``): ``gateway`` (the routes) and
``front_door`` (Host allow-list, JSON-only, same-origin, body cap, read timeout).

May import: ``bus.api`` and anything below it; ``bus.surfaces.web`` (mounted under /ui/).
"""
