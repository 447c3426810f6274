"""The canary stop's rule (plugin_utils/_outcome.stopped_by, filter kdtree_stopped_by): the hosts of
earlier batches whose run failed, whether Ansible removed them (failed) or they ended with a failed
outcome (deferred failures); hosts of the current batch never count; odd input is refused."""

from __future__ import annotations

import pytest
from ansible_collections.kdtree.fleet.plugins.filter import outcome as outcome_filter
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _outcome as outcome

ALL = ["h1", "h2", "h3", "h4"]
FAILED = {"play": "deploy", "result": "failed", "msg": "kdtree deploy FAILED on h1"}
STOPPED = {"play": "deploy", "result": "stopped", "msg": "kdtree deploy: not deploying to h2"}


def test_a_host_that_ended_with_a_failed_outcome_stops_the_later_batches():
    # Ansible's next batch forgets an ended host: it is active again, only its outcome says it failed
    assert outcome.stopped_by(ALL, ALL, ["h2", "h3"], {"h1": FAILED}) == ["h1"]


def test_a_host_ansible_removed_from_the_play_stops_the_later_batches():
    assert outcome.stopped_by(ALL, ["h2", "h3", "h4"], ["h4"], {}) == ["h1"]


def test_hosts_of_the_current_batch_and_stopped_hosts_do_not_count():
    assert outcome.stopped_by(ALL, ["h2", "h3", "h4"], ["h1", "h2"], {"h2": FAILED}) == []
    # a stopped host did not fail: the failed one it names already stops the rest
    assert outcome.stopped_by(ALL, ALL, ["h3"], {"h1": FAILED, "h2": STOPPED}) == ["h1"]
    assert outcome.stopped_by(ALL, ALL, ["h3"], {"h1": {}, "h2": None, "h4": {"result": "ok"}}) == []


def test_every_failed_host_is_named_in_the_plays_order():
    assert outcome.stopped_by(ALL, ["h1", "h3", "h4"], ["h4"], {"h3": FAILED}) == ["h2", "h3"]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("h1", ALL, ALL, {}), "ansible_play_hosts_all must be a list"),
        ((ALL, [1], ALL, {}), "ansible_play_hosts must be a list"),
        ((ALL, ALL, ALL, []), "outcomes must map"),
        ((ALL, ALL, ["h2"], {"h1": "failed"}), "the outcome of h1 must be a dict"),
    ],
)
def test_input_the_rule_cannot_read_is_refused(args, match):
    with pytest.raises(outcome.OutcomeInputError, match=match):
        outcome.stopped_by(*args)


def test_the_filter_hands_the_plays_facts_to_the_rule_and_names_itself_in_a_refusal():
    assert outcome_filter.kdtree_stopped_by(ALL, ALL, ["h2"], {"h1": FAILED}) == ["h1"]
    with pytest.raises(Exception, match="kdtree_stopped_by: the outcome of h1 must be a dict"):
        outcome_filter.kdtree_stopped_by(ALL, ALL, ["h2"], {"h1": "x"})
