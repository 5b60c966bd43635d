"""The package as a reader installs it (issue 20): a wheel with its data inside, installed into
a fresh environment, run from a directory outside the checkout.

The fresh environment has no pip and no dependencies of its own: it reuses the packages of the
environment running the tests (torch and the rest) through a ``.pth`` file, which Python reads
as plain paths. The test environment's editable install of chapter20 is not active there (that
needs its own ``.pth`` to be processed), so the only chapter20 it can import is the wheel's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from chapter20.core.paths import repo_root


def _run(command: list[str], cwd: Path, env: dict | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the sources (the checkout stays free of build output)."""
    root, tmp = repo_root(), tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(root / "chapter20", source / "chapter20", ignore=ignore)
    shutil.copytree(root / "data", source / "data", ignore=ignore)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    _run([*command, "--no-index", "-q", "-w", str(tmp / "dist"), str(source)], cwd=tmp)
    (built,) = (tmp / "dist").glob("chapter20-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict]:
    """A fresh venv with the wheel installed; its bin/ folder and the environment to run it."""
    tmp = tmp_path_factory.mktemp("venv")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    site = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp
    )
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site.strip(), "reuse-test-environment.pth").write_text("\n".join(sorted(ours)) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q"]
    _run([*pip, "--no-index", str(wheel)], cwd=tmp)
    outside = tmp / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CHAPTER20_RESULTS=str(tmp / "results"), CHAPTER20_CACHE=str(tmp / "cache"))
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return outside, env


def test_the_wheel_holds_every_data_file_the_sbatch_template_and_the_c_kernels(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    root, package = repo_root(), repo_root() / "chapter20"
    data = [p for p in (root / "data").iterdir() if p.is_file()]
    assert data
    for path in data:  # data/ at the top of the repository ships as chapter20/data/
        assert f"chapter20/data/{path.name}" in names
    shipped = list((package / "scripts").glob("*.sbatch"))
    shipped += list(package.rglob("*.c"))  # word2vec's fused kernels, compiled where they run
    assert len(shipped) >= 2
    for path in shipped:
        assert path.relative_to(root).as_posix() in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert (
        "chapter20 = chapter20.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


@pytest.fixture(scope="module")
def installed_python(installed) -> list[str]:
    """What one process of the installed package prints outside the checkout (one start-up of
    torch and the rest serves both tests below): ``chapter20 env`` and ``chapter20 audit``
    (the ``main`` that the console script calls, and each exit status), then where the package
    and its data come from and whether its C kernels compile there."""
    cwd, env = installed
    code = (
        "import chapter20, chapter20.core.paths as p; from chapter20.cli.main import main; "
        "status = main(['env']); print('env exit status', status); "
        "status = main(['audit']); print('audit exit status', status); "
        "from chapter20.cost import load_catalog; from chapter20.core.claims import load_claims; "
        "print(chapter20.__file__); print(p.repo_root()); print(len(load_catalog())); "
        "print(len(load_claims())); from chapter20.word2vec.fused import load_kernels; "
        "print(load_kernels() is not None or not __import__('shutil').which('cc'))"
    )
    return _run(["python", "-c", code], cwd, env).splitlines()


def test_installed_commands_run_outside_the_checkout(installed, installed_python):
    cwd, env = installed
    assert "env" in _run(["chapter20", "--help"], cwd, env)  # the console script
    env_ends = installed_python.index("env exit status 0")
    assert installed_python[env_ends - 1] == "all dependencies OK", installed_python[:env_ends]
    audit = "\n".join(installed_python[env_ends : installed_python.index("audit exit status 0")])
    assert "C30" in audit and ": 0 read from" in audit  # nothing measured by a run here


def test_installed_package_reads_its_data_from_the_wheel(installed_python):
    where, root, prices, claims, kernels = installed_python[-5:]
    assert kernels == "True"  # the C source ships in the wheel and compiles there
    assert str(repo_root()) not in where and "site-packages" in where
    assert root == "None"  # not a checkout: results go to the cache, data come from the wheel
    assert int(prices) >= 3 and int(claims) == 30


def test_pyproject_lists_every_folder_of_the_package():
    """pyproject.toml names the package's folders (it maps data/ into the package, which
    setuptools' automatic discovery cannot express): a new folder must be added there, or the
    wheel would silently lack it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    root = repo_root()
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {"chapter20"} | {
        "chapter20." + p.name
        for p in (root / "chapter20").iterdir()
        if p.is_dir() and any(p.glob("*.py"))
    }
    assert listed == folders | {"chapter20.data"}
