"""This machine's files, sockets and processes: the I/O the core leaves out.

The one checked folder under ``/tmp`` (``runtime_dir``), a session's unix socket bound and
connected through a short link when its path is too long (``unix_socket``), files opened
without following links and owned by this user (``owned``), files made 0600 and folders
0700 (``private_files``), the processes this host's ``inbox up`` runs (``up_procs``), and where its warm command
server listens (``command_socket``).

May import: the standard library and bus.core; nothing else of ``bus``. bus.core.locate
imports ``runtime_dir`` (the one arrow back up, named in the import contracts): the
embedded store's socket and password sit in that checked folder when the home's path is
too long for a socket.
"""
