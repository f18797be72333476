"""The container image's contents, without podman: the wheel built from exactly what the
Dockerfile copies runs every console script it declares, and the entrypoint refuses what it does
not run (tests/deploy/test_image.py builds and runs the image itself)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS: dict[str, str] = PYPROJECT["project"]["scripts"]  # name -> "module:function"
VERSION: str = PYPROJECT["project"]["version"]
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")  # as .dockerignore


@dataclass(frozen=True, slots=True)
class Copy:
    """One COPY instruction: its stage, its sources (in the build context unless `from_stage`)."""

    stage: str
    sources: tuple[str, ...]
    target: str
    from_stage: str | None


def dockerfile_lines(text: str) -> Iterator[tuple[str, list[str]]]:
    """Each instruction of a Dockerfile, continuation lines joined: (KEYWORD, its words)."""
    logical = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        keyword, _, rest = (logical + stripped).partition(" ")
        logical = ""
        yield keyword.upper(), shlex.split(rest)


def copies(text: str) -> list[Copy]:
    """The Dockerfile's COPY instructions, with the stage each belongs to."""
    found: list[Copy] = []
    stage = ""
    for keyword, words in dockerfile_lines(text):
        if keyword == "FROM":
            stage = words[2] if len(words) == 3 and words[1].upper() == "AS" else f"#{words[0]}"
        elif keyword == "COPY":
            flags = dict(word[2:].partition("=")[::2] for word in words if word.startswith("--"))
            paths = [word for word in words if not word.startswith("--")]
            found.append(Copy(stage, tuple(paths[:-1]), paths[-1], flags.get("from")))
    return found


def wheel_inputs(text: str) -> list[Copy]:
    """The COPYs from the build context into the stage named `build`, which builds the wheel."""
    return [copy for copy in copies(text) if copy.stage == "build" and copy.from_stage is None]


def stage_sources(text: str, tree: Path) -> Path:
    """Copy what the build stage copies, as it copies it, into `tree`; the directory to build."""
    for copy in wheel_inputs(text):
        for source in copy.sources:
            origin = ROOT / source
            target = tree / copy.target
            if copy.target.endswith("/") or len(copy.sources) > 1:
                target = target / origin.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=_IGNORED)
            else:
                shutil.copy2(origin, target)
    return tree


def test_the_build_stage_copies_the_packages_and_the_build_files() -> None:
    """The parser reads the wheel's inputs from the Dockerfile: the build files and every package."""
    sources = {source for copy in wheel_inputs(DOCKERFILE.read_text()) for source in copy.sources}
    assert {"pyproject.toml", "README.md", "hifi", "auditor"} <= sources
    assert not sources & {"devstack", "tests", "bench", "chaos"}


def test_dockerignore_admits_every_path_the_dockerfile_copies() -> None:
    """The build context (.dockerignore: everything out, then each copied path back in) holds
    every path a COPY reads from it, so a new COPY cannot miss its file in the context."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    admitted = {line[1:] for line in lines if line.startswith("!")}
    assert "*" in lines
    for copy in copies(DOCKERFILE.read_text()):
        if copy.from_stage is None:
            for source in copy.sources:
                parents = {str(parent) for parent in Path(source).parents} | {source}
                assert parents & admitted, f"{source} is copied but .dockerignore leaves it out"


def _setuptools_builds_hifi() -> bool:
    try:
        major = int(importlib.metadata.version("setuptools").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return False
    return major >= 77


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hifi's wheel, built offline from exactly the paths the Dockerfile's build stage copies."""
    work = tmp_path_factory.mktemp("image-wheel")
    source = stage_sources(DOCKERFILE.read_text(), work / "src")
    out = work / "dist"
    # offline with this environment's setuptools when it can build hifi (an SPDX `license`
    # needs 77), else in pip's isolated build environment, from the index or pip's cache
    offline = ["--no-build-isolation", "--no-index"] if _setuptools_builds_hifi() else []
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *offline]
    subprocess.run([*pip_wheel, "--wheel-dir", str(out), str(source)], check=True, cwd=work)
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the wheel's own files; the dependencies are read from this
    test's environment through a .pth file (its site-packages only: that path file does not
    run the checkout's editable install, so hifi's packages come from the wheel alone)."""
    env_dir = tmp_path_factory.mktemp("image-venv") / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = env_dir / "lib" / version / "site-packages"
    dependencies = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site_packages / "zz-hifi-dependencies.pth").write_text("\n".join(sorted(dependencies)) + "\n")
    pip_install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    subprocess.run([*pip_install, "--no-deps", "--no-index", str(wheel)], check=True)
    return env_dir


def _clean_env() -> dict[str, str]:
    """This environment without what would put the checkout on a child's import path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


@pytest.mark.integration
def test_every_console_script_of_the_wheel_answers_its_version(
    wheel_venv: Path, tmp_path: Path
) -> None:
    """Each console script the wheel declares starts from the wheel's files and prints its
    version (a package the Dockerfile forgets fails here with ModuleNotFoundError)."""
    for name in SCRIPTS:
        result = subprocess.run(
            [str(wheel_venv / "bin" / name), "--version"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=_clean_env(),
            check=False,
        )
        assert (result.returncode, result.stdout.strip()) == (0, f"{name} {VERSION}"), result.stderr


_IMPORT_EACH = """
import importlib, sys
outside = []
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    if not module.__file__.startswith(sys.prefix):
        outside.append(name)
print(" ".join(outside))
"""


@pytest.mark.integration
def test_every_module_of_the_wheel_imports_from_the_wheel(
    wheel: Path, wheel_venv: Path, tmp_path: Path
) -> None:
    """Each module the wheel holds imports in the fresh venv, and every hifi module it pulls in
    comes from the wheel (the retrier imports `hifi.accounting.client`: a Dockerfile without `auditor`
    fails here even where `--version` answers before importing it)."""
    with zipfile.ZipFile(wheel) as archive:
        files = [name for name in archive.namelist() if name.endswith(".py")]
    modules = [
        name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for name in files
        if not name.endswith("__main__.py")  # runs its command when imported
    ]
    result = subprocess.run(
        [str(wheel_venv / "bin" / "python"), "-c", _IMPORT_EACH, *modules],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "", f"imported from outside the wheel: {result.stdout}"


@pytest.mark.integration
def test_every_console_script_in_pyproject_has_its_module_in_the_wheel(wheel: Path) -> None:
    """The wheel declares exactly pyproject's console scripts and holds the module of each."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = (name for name in names if name.endswith(".dist-info/entry_points.txt"))
        declared = archive.read(entry_points).decode()
    for script, target in SCRIPTS.items():
        assert f"{script} = {target}" in declared
        module = target.partition(":")[0].replace(".", "/")
        assert {f"{module}.py", f"{module}/__init__.py"} & names, f"{script}: {module} missing"
    for package in ("devstack/", "tests/", "bench/", "chaos/"):
        assert not any(name.startswith(package) for name in names), f"{package} in the wheel"


CONTAINER = ROOT / "deploy" / "container"


@pytest.mark.integration
def test_the_entrypoint_refuses_what_it_does_not_run_with_one_line_and_exit_2() -> None:
    """Without the image too: no command, an unknown one and spark-batch exit 2 with one line;
    `--help` lists the commands and exits 0."""

    def entrypoint(*args: str) -> tuple[int, str, str]:
        done = subprocess.run(
            ["/bin/sh", str(CONTAINER / "entrypoint"), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.returncode, done.stdout.strip(), done.stderr.strip()

    code, out, _ = entrypoint("--help")
    assert (code, out.startswith("usage: IMAGE connector|retrier|auditor|ingest|hifi-tenants")) == (
        0,
        True,
    )
    assert entrypoint()[0] == 2
    code, _, err = entrypoint("spark-batch", "reconcile")
    assert (code, "spark-submit" in err, err.count("\n")) == (2, True, 0)
    code, _, err = entrypoint("sh", "-c", "id")
    assert (code, err) == (
        2,
        "hifi image: unknown command 'sh'; one of connector, retrier, auditor, ingest, hifi-tenants",
    )
