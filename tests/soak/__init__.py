"""Soak tests: short runs of bench/'s long programs (chaos, the swarm of hosts, the cost bench)."""
