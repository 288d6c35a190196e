"""The fast lanes: the ``inbox`` console entry point and what it answers without the library.

``entry`` (the console script: the hook's and ``drain``'s look at an empty floor, and the
hand-off of everything else), ``drain`` (a floor with something on it, drained as the
library drains it), ``writes`` (that drain's two scripts over ``resp``, the small RESP
client), ``read`` (the everyday read commands: argv, settings, the store's URL) with
``read_answers`` (their JSON, from the library's own views) over ``lite_store`` (the store's
read methods on ``resp``), and ``send`` (the write commands handed to the warm server of
``inbox up``).

Standard library only, and of ``bus`` only what is standard library only at import:
bus.core (``lane_names``: every name the lanes share with the library; ``locate``,
``settings``, ``ids``, ``errors``, ``hook_env``, ``faults``, the views), bus.store's read
parts, keys and scripts, bus.delivery's floor and drain marks, bus.local's
``command_socket``, ``unix_socket`` and ``up_procs``. An import contract in
``pyproject.toml`` holds that nothing here reaches redis-py, pydantic, typer, rich or
click, but through the named hand-offs to the full path (the command line, a hook the lane
does not answer, the library's store for TLS and clusters).

Sits above every other package of ``bus``: nothing imports the lanes (the console script
of older installs, ``bus.surfaces.entry``, forwards here).

May import: anything of ``bus`` that is standard library only at import; modules' own
imports are kept inside the functions that need them where a start pays for them.
"""
