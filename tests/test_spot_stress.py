"""§20.5.2 stress test of bitwise resume: a demo run SIGKILLed from outside at random moments and
relaunched ends with the parameters of an uninterrupted run, bit for bit.

The full procedure (20 uninterrupted runs alternating with 20 runs killed 4 times each) is
``python chapter20/scripts/spot_stress.py``; here one run killed once from outside is compared
with an uninterrupted run computed in this process (tests/conftest.py puts MKL in the same
reproducibility mode as the demo's subprocesses).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from chapter20.demos.resume_stress import (
    StressConfig,
    demo_command,
    parse_args,
    run_killed,
    stress_resume,
)
from chapter20.demos.spot_run import DEMO_MODULE, SpotConfig, run_spot_training
from chapter20.training.loop import LoopConfig

FAST = SpotConfig(steps=24, batch=32, loop=LoopConfig(checkpoint_every=3))


@pytest.mark.slow  # test_spot SIGKILLs each phase of a save; notebook 07 kills ranks in torchrun
def test_killed_from_outside_equals_uninterrupted(tmp_path):
    reference = run_spot_training(replace(FAST, output_dir=str(tmp_path / "reference")))
    # One kill, a random fraction of a step after a random step was logged: mid-step or
    # mid-save (the script also aims kills at start-up); the seed makes the draw repeatable.
    killed = run_killed(
        FAST, tmp_path / "killed", kills=1, rng=random.Random(24), startup_share=0.0
    )
    assert killed.kills and killed.kills[0].startswith("step ")
    assert killed.launches == 2
    assert killed.fingerprint == reference.fingerprint


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"repetitions": 0}, ValueError, "repetitions"),
        ({"repetitions": 1, "kills": -1}, ValueError, "kills"),
        ({"repetitions": 1, "kill_seed": -1}, ValueError, "kill_seed"),
        ({"repetitions": 1, "run": {"steps": 24}}, TypeError, "run"),
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


def test_the_command_line_stresses_the_spot_run_its_options_describe():
    """``spot_stress.py`` takes the spot run's options beside its own (but ``--output-dir``:
    each run gets the test's own), and each launch carries exactly that run's options."""
    config = parse_args(["--repetitions", "2", "--kill-seed", "7", "--steps", "24", "--lr", "0.01"])
    assert (config.repetitions, config.kill_seed, config.run.steps) == (2, 7, 24)
    assert config.run.training.lr == 0.01 and config.run.output_dir is None
    command = demo_command(config.run, "somewhere")
    assert command[1:3] == ["-m", DEMO_MODULE]
    assert command[3:] == ["--output-dir", "somewhere", "--steps", "24", "--lr", "0.01"]
    with pytest.raises(SystemExit):
        parse_args(["--output-dir", "x"])  # not an option of the stress test
