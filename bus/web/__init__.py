"""The web inbox (``/ui/``): pages for the people in a swarm, served by ``inbox serve``.

Members answer their workspace's items; operators watch sessions live. :mod:`.app`
builds the pages (imported only by the gateway); :mod:`.links` makes sign-in links and
needs nothing but the bus.
"""
