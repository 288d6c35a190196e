"""The pure core: models, errors, ids, the clock, settings, and the rules.

Wake policy (``policy``), typed-request rules (``decisions``), receipt rules
(``receipt_rules``), the answers' views (``thread_views``, ``item_views``, ``status_view``;
these four standard library only: the read lane uses them too), thread keying
(``threads``), what the model reads (``stamp``, ``notices``, ``text``), and ``lane_names``
(every name the fast lanes, bus.lanes, share with the library; it imports only ``os``). No I/O beyond
reading the environment and the clock, and ``locate`` reading the embedded store's password
from its checked folder; files, sockets and processes are bus.local's.

May import: the standard library and pydantic; nothing else of ``bus`` but the one folder
check ``locate`` borrows from bus.local.runtime_dir (named in the import contracts).
"""
