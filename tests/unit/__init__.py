"""Unit tests: pure rules and parsing, no Redis, no child processes (files in temp dirs at most)."""
