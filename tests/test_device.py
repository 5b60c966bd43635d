"""Tests for chapter20.core.device: device choice, distributed backend, autocast dtype, seeding."""

import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from chapter20.core import device as dev

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
needs_no_mps = pytest.mark.skipif(dev._mps_available(), reason="MPS is available here")


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    # The user's own CHAPTER20_DEVICE / CHAPTER20_SCALE must not change what these tests see.
    monkeypatch.delenv(dev.DEVICE_ENV_VAR, raising=False)
    monkeypatch.delenv(dev.SCALE_ENV_VAR, raising=False)


# --- get_device ----------------------------------------------------------------------------


def test_get_device_default_follows_cuda_mps_cpu_order():
    expected = "cuda" if torch.cuda.is_available() else "mps" if dev._mps_available() else "cpu"
    assert dev.get_device().type == expected


@needs_no_cuda
@needs_no_mps
def test_get_device_is_cpu_without_accelerators():
    assert dev.get_device() == torch.device("cpu")


def test_get_device_prefer_cpu():
    assert dev.get_device("cpu") == torch.device("cpu")
    assert dev.get_device(prefer="cpu").type == "cpu"


def test_get_device_prefer_from_env(monkeypatch):
    monkeypatch.setenv(dev.DEVICE_ENV_VAR, "cpu")
    assert dev.get_device() == torch.device("cpu")
    # An explicit argument wins over the environment variable.
    monkeypatch.setenv(dev.DEVICE_ENV_VAR, "not-a-device")
    assert dev.get_device("cpu") == torch.device("cpu")


def test_get_device_bad_env_raises(monkeypatch):
    monkeypatch.setenv(dev.DEVICE_ENV_VAR, "tpu-please")
    with pytest.raises(ValueError, match="tpu-please"):
        dev.get_device()


def test_get_device_empty_env_means_automatic(monkeypatch):
    monkeypatch.setenv(dev.DEVICE_ENV_VAR, "")
    assert dev.get_device() == dev.get_device(None)


@needs_no_cuda
def test_get_device_cuda_unavailable_raises():
    with pytest.raises(ValueError, match="CUDA is not available"):
        dev.get_device("cuda")
    with pytest.raises(ValueError, match="cuda:1"):
        dev.get_device("cuda:1")


@needs_no_mps
def test_get_device_mps_unavailable_raises():
    with pytest.raises(ValueError, match="MPS is not available"):
        dev.get_device("mps")


@pytest.mark.parametrize("garbage", ["gpu0", "banana", "cuda:x"])
def test_get_device_garbage_raises(garbage):
    with pytest.raises(ValueError, match="prefer="):
        dev.get_device(garbage)


def test_get_device_unsupported_type_raises():
    # "meta" is a real torch device type, but nothing in the companion can compute on it.
    with pytest.raises(ValueError, match="device type must be one of"):
        dev.get_device("meta")


# --- backend, autocast dtype, synchronize ----------------------------------------------------


def test_dist_backend():
    assert dev.dist_backend("cpu") == "gloo"
    assert dev.dist_backend(torch.device("cpu")) == "gloo"
    # The string form needs no GPU: the backend is chosen from the device type alone.
    assert dev.dist_backend("cuda") == "nccl"
    assert dev.dist_backend("cuda:3") == "nccl"
    assert dev.dist_backend("mps") == "gloo"
    assert dev.dist_backend() == ("nccl" if dev.get_device().type == "cuda" else "gloo")


def test_autocast_dtype_cpu_is_bf16():
    assert dev.autocast_dtype("cpu") is torch.bfloat16
    assert dev.autocast_dtype(torch.device("cpu")) is torch.bfloat16


def test_autocast_dtype_cpu_works_with_autocast():
    a = torch.randn(4, 4)
    with torch.amp.autocast(device_type="cpu", dtype=dev.autocast_dtype("cpu")):
        out = a @ a
    assert out.dtype == torch.bfloat16


def test_synchronize_cpu_is_a_no_op():
    assert dev.synchronize("cpu") is None


# --- set_seed --------------------------------------------------------------------------------


def _draws():
    return (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist())


def test_set_seed_reproducible():
    dev.set_seed(123)
    first = _draws()
    dev.set_seed(123)
    assert _draws() == first


def test_set_seed_different_seeds_differ():
    dev.set_seed(1)
    one = _draws()
    dev.set_seed(2)
    two = _draws()
    # Each generator on its own must differ, not only the tuple as a whole.
    assert all(a != b for a, b in zip(one, two))


def test_set_seed_accepts_numpy_int_and_bounds():
    dev.set_seed(np.int64(7))
    a = torch.rand(2)
    dev.set_seed(7)
    assert torch.equal(a, torch.rand(2))
    dev.set_seed(0)
    dev.set_seed(2**32 - 1)


@pytest.mark.parametrize("seed", ["1", 1.5, True, None])
def test_set_seed_type_error(seed):
    with pytest.raises(TypeError, match="seed"):
        dev.set_seed(seed)


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_set_seed_value_error(seed):
    with pytest.raises(ValueError, match="seed"):
        dev.set_seed(seed)


# --- environment report ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def environment():
    return dev.describe_environment()


def test_describe_environment_keys(environment):
    required = {
        "python",
        "platform",
        "torch",
        "device",
        "cpu_threads",
        "cpu_count",
        "dist_backend",
        "autocast_dtype",
    }
    required |= {module for module, _ in dev.DEPENDENCIES[1:]}
    assert required <= set(environment)
    assert environment["torch"] == torch.__version__
    assert environment["device"] == str(dev.get_device())
    assert environment["dist_backend"] == dev.dist_backend()
    assert not environment["autocast_dtype"].startswith("torch.")
    assert isinstance(environment["cpu_threads"], int) and environment["cpu_threads"] >= 1
    if torch.cuda.is_available():
        assert {"gpu", "gpu_count", "gpu_memory_gib", "cuda"} <= set(environment)
    else:
        assert "gpu" not in environment


def test_describe_environment_reads_versions_without_importing():
    # Every notebook starts with this report: it must not pay for importing bitsandbytes
    # (torch._dynamo) and gensim only to print their versions.
    code = (
        "import sys; from chapter20.core.device import describe_environment as d; e = d(); "
        "print(e['bitsandbytes'] != e['gensim'], 'bitsandbytes' in sys.modules, "
        "'gensim' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["True", "False", "False"], result.stderr[-2000:]
    assert dev.installed_version("numpy") == np.__version__
    assert dev.installed_version("chapter20-no-such-distribution") is None


def test_check_dependency_present():
    dep = dev.check_dependency("numpy")
    assert dep.ok and dep.version == np.__version__ and dep.name == "numpy"


def test_import_time_compile_is_left_out_only_inside_the_block():
    """bitsandbytes is imported with ``torch.compile`` as the identity (its import-time wrappers
    serve devices without kernels of their own); the real one is back afterwards, even after an
    exception."""
    real = torch.compile

    def kernel(x):
        return x + 1

    with dev._torch_compile_left_out():
        assert torch.compile(kernel) is kernel
        assert torch.compile(dynamic=False)(kernel) is kernel  # the decorator with arguments
    assert torch.compile is real
    with pytest.raises(RuntimeError), dev._torch_compile_left_out():
        raise RuntimeError("an import failed")
    assert torch.compile is real
    assert "bitsandbytes" in dev._COMPILE_AT_IMPORT


def test_check_dependency_missing_does_not_raise():
    dep = dev.check_dependency("chapter20_no_such_module_xyz")
    assert dep.ok is False
    assert dep.version is None
    assert "ModuleNotFoundError" in dep.detail


# --- size knob -------------------------------------------------------------------------------


def test_size_scale_default_is_one(monkeypatch):
    assert dev.size_scale() == 1.0
    monkeypatch.setenv(dev.SCALE_ENV_VAR, "  ")
    assert dev.size_scale() == 1.0
    assert dev.scaled(100) == 100


def test_size_scale_from_env(monkeypatch):
    monkeypatch.setenv(dev.SCALE_ENV_VAR, "16")
    assert dev.size_scale() == 16.0
    assert dev.scaled(100) == 1600
    monkeypatch.setenv(dev.SCALE_ENV_VAR, "0.01")
    assert dev.scaled(100) == 1
    assert dev.scaled(10) == 1  # rounds to 0, kept at the minimum
    assert dev.scaled(10, minimum=4) == 4


@pytest.mark.parametrize("text", ["0", "-2", "nan", "inf", "big"])
def test_size_scale_bad_env(monkeypatch, text):
    monkeypatch.setenv(dev.SCALE_ENV_VAR, text)
    with pytest.raises(ValueError, match=dev.SCALE_ENV_VAR):
        dev.size_scale()


# --- deterministic_mode ----------------------------------------------------------------------


def test_deterministic_mode_sets_and_restores():
    threads = torch.get_num_threads()
    enabled = torch.are_deterministic_algorithms_enabled()
    with dev.deterministic_mode() as mode:
        assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled()
        assert mode.settings["intra-op threads"] == 1
        assert mode.settings["MKL_CBWR"] == os.environ["MKL_CBWR"]
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == enabled
    mode.restore()  # a second restore changes nothing
    assert torch.get_num_threads() == threads


def test_deterministic_mode_keeps_threads_when_asked_and_can_be_off():
    threads = torch.get_num_threads()
    with dev.deterministic_mode(threads=None) as mode:
        assert mode.settings["intra-op threads"] == threads
    with dev.deterministic_mode(enabled=False):
        assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("threads, error", [(0, ValueError), (1.5, TypeError), (True, TypeError)])
def test_deterministic_mode_bad_threads(threads, error):
    with pytest.raises(error, match="threads"):
        dev.deterministic_mode(threads=threads)


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this torch has no MKL")
def test_mkl_runs_in_the_reproducibility_mode_conftest_asked_for():
    # tests/conftest.py sets MKL_CBWR before anything computes; MKL must have taken it.
    expected = os.environ["MKL_CBWR"].upper().replace(" ", "")
    assert dev.mkl_cnr_mode() == expected


def test_the_tests_run_in_the_mkl_mode_deterministic_mode_asks_for():
    # tests/conftest.py writes the mode out (its main process does not import torch): the same.
    assert os.environ["MKL_CBWR"] == dev.MKL_CNR_MODE


def test_environment_line_is_one_short_line(environment):
    line = dev.environment_line()
    assert "\n" not in line and len(line) <= 120
    assert line.startswith(f"device {environment['device']}")
    assert f"torch {torch.__version__}" in line
    assert f"{environment['cpu_count']} CPU cores, {environment['cpu_threads']} threads" in line
    assert environment["platform"] not in line  # no kernel or platform build string
    assert ("(" in line) == torch.cuda.is_available()  # the GPU's name on CUDA only
