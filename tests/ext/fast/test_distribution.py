"""`pip install files/sglang_ext` gives the kdtree_verify package with every module and the
`sglang.srt.plugins` entry point (plugin mode), and leaves sitecustomize.py out."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest
from distlib import pip_install_target
from extlib import DOUBLE_DIR, EXT_DIR, clean_env

GROUP = "sglang.srt.plugins"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    work = tmp_path_factory.mktemp("dist")
    return pip_install_target(work / "site", work)  # an isolated build: setuptools from pip's index


def _dist(site):
    (dist,) = [d for d in importlib.metadata.distributions(path=[str(site)]) if d.name == "kdtree-verify"]
    return dist


def test_the_distribution_declares_the_sglang_plugin_entry_point(site):
    eps = [ep for ep in _dist(site).entry_points if ep.group == GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("kdtree_verify", "kdtree_verify.inject.plugin:register")]


def test_the_distribution_installs_every_module_of_the_package_and_no_sitecustomize(site):
    source = {p.relative_to(EXT_DIR).as_posix() for p in (EXT_DIR / "kdtree_verify").rglob("*.py")}
    installed = {p.relative_to(site).as_posix() for p in site.rglob("*.py")}
    assert installed == source
    assert not (site / "sitecustomize.py").exists()


def test_the_entry_point_loads_register_from_the_installed_package(site):
    """As SGLang's load_plugins() finds it: importlib.metadata on sys.path, then ep.load()."""
    program = (
        "import importlib.metadata, json, sys\n"
        f"(ep,) = importlib.metadata.entry_points(group={GROUP!r}, name='kdtree_verify')\n"
        "fn = ep.load()\n"
        "print(json.dumps({'callable': callable(fn), 'name': fn.__name__,"
        " 'file': sys.modules[fn.__module__].__file__}))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", program],
        env=clean_env(PYTHONPATH=f"{site}:{DOUBLE_DIR}"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=site,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got == {"callable": True, "name": "register", "file": str(site / "kdtree_verify/inject/plugin.py")}
