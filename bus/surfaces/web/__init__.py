"""The web inbox (``/ui/``): pages for the people in a swarm, served by ``inbox serve``.

Members answer their workspace's items; operators watch sessions live. ``app`` builds the
pages (mounted by the gateway), ``page_gate`` finds the visitor (the sign-in cookie, CSRF,
same-origin posts, security headers), ``permission`` is the one check every view makes;
``templates/`` and ``static/`` hold every asset. Sign-in links are
``bus.services.signin_links``.

May import: ``bus.api`` and anything below it.
"""
