"""Who is writing and what they may do.

``tokens`` (signed tokens), ``access`` (the claim checks the facade makes before it
calls a service), ``rules`` (pure: handle confusables, wake-command hygiene, the
gateway's Host and Origin rules).

May import: ``bus.core``.
"""
