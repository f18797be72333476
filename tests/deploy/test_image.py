"""The container image: the wheel built from exactly what the Dockerfile copies runs every console
script it declares; the image, built and run with podman where it can run here, starts each
command by its first argument and each daemon passes its healthcheck on its own port."""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from config.streams import hash_token
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.helpers import write_destination
from tests.ingest.support import TOKEN, auth, write_stream

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
    comes from the wheel (the retrier imports `auditor.client`: a Dockerfile without `auditor`
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


# --- the image, built and run with podman ------------------------------------------------------

PODMAN = shutil.which("podman")
DEBIAN_BASE = "localhost/hifi-base:bookworm"  # made by deploy/container/debian-base
# its root file system, made once (about two minutes); the test imports it, never makes it
DEBIAN_BASE_TARBALL = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hifi" / "base-bookworm.tar"
)
BASE_IMAGE = os.environ.get("HIFI_IMAGE_BASE", DEBIAN_BASE)  # python:3.11-slim, pulled beforehand
TEST_IMAGE = "localhost/hifi:test"
DAEMONS = ("connector", "retrier", "auditor", "ingest")
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


def podman_flags(verb: str) -> list[str]:
    """The flags this machine's podman needs (deploy/container/podman-flags, as `make image`)."""
    printed = subprocess.run(
        [str(CONTAINER / "podman-flags"), verb], capture_output=True, text=True, check=True
    )
    return printed.stdout.split()


def podman(
    *args: str, check: bool = True, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    assert PODMAN is not None
    return subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, check=check, timeout=timeout_s
    )


@pytest.fixture(scope="module")
def image() -> str:
    """The image built from this checkout's Dockerfile on the Debian base `make image` makes;
    podman's layer cache keeps a rebuild to the layers whose inputs changed."""
    if PODMAN is None:
        pytest.skip("podman is not installed: `make image` installs it (Debian's podman)")
    if podman("image", "exists", BASE_IMAGE, check=False).returncode != 0:
        if BASE_IMAGE != DEBIAN_BASE:
            pytest.skip(f"no base image {BASE_IMAGE}: pull or build it first")
        if not DEBIAN_BASE_TARBALL.is_file() and shutil.which("mmdebstrap") is None:
            pytest.skip("no mmdebstrap to make the Debian base: `make podman` installs it")
        # about two minutes on a new machine (mmdebstrap), while the other workers test on
        subprocess.run([str(CONTAINER / "debian-base"), DEBIAN_BASE], check=True, timeout=900)
    built = podman(
        "build", "--format", "docker", *podman_flags("build"), "--build-arg", f"BASE={BASE_IMAGE}",
        "--tag", TEST_IMAGE, str(ROOT), check=False, timeout_s=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return TEST_IMAGE


def run_image(image: str, *args: str) -> subprocess.CompletedProcess[str]:
    return podman(
        "run", "--rm", *podman_flags("run"), "--network", "none", image, *args, check=False
    )


@pytest.mark.integration
def test_the_image_runs_each_command_by_its_first_argument_as_a_non_root_user(image: str) -> None:
    """The entrypoint runs connector, retrier, auditor, ingest and hifi-tenants by name, as uid 10001,
    points spark-batch to spark-submit, and the image holds no test or demo code."""
    for name in (*DAEMONS, "hifi-tenants"):
        result = run_image(image, name, "--version")
        assert (result.returncode, result.stdout.strip()) == (0, f"{name} {VERSION}"), result.stderr
    spark = run_image(image, "spark-batch", "reconcile")
    assert spark.returncode == 2
    assert "spark-submit" in spark.stderr
    unknown = run_image(image, "bash")
    assert (unknown.returncode, "unknown command 'bash'" in unknown.stderr) == (2, True)
    probe = "import os, importlib.util as u; print(os.getuid(), [u.find_spec(p) for p in ('devstack', 'tests')])"
    inside = podman(
        "run", "--rm", *podman_flags("run"), "--network", "none", "--entrypoint", "python3",
        image, "-c", probe, check=False,
    )  # fmt: skip
    assert inside.stdout.strip() == "10001 [None, None]", inside.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _healthy(container: str, timeout_s: float) -> bool:
    """Run the image's HEALTHCHECK in `container` until it passes (podman's own run of it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        checked = await asyncio.to_thread(podman, "healthcheck", "run", container, check=False)
        if checked.returncode == 0:
            return True
        await asyncio.sleep(0.5)
    return False


@pytest.mark.integration
async def test_each_daemon_in_the_image_is_healthy_on_its_own_port_and_drains_on_stop(
    image: str, kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """Each daemon run from the image against the test broker passes the image's HEALTHCHECK,
    which probes that daemon's ops port (its --metrics-port here), ingest accepts an event on
    its API, and each exits 0 on podman stop."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    write_destination(catalog_dir, unique, url="http://127.0.0.1:9/events", source_topics=[unique])
    streams = tmp_path / "streams"
    streams.mkdir()
    write_stream(streams, "clicks", topic=unique, tokens_sha256=[hash_token(TOKEN)])
    ports = {daemon: _free_port() for daemon in DAEMONS}
    api_port = _free_port()
    flags = {
        "connector": ["--dest", unique],
        "retrier": [],
        "auditor": ["--dest", unique],
        "ingest": ["--port", str(api_port)],
    }
    containers = {daemon: f"hifi-{unique}-{daemon}" for daemon in DAEMONS}
    try:
        for daemon in DAEMONS:
            podman(
                "run", "--detach", "--name", containers[daemon], *podman_flags("run"),
                "--network", "host", "--health-interval", "disable",
                "--env", f"HIFI_KAFKA_BOOTSTRAP={kafka_settings.bootstrap}",
                "--volume", f"{catalog_dir}:/etc/hifi/destinations:ro",
                "--env", "HIFI_STREAMS_DIR=/etc/hifi/streams",
                "--volume", f"{streams}:/etc/hifi/streams:ro",
                image, daemon, *flags[daemon], "--metrics-port", str(ports[daemon]),
            )  # fmt: skip
        for daemon, container in containers.items():
            healthy = await _healthy(container, timeout_s=90)
            logs = podman("logs", "--tail", "20", container, check=False)
            assert healthy, f"{daemon} never healthy: {logs.stdout[-2000:]}{logs.stderr[-2000:]}"
            said = podman("exec", container, "hifi-healthcheck").stdout
            assert said.startswith(f"{daemon} ready: http://127.0.0.1:{ports[daemon]}/readyz ready")
        async with httpx.AsyncClient(timeout=10) as client:
            url = f"http://127.0.0.1:{api_port}/v1/events/clicks"
            posted = await client.post(url, json={"id": unique}, headers=auth())
        assert (posted.status_code, posted.json()["accepted"]) == (200, 1), posted.text
        for container in containers.values():
            podman("stop", "--time", "60", container, timeout_s=90)
            code = podman("inspect", "--format", "{{.State.ExitCode}}", container).stdout.strip()
            assert code == "0", f"{container} exited {code} on SIGTERM"
    finally:
        for container in containers.values():
            podman("rm", "--force", "--time", "0", container, check=False)
