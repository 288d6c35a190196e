"""What the tests share and bench/ reuses: servers on free ports, worker processes, clusters,
network namespaces, harness and store fixtures, round-trip and slow-log recorders.

Arrows point one way: tests and bench import from here; nothing here imports bench/ or a
test module (the import contracts in pyproject.toml hold it)."""
