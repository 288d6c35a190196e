"""The release, written here only: the wheel's version (pyproject.toml reads it),
``bus.__version__``, ``inbox --version``, the MCP server's, each host's in ``inbox status``.
A release changes it (docs/releasing.md)."""

__version__ = "0.2.0"
