"""Local state files: where a process keeps them, and replacing one atomically."""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_ENV_VAR = "HIFI_STATE_DIR"


def state_dir() -> Path:
    """`HIFI_STATE_DIR`, else `~/.local/state/hifi`."""
    from_env = os.environ.get(STATE_DIR_ENV_VAR)
    return Path(from_env) if from_env else Path.home() / ".local" / "state" / "hifi"


def replace_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to `path` whole or not at all: a temporary file in the same directory,
    flushed and fsync'ed, renamed over `path`, and the directory fsync'ed. A crash leaves the
    old file or the new one. `mode` is the new file's permissions (0o600 for secrets). Raises
    `OSError`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with open(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)  # an older temporary file keeps its mode through O_CREAT
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
