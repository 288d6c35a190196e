"""Integration tests: real Redis, real Celery workers, real sockets, files and harness CLIs."""
