"""make bench-fleet's reading of a run (bench/fleet.py, scripts/testhosts/playrun.py): the batches of a
play from its banners (ansible-playbook prints one per `serial` batch), each batch's hosts and wall time,
and which build path each host took, from ansible-playbook's own output."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts" / "testhosts"))
sys.path.insert(0, str(ROOT / "bench"))
import fleet
from playrun import Run, busy_between, machine_busy_s, play_batches

DEPLOY = "Deploy kdtree verify attention to SGLang hosts"
OUTPUT = [
    (100.0, f"PLAY [{DEPLOY}] ******************************"),
    (100.1, "TASK [kdtree.fleet.kdtree_build : Say which path this host takes] ***"),
    (101.0, "ok: [h1] => "),
    (101.0, "    msg: 'kdtree_build on h1: build edbfec70e20f16c2 (sm_120a, CUDA 13.0):"),
    (101.0, "        install the artifact from /c/kdtree-builds"),
    (101.0, "        (built on h0), sha256 checked on the host'"),
    (110.0, f"PLAY [{DEPLOY}] ******************************"),
    (111.0, "ok: [h2]"),
    (112.0, "changed: [h3 -> localhost]"),
    (113.0, "fatal: [h2]: FAILED! => {}"),
    (
        113.5,
        "    msg: 'kdtree_build on h3: build edbfec70e20f16c2 (sm_120a, CUDA 13.0): compile on the host'",
    ),
    (114.0, "ok: [h3]"),
    (130.0, "PLAY [Report the kdtree state of SGLang hosts (read-only)] *****"),
    (131.0, "ok: [h1]"),
    (140.0, "PLAY RECAP ********"),
    (
        140.0,
        "h1                : ok=9    changed=0    unreachable=0    failed=0    skipped=1    rescued=0",
    ),
]


def test_each_banner_of_the_play_opens_a_batch_that_the_next_banner_closes():
    batches = play_batches(OUTPUT, DEPLOY)
    assert [(b.hosts, b.seconds) for b in batches] == [(["h1"], 10.0), (["h2", "h3"], 20.0)]


def test_the_report_play_and_a_play_not_asked_for_are_no_batches():
    assert [b.hosts for b in play_batches(OUTPUT, "Report the kdtree state of SGLang hosts (read-only)")] == [
        ["h1"]
    ]
    assert play_batches(OUTPUT, "Roll SGLang hosts back") == []


def test_a_run_cut_short_ends_its_last_batch_with_its_last_line():
    batches = play_batches(OUTPUT[:9], DEPLOY)
    assert [(b.hosts, b.seconds) for b in batches] == [(["h1"], 10.0), (["h2", "h3"], 2.0)]


def test_build_paths_are_counted_per_host_also_when_the_message_is_wrapped():
    assert fleet.build_paths(Run(rc=0, seconds=1.0, lines=OUTPUT)) == {"artifact": 1, "compile": 1}


def test_the_inventory_names_every_bench_host_with_the_local_group_vars(tmp_path):
    fleet.write_inventory(tmp_path, 3)
    text = (tmp_path / "hosts.yml").read_text(encoding="utf-8")
    assert [f"{fleet.PREFIX}{i}" in text for i in (1, 2, 3, 4)] == [True, True, True, False]
    assert (tmp_path / "group_vars").resolve() == (ROOT / "inventory" / "local" / "group_vars").resolve()


def test_a_batch_remembers_when_its_banner_arrived():
    assert [b.opened for b in play_batches(OUTPUT, DEPLOY)] == [100.0, 110.0]


def test_a_batch_s_machine_cpu_is_read_between_the_samples_before_its_banner_and_its_end():
    samples = [(99.9, 1000.0), (105.0, 1008.0), (109.9, 1018.0), (120.0, 1030.0), (130.1, 1050.0)]
    run = Run(rc=0, seconds=40.0, lines=OUTPUT, busy=samples)
    first, second = play_batches(OUTPUT, DEPLOY)
    assert busy_between(samples, first.opened, first.opened + first.seconds) == 18.0
    assert fleet.batch_cpu(run, second) == " machine_cpu_s=12.0 machine_cpu_per_host_s=6.00"


def test_a_run_without_cpu_samples_prints_no_machine_cpu():
    (first, _) = play_batches(OUTPUT, DEPLOY)
    assert busy_between([], 0.0, 1.0) is None
    assert fleet.batch_cpu(Run(rc=0, seconds=1.0, lines=OUTPUT), first) == " machine_cpu_s=n/a"


def test_the_machine_s_busy_seconds_only_grow():
    first = machine_busy_s()
    sum(i * i for i in range(300_000))
    assert machine_busy_s() >= first > 0
