"""Contract tests: the store's aggregates on every backend (standalone, cluster, fakeredis) and the
documented interface; .ci/second-server runs the store's again on another server."""
