"""§20.4 chapter20/scripts/ddp_demo.py under torchrun: one process, two processes on one node,
and two single-process "nodes" on localhost give the same training run for the same seed and
global batch (float32 rounding: the ranks sum the same terms in another order)."""

import json
import subprocess
import sys
import threading

import pytest

from chapter20.distributed import free_port
from chapter20.paths import repo_root

SCRIPT = "chapter20/scripts/ddp_demo.py"
ARGS = [
    "--steps",
    "6",
    "--batch-size",
    "64",
    "--vocab",
    "2000",
    "--dim",
    "32",
    "--lr",
    "0.02",
    "--warmup",
    "2",
    "--no-progress",
]


def _torchrun(launch: list[str], summary, extra=()) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", *launch, SCRIPT, *ARGS, *extra]
    command += ["--summary-json", str(summary)]
    return subprocess.run(command, cwd=repo_root(), capture_output=True, text=True, timeout=300)


def _summary(result: subprocess.CompletedProcess, path) -> dict:
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp_demo")
    one = _summary(_torchrun(["--nproc_per_node=1"], tmp / "one.json"), tmp / "one.json")
    two = _summary(
        _torchrun(["--nproc_per_node=2"], tmp / "two.json", ["--compress", "fp16"]),
        tmp / "two.json",
    )
    port, results = free_port(), {}

    def node(rank: int) -> None:
        launch = [
            "--nnodes=2",
            f"--node_rank={rank}",
            "--nproc_per_node=1",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
        ]
        results[rank] = _torchrun(launch, tmp / "nodes.json")

    threads = [threading.Thread(target=node, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results[1].returncode == 0, results[1].stderr[-2000:]
    nodes = _summary(results[0], tmp / "nodes.json")
    return one, two, nodes


def test_two_processes_and_two_nodes_run_gloo(runs):
    one, two, nodes = runs
    assert (one["world_size"], one["backend"]) == (1, None)
    assert (two["world_size"], two["backend"]) == (2, "gloo")
    assert (nodes["world_size"], nodes["backend"]) == (2, "gloo")


def test_two_nodes_equal_one_process(runs):
    one, _, nodes = runs
    assert nodes["parameter_abs_sum"] == pytest.approx(one["parameter_abs_sum"], rel=1e-6)
    assert nodes["final_loss"] == pytest.approx(one["final_loss"], rel=1e-5)
    assert one["final_loss"] < one["first_loss"]


def test_fp16_compression_halves_the_bytes_and_stays_close(runs):
    one, two, _ = runs
    assert two["compression_ratio"] == 0.5
    assert two["parameter_abs_sum"] == pytest.approx(one["parameter_abs_sum"], rel=1e-3)
    assert two["final_loss"] == pytest.approx(one["final_loss"], rel=1e-3)


def test_a_global_batch_that_does_not_split_is_refused(tmp_path):
    result = _torchrun(["--nproc_per_node=2"], tmp_path / "x.json", ["--batch-size", "63"])
    assert result.returncode != 0
    assert "must be a multiple of the world size 2" in result.stderr + result.stdout
