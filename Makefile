# make up   : install into .venv and run the bus here (embedded Redis, worker, scheduler)
# make test : install into .venv and run the whole test suite (it starts its own Redis
#             when none answers on 127.0.0.1:6379)
# make docs : the documentation site (mkdocs-material) into site/
# make bench: bench/cost.py, the cost of one message on the users' paths (bench/README.md)
# make chaos: the chaos soak (bench/chaos.py: 2 hosts, 20,000 messages, processes killed)
VENV ?= .venv
# Test processes for `make test` (pytest-xdist): most tests wait on real processes and
# sockets, so two share 2 cores well; TEST_WORKERS=0 runs them in this one process.
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python

.PHONY: install up test lint schemas docs bench bench-swarm chaos

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# compat: a plain path entry, not an import hook run at every start of `inbox` (hooks)
	$(PY) -m pip install -q -e '.[test,docs]' --config-settings editable_mode=compat
	touch $@

up: install
	$(VENV)/bin/inbox up

test: install
	$(PY) -m pytest -n $(TEST_WORKERS)

lint: install
	$(VENV)/bin/ruff check bus workers tests bench docs
	$(VENV)/bin/ruff format --check bus workers tests bench docs
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m bus.ops.schemas --check
	$(PY) docs/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q

schemas: install
	$(PY) -m bus.ops.schemas

# docs: the reference pages regenerated from the code, then the site (site/index.html)
docs: install
	$(PY) docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# make bench: the cost of one message on the users' paths, each beside its baseline
# (bench/cost.py, ~6 minutes on 2 cores), then the hooks' and read commands' wall
# (bench/hooks.py); make bench-swarm: swarm.py's throughput rows
bench: install
	$(PY) bench/cost.py
	$(PY) bench/hooks.py

bench-swarm: install
	$(PY) bench/swarm.py

chaos: install
	$(PY) bench/chaos.py

# make swarm-hosts: 10 hosts in network namespaces on a Redis Cluster under faults (needs root)
.PHONY: swarm-hosts
swarm-hosts: install
	$(PY) bench/swarm_hosts.py
