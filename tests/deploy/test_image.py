"""The container image, built and run with podman where it can run here: it starts each command by
its first argument, and docs/deploy-container.md's commands, run as written (only its placeholders
set), build it, start every daemon healthy on its port, the ops ports on loopback alone in the
host's network, and stop each drained."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from config.streams import hash_token
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.deploy.doc_commands import Block, blocks
from tests.deploy.podman_store import PodmanStore, listening
from tests.helpers import write_destination
from tests.ingest.support import TOKEN, auth, write_stream

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "deploy-container.md"
VERSION: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
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
#: The page's placeholders: the names its first `sh` block sets, and nothing else is replaced.
PLACEHOLDERS = ("IMAGE", "BASE", "CONF")
#: What the page's Run block starts in the host's network: container, its ops port.
DOCUMENTED = {
    "hifi-connector-tvinsight": 9400,
    "hifi-connector-billing": 9404,
    "hifi-retrier": 9401,
    "hifi-auditor": 9402,
    "hifi-ingest": 9403,
}
INGEST_API_PORT = 8080


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


def page_blocks(heading: str, lang: str = "sh") -> list[Block]:
    return [block for block in blocks(PAGE) if (block.heading, block.lang) == (heading, lang)]


def placeholders(**values: str) -> str:
    """The page's placeholder block with the test's values: it must set exactly PLACEHOLDERS."""
    first = next(block for block in blocks(PAGE) if block.lang == "sh")
    names = [line.partition("=")[0] for line in first.text.splitlines()]
    assert tuple(names) == PLACEHOLDERS == tuple(values), first.text
    return "".join(f"{name}={values[name]}\n" for name in PLACEHOLDERS)


def run_as_written(
    block: str, settings: str, env: dict[str, str] | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """A block of the page run by sh from the checkout, after the placeholders' `settings`."""
    return subprocess.run(
        ["/bin/sh", "-eu", "-c", settings + block],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


#: The headings whose blocks the tests here run, in the page's order (the placeholders' first).
RUN_HERE = ["Container", "Build", "Run", "Stop", "Healthcheck"]


def test_every_block_the_page_marks_to_run_is_run_here() -> None:
    """The page's `sh` and `console` blocks are the placeholders and one block under each of
    Build, Run, Stop and Healthcheck, which the tests here run: a block marked to run anywhere
    else fails here until a test runs it."""
    marked = [block.heading for block in blocks(PAGE) if block.lang in ("sh", "console")]
    assert marked == RUN_HERE


@pytest.fixture(scope="module")
def image() -> str:
    """The image built by the page's own build command on the Debian base `make image` makes;
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
    (build,) = page_blocks("Build")
    settings = placeholders(IMAGE=TEST_IMAGE, BASE=BASE_IMAGE, CONF="/nonexistent")
    built = run_as_written(build.text, settings, timeout_s=600)
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


@pytest.fixture
def store(image: str, tmp_path: Path) -> Iterator[PodmanStore]:
    """A podman store of this test's own, reading the image from the host's: the page's names
    (containers, volumes, the secret) meet no other run's and are removed after."""
    private = PodmanStore.beside(tmp_path / "podman")
    try:
        yield private
    finally:
        private.remove_all()


def _stage_conf(conf: Path, bootstrap: str, topic: str) -> None:
    """$CONF as the page describes it: the env file, the dashboard token, two destinations of
    the catalog on `topic` and ingest's stream `clicks`."""
    for folder in ("destinations", "streams"):
        (conf / folder).mkdir(parents=True)
    (conf / "env").write_text(f"HIFI_KAFKA_BOOTSTRAP={bootstrap}\nHIFI_AUDIT_TOPIC={topic}.audit\n")
    (conf / "dashboard-token").write_text("0123456789abcdef0123456789abcdef\n")
    for path in (conf / "env", conf / "dashboard-token"):
        path.chmod(0o600)
    for name in ("tvinsight", "billing"):
        url = "http://127.0.0.1:9/events"
        write_destination(conf / "destinations", name, url=url, source_topics=[topic])
    write_stream(conf / "streams", "clicks", topic=topic, tokens_sha256=[hash_token(TOKEN)])


async def _healthy(store: PodmanStore, container: str, timeout_s: float) -> bool:
    """Run the image's HEALTHCHECK in `container` until it passes (podman's own run of it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        checked = await asyncio.to_thread(store.podman, "healthcheck", "run", container)
        if checked.returncode == 0:
            return True
        await asyncio.sleep(0.5)
    return False


@pytest.mark.integration
async def test_the_documented_commands_run_as_written(
    store: PodmanStore, kafka_settings: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    """The page's Run block, as written, starts five daemons in the host's network that each pass
    the image's HEALTHCHECK on their own port (the second connector's from --metrics-port), with
    every ops port on loopback alone (ingest's API on every address); its healthcheck lines are
    what the daemons print, ingest accepts an event, and its Stop block drains each to exit 0."""
    busy = [port for port in (*DOCUMENTED.values(), INGEST_API_PORT) if listening(port)]
    assert not busy, f"ports {busy} in use here: the page's commands use the default ports"
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    conf = tmp_path / "conf"
    _stage_conf(conf, kafka_settings.bootstrap, unique)
    settings = placeholders(IMAGE=TEST_IMAGE, BASE=BASE_IMAGE, CONF=str(conf))
    (run,) = page_blocks("Run")
    started = run_as_written(run.text, settings, store.env)
    assert started.returncode == 0, started.stderr[-3000:]
    for container in DOCUMENTED:
        healthy = await _healthy(store, container, timeout_s=90)
        logs = store.podman("logs", "--tail", "20", container)
        assert healthy, f"{container} never healthy: {logs.stdout[-2000:]}{logs.stderr[-2000:]}"
    bound = store.podman("exec", "hifi-ingest", "cat", "/proc/net/tcp", "/proc/net/tcp6").stdout
    for port in DOCUMENTED.values():
        assert listening(port, bound) == {"127.0.0.1"}, f"ops port {port}: {listening(port, bound)}"
    assert listening(INGEST_API_PORT, bound) == {"0.0.0.0"}
    (console,) = page_blocks("Healthcheck", "console")
    for command, output in console.console():
        said = run_as_written(command, settings, store.env)
        assert (said.returncode, said.stdout.strip()) == (0, output), said.stderr
    async with httpx.AsyncClient(timeout=10) as client:
        url = f"http://127.0.0.1:{INGEST_API_PORT}/v1/events/clicks"
        posted = await client.post(url, json={"id": unique}, headers=auth())
    assert (posted.status_code, posted.json()["accepted"]) == (200, 1), posted.text
    (stop,) = page_blocks("Stop")
    stopped = run_as_written(stop.text, settings, store.env)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    for container in DOCUMENTED:
        code = store.podman("inspect", "--format", "{{.State.ExitCode}}", container).stdout
        assert code.strip() == "0", f"{container} exited {code.strip()} on SIGTERM"
