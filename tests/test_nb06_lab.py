"""§20.4 notebook 06's experiments in one group per world size (``labs.nb06_distributed``): the
jobs run in order on a rank, their results are found by world size and name, the sweep and the
scaling table are assembled from the ranks' results as the single-experiment launches return
them. No process is started here: the group itself is exercised by notebook 06 and by the
launches of ``tests/test_distributed.py``."""

import pytest

from chapter20.labs import nb06_distributed as lab
from chapter20.labs import nb06_stragglers as stragglers
from chapter20.techniques.distributed import jobs_on_rank


def test_jobs_run_in_order_and_are_found_by_world_and_name():
    calls = []
    jobs = {"b": (calls.append, ("first",)), "a": (calls.append, ("second",))}
    assert jobs_on_rank(jobs) == {"b": None, "a": None}
    assert calls == ["first", "second"]
    groups = {2: [{"x": 0}, {"x": 1}], 3: [{"x": 5}, {"x": 6}, {"x": 7}]}
    assert lab.results_of(groups, 3, "x") == [5, 6, 7]


def test_sweep_frame_takes_rank_0s_records_of_every_group():
    record = {"W": 2, "dtype": "float32", "bytes": 4}
    groups = {3: [{"sweep": [{**record, "W": 3}]}, {"sweep": []}], 2: [{"sweep": [record]}, {}]}
    assert lab.sweep_frame(groups)["W"].tolist() == [2, 3]


def test_scaling_table_uses_the_groups_slowest_rank():
    single = {"seconds": 0.2, "times": [0.2, 0.2, 0.2]}
    pair = [{"seconds": 0.1, "times": [0.1] * 3}, {"seconds": 0.15, "times": [0.15] * 3}]
    table = lab.scaling_table(single, pair)
    assert table["speedup"].tolist() == pytest.approx([1.0, 0.2 / 0.15])
    assert table["efficiency"].iloc[1] == pytest.approx(0.2 / 0.15 / 2)


def test_straggler_job_carries_the_overrides():
    function, args = stragglers.straggler_job(steps=3)
    assert function is stragglers.straggler_run_on_rank
    assert args == tuple({**stragglers.STRAGGLER_RUN, "steps": 3}.values())
