"""The monitoring suite's one Prometheus (crafted_hosts.py says what it scrapes): started once for the
session, stopped at its end."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.tests.helpers import prometheus
from ansible_collections.kdtree.fleet.tests.monitoring.crafted_hosts import (
    HOSTS,
    PROFILES,
    RULES,
    SCRAPES,
    Monitoring,
    kdtree_text,
    sglang_text,
)


@pytest.fixture(scope="session")
def monitoring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitoring]:
    """Both crafted hosts' exporters and one Prometheus scraping them with the shipped rules loaded,
    returned once every target has been scraped SCRAPES times."""
    prometheus.require()
    start = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - start

    exporters = {
        (host, kind): prometheus.Exporter(make(PROFILES[host], elapsed), host=host)
        for host in HOSTS
        for kind, make in (("kdtree", kdtree_text), ("sglang", sglang_text))
    }
    for exporter in exporters.values():
        exporter.__enter__()
    try:
        targets = [prometheus.Target(e.address) for e in exporters.values()]
        workdir: Path = tmp_path_factory.mktemp("prometheus")
        with prometheus.Prometheus(workdir, targets, rules=[RULES]) as prom:
            prom.wait_for_targets()
            prom.wait_for(f"min(count_over_time(up[1m])) >= {SCRAPES}", timeout=SCRAPES * 5)
            yield Monitoring(
                prom,
                kdtree={h: exporters[h, "kdtree"].address for h in HOSTS},
                sglang={h: exporters[h, "sglang"].address for h in HOSTS},
            )
    finally:
        for exporter in exporters.values():
            exporter.__exit__(None, None, None)
