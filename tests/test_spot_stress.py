"""§20.5.2 stress test of bitwise resume: a demo run SIGKILLed from outside at random moments and
relaunched ends with the parameters of an uninterrupted run, bit for bit.

The full procedure (20 uninterrupted runs alternating with 20 runs killed 4 times each) is
``python chapter20/scripts/spot_stress.py``; here one run killed once from outside is compared
with an uninterrupted run computed in this process (tests/conftest.py puts MKL in the same
reproducibility mode as the demo's subprocesses).
"""

from __future__ import annotations

import random

import pytest

from chapter20.demos.resume_stress import StressConfig, run_killed, stress_resume
from chapter20.demos.spot_run import SpotConfig, run_spot_training
from chapter20.training.loop import LoopConfig

FAST = {"steps": 24, "batch": 32}
DEMO = ["--steps", "24", "--checkpoint-every", "3", "--batch", "32"]


@pytest.mark.slow  # test_spot SIGKILLs each phase of a save; notebook 07 kills ranks in torchrun
def test_killed_from_outside_equals_uninterrupted(tmp_path):
    reference = run_spot_training(
        SpotConfig(str(tmp_path / "reference"), **FAST, loop=LoopConfig(checkpoint_every=3))
    )
    # One kill, a random fraction of a step after a random step was logged: mid-step or
    # mid-save (the script also aims kills at start-up); the seed makes the draw repeatable.
    killed = run_killed(
        DEMO, tmp_path / "killed", steps=24, kills=1, rng=random.Random(24), startup_share=0.0
    )
    assert killed.kills and killed.kills[0].startswith("step ")
    assert killed.launches == 2
    assert killed.fingerprint == reference.fingerprint


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"repetitions": 0}, ValueError, "repetitions"),
        ({"repetitions": 1, "kills": -1}, ValueError, "kills"),
        ({"repetitions": 1, "steps": 0}, ValueError, "steps"),
        ({"repetitions": 1, "startup_share": 1.5}, ValueError, "startup_share"),
        ({"repetitions": 1.0}, TypeError, "repetitions"),
    ],
)
def test_stress_config_bad_arguments(kwargs, error, name):
    with pytest.raises(error, match=name):
        StressConfig(**kwargs)


def test_stress_resume_takes_a_stress_config():
    with pytest.raises(TypeError, match="config must be a StressConfig"):
        stress_resume({"repetitions": 1})
