"""§20.4 chapter20/scripts/ddp_demo.py under torchrun: two single-process "nodes" on localhost
give the same training run as one process (the demo's ``main`` in this process) for the same
seed and global batch (float32 rounding: the ranks sum the same terms in another order); two
processes of one node (a local group) compress the gradients to fp16. Node 0 is the ``torchrun``
command of the README; node 1 runs the same elastic agent (``elastic_launch``, what torchrun
runs, with torchrun's static rendezvous at node 0's address) in a process of the ranks' fork
server, its worker forked with PyTorch already imported: two interpreters fewer to start."""

import json
import math
import os
import shutil
import subprocess
import sys
import threading

import pytest
from script_process import run_as_main

from chapter20.core.paths import repo_root
from chapter20.techniques.distributed import (
    free_port,
    preloaded_process_context,
    run_local_group,
)

SCRIPT = "chapter20/scripts/ddp_demo.py"
ARGS = [
    "--steps",
    "6",
    "--batch",
    "64",
    "--vocab",
    "2000",
    "--dim",
    "32",
    "--lr",
    "0.02",
    "--warmup-steps",
    "2",
    "--no-progress",
]


def _torchrun(launch: list[str], output_dir, extra=()) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", *launch, SCRIPT, *ARGS, *extra]
    command += ["--output-dir", str(output_dir)]
    return subprocess.run(command, cwd=repo_root(), capture_output=True, text=True, timeout=300)


def _summary(result: subprocess.CompletedProcess, output_dir) -> dict:
    assert result.returncode == 0, result.stderr[-2000:]
    return _read(output_dir)


def _read(output_dir) -> dict:
    """The summary a finished run wrote into its output directory."""
    return json.loads((output_dir / "summary.json").read_text())


def _second_node(port: int, log: str, output_dir: str) -> None:
    """Node 1 of 2: what ``torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1
    --master_addr=127.0.0.1 --master_port=PORT ddp_demo.py`` starts, in this process."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    import chapter20.demos.ddp_run  # noqa: F401  imported once, before the worker is forked

    config = LaunchConfig(min_nodes=2, max_nodes=2, nproc_per_node=1, run_id="none",
                          rdzv_backend="static", rdzv_endpoint=f"127.0.0.1:{port}",
                          rdzv_configs={"rank": 1}, max_restarts=0, monitor_interval=0.05,
                          start_method="fork")  # fmt: skip
    script = str(repo_root() / SCRIPT)
    elastic_launch(config, run_as_main)(script, [*ARGS, "--output-dir", output_dir], log)


def _fp16_on_rank(output_dir: str) -> None:
    """The demo's ``main`` on a rank of a local group, gradients all-reduced in fp16."""
    from chapter20.demos import ddp_run

    ddp_run.main(
        [*ARGS, "--no-report", "--gradient-compression", "fp16", "--output-dir", output_dir]
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from chapter20.demos import ddp_run

    tmp = tmp_path_factory.mktemp("ddp_demo")
    # The two nodes (one process each) run side by side with the rest: most of node 0's launch
    # is interpreters starting, which the work here overlaps. The fp16 run needs no launcher of
    # its own: two ranks of a local group fork with torch already imported.
    results, nodes_port = {}, free_port()

    def launch(name: str, options: list[str]) -> None:
        results[name] = _torchrun(options, tmp / name.split()[0])

    options = ["--nnodes=2", "--node_rank=0", "--nproc_per_node=1",
               "--master_addr=127.0.0.1", f"--master_port={nodes_port}"]  # fmt: skip
    node0 = threading.Thread(target=launch, args=("nodes 0", options))
    node0.start()
    log = tmp / "node1.log"
    node1 = preloaded_process_context().Process(
        target=_second_node, args=(nodes_port, str(log), str(tmp / "node1"))
    )
    node1.start()
    run_local_group(_fp16_on_rank, 2, (str(tmp / "two"),))
    two = _read(tmp / "two")
    # The reference runs here meanwhile, and so does the run of the demo's defaults.
    ddp_run.main([*ARGS, "--no-report", "--output-dir", str(tmp / "one")])
    one = _read(tmp / "one")
    defaults = ddp_run.main(["--no-progress", "--no-report"]).summary
    node0.join()
    node1.join(timeout=300)
    assert node1.exitcode == 0, log.read_text()[-2000:] if log.exists() else "no output"
    nodes = _summary(results["nodes 0"], tmp / "nodes")
    return one, two, nodes, defaults


def test_two_processes_and_two_nodes_run_gloo(runs):
    one, two, nodes, _ = runs
    assert (one["world_size"], one["backend"]) == (1, None)
    assert (two["world_size"], two["backend"]) == (2, "gloo")
    assert (nodes["world_size"], nodes["backend"]) == (2, "gloo")


def test_two_nodes_equal_one_process(runs):
    one, _, nodes, _ = runs
    assert nodes["parameter_abs_sum"] == pytest.approx(one["parameter_abs_sum"], rel=1e-6)
    assert nodes["final_loss"] == pytest.approx(one["final_loss"], rel=1e-5)
    assert one["final_loss"] < one["first_loss"]


def test_fp16_compression_halves_the_bytes_and_stays_close(runs):
    one, two, _, _ = runs
    assert two["compression_ratio"] == 0.5
    # claim C02's count: per step, the hook saw every parameter's gradient once, in fp16
    from chapter20.core.models import BagOfEmbeddingsEncoder, count_parameters

    assert two["allreduce_bytes_per_step"] == 2 * count_parameters(BagOfEmbeddingsEncoder(2000, 32))
    assert one["allreduce_bytes_per_step"] is None  # one process: no all-reduce
    assert two["parameter_abs_sum"] == pytest.approx(one["parameter_abs_sum"], rel=1e-3)
    assert two["final_loss"] == pytest.approx(one["final_loss"], rel=1e-3)


def test_the_default_run_learns(runs):
    """§20.4, issue 34: the demo's defaults end well below the loss of a uniform guess over the
    batch (ln batch) and retrieve held-out next sentences far above chance."""
    summary = runs[3]
    assert summary["uniform_guess_loss"] == pytest.approx(math.log(summary["config"]["batch"]))
    assert summary["final_loss_mean5"] < summary["uniform_guess_loss"] - 1.0
    assert summary["recall_at_10"] > 5 * summary["chance_at_10"]


def test_a_global_batch_that_does_not_split_is_refused(monkeypatch):
    # The check runs first on every rank, before any collective: one rank in-process shows it
    # (a torchrun launch of two processes only to see them refuse cost seconds).
    from chapter20.demos import ddp_run
    from chapter20.training import driver

    config = ddp_run.parse_args([*ARGS, "--batch", "63"])
    monkeypatch.setattr(driver, "group_rank_and_size", lambda group=None: (0, 2))
    with pytest.raises(ValueError, match="must be a multiple of the world size 2"):
        ddp_run.run_ddp_demo(config)


def test_the_demo_refuses_a_bad_flag_in_one_line(capsys):
    from chapter20.demos import ddp_run

    with pytest.raises(SystemExit) as exit_:
        ddp_run.parse_args(["--steps", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and err == ["ddp_demo.py: error: steps must be an int >= 1, got 0"]


SBATCH = "chapter20/scripts/ddp_demo.sbatch"


def test_sbatch_template_is_valid_bash_and_asks_for_no_gpu_by_itself():
    result = subprocess.run(["bash", "-n", SBATCH], cwd=repo_root(), capture_output=True)
    assert result.returncode == 0, result.stderr
    directives = [
        line
        for line in (repo_root() / SBATCH).read_text().splitlines()
        if line.startswith("#SBATCH")
    ]
    assert directives and not any("gpu" in line or "gres" in line for line in directives)


def _slurm_missing() -> str | None:
    """Why a SLURM job cannot run here, or None when a node is up."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "SLURM is not installed (make test-slurm installs and starts it)"
    try:
        states = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        states = []
    if not any(state.startswith(("idle", "mixed")) for state in states):
        return "no SLURM node is up (make test-slurm starts one)"
    return None


@pytest.mark.slurm
def test_sbatch_template_under_slurm_equals_one_process(tmp_path):
    """ddp_demo.sbatch submitted for real: two torchrun tasks on one node rendezvous through
    c10d and train the same run as one process (float32 rounding, as above)."""
    reason = _slurm_missing()
    if reason:
        pytest.skip(reason)
    one = _summary(_torchrun(["--nproc_per_node=1"], tmp_path / "one"), tmp_path / "one")
    slurm, log = tmp_path / "slurm", tmp_path / "job.log"
    command = ["sbatch", "--wait", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2"]
    command += [f"--output={log}", "--time=00:10:00", str(repo_root() / SBATCH), *ARGS]
    command += ["--output-dir", str(slurm)]
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    output = log.read_text() if log.exists() else ""
    assert result.returncode == 0, result.stderr + output[-3000:]
    assert "2 torchrun task(s) x 1 process(es)" in output
    job = _read(slurm)
    assert (job["world_size"], job["backend"]) == (2, "gloo")
    assert job["parameter_abs_sum"] == pytest.approx(one["parameter_abs_sum"], rel=1e-6)
    assert job["final_loss"] == pytest.approx(one["final_loss"], rel=1e-5)


@pytest.mark.slurm
def test_sbatch_template_runs_the_capstone_under_slurm(tmp_path):
    """JOB=train: the same template runs ``chapter20 train`` (§20.6) as two SLURM tasks, and the
    run ends bitwise where the same run under plain torchrun ends (deterministic mode)."""
    reason = _slurm_missing()
    if reason:
        pytest.skip(reason)
    tiny = ["--dim", "32", "--steps", "6", "--batch", "32", "--eval-every", "3",
            "--eval-pairs", "100", "--checkpoint-every", "2", "--warmup-steps", "2",
            "--no-progress", "--no-baselines"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    plain = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
             "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{free_port()}",
             str(repo_root() / "chapter20" / "scripts" / "train.py"), *tiny,
             "--output-dir", str(tmp_path / "torchrun")]  # fmt: skip
    done = subprocess.run(plain, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = tmp_path / "job.log"
    command = ["sbatch", "--wait", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2",
               f"--output={log}", "--time=00:10:00", str(repo_root() / SBATCH), *tiny,
               "--output-dir", str(tmp_path / "slurm")]  # fmt: skip
    env = {**env, "PYTHON": sys.executable, "JOB": "train"}
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    output = log.read_text() if log.exists() else ""
    assert result.returncode == 0, result.stderr + output[-3000:]
    assert "2 torchrun task(s) x 1 process(es)" in output
    job = json.loads((tmp_path / "slurm" / "summary.json").read_text())
    reference = json.loads((tmp_path / "torchrun" / "summary.json").read_text())
    assert (job["world_size"], job["steps"]) == (2, 6)
    assert job["fingerprint"] == reference["fingerprint"]


def test_a_run_the_model_cannot_take_is_one_line_and_exit_status_2(capsys):
    """A technique the demo's encoder cannot take (its EmbeddingBag table cannot be sharded) is
    refused by the driver before the first step: one line on stderr, exit status 2."""
    from chapter20.demos import ddp_run

    with pytest.raises(SystemExit) as exit_:
        ddp_run.main([*ARGS, "--sharded-table"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("ddp_demo.py: error: sharded_table needs an encoder holding")
