"""The systemd units of deploy/systemd/ read as systemd reads them, and a `--root` tree to run them from.

Only what hifi's units use is understood: sections, repeated keys, comments, continued lines,
`Environment=`, `EnvironmentFile=` (`-` for optional), the specifiers `%i %n %d %C %%` and a
plain `ExecStart=`, drop-ins, and what systemd prepares before a start (`StateDirectory=`,
`CacheDirectory=`, `LoadCredential=`); anything else fails loudly rather than being read wrong.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

UNITS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
UNIT_NAMES = ("connector@.service", "retrier.service", "auditor.service", "ingest.service")
INSTALL_PREFIX = "/opt/hifi"
#: The host paths the units name; in a staged tree each lives under its root.
HIFI_PATHS = (INSTALL_PREFIX, "/etc/hifi", "/var/lib/hifi", "/var/cache", "/run/credentials")
SYSTEM_DIR = "etc/systemd/system"
#: The environment systemd gives every service before the unit's own settings.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SPECIFIER = re.compile(r"%(.)")


@dataclass(frozen=True)
class Unit:
    """One unit file: its name and, per section, its `(key, value)` settings in order."""

    name: str
    sections: dict[str, list[tuple[str, str]]]

    @classmethod
    def read(cls, path: Path) -> Unit:
        sections: dict[str, list[tuple[str, str]]] = {}
        current: list[tuple[str, str]] | None = None
        for number, line in _logical_lines(path.read_text()):
            if line.startswith("[") and line.endswith("]"):
                current = sections.setdefault(line[1:-1], [])
            elif current is None or "=" not in line:
                raise ValueError(f"{path}:{number}: not a section or a KEY=VALUE setting: {line!r}")
            else:
                key, value = line.split("=", 1)
                current.append((key.strip(), value.strip()))
        return cls(path.name, sections)

    @classmethod
    def installed(cls, root: Path, name: str, instance: str | None = None) -> Unit:
        """Unit `name` as installed under `root`, with its drop-ins (`NAME.d/*.conf`, and for
        an instance those of `connector@INSTANCE.service.d` after the template's) appended."""
        system = root / SYSTEM_DIR
        unit = cls.read(system / name)
        dirs = [system / f"{name}.d"]
        if instance is not None:
            dirs.append(system / f"{unit.instance(instance)}.d")
        for drop_in in [path for folder in dirs for path in sorted(folder.glob("*.conf"))]:
            for section, settings in cls.read(drop_in).sections.items():
                unit.sections.setdefault(section, []).extend(settings)
        return unit

    def values(self, key: str, section: str = "Service") -> list[str]:
        return [value for name, value in self.sections.get(section, []) if name == key]

    def value(self, key: str, section: str = "Service") -> str:
        """The value of a single-valued `key`: the last one set (a drop-in's over the unit's)."""
        found = self.values(key, section)
        if not found:
            raise KeyError(f"{self.name}: [{section}] {key} is not set")
        return found[-1]

    def instance(self, name: str) -> str:
        """The unit name of instance `name` of a template (`connector@NAME.service`)."""
        return self.name.replace("@.", f"@{name}.") if "@." in self.name else self.name


def read_units() -> dict[str, Unit]:
    return {name: Unit.read(UNITS_DIR / name) for name in UNIT_NAMES}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Non-blank, non-comment lines, a line ending in `\\` joined with the next (with a space)."""
    lines: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if pending is None and (not line or line[0] in "#;"):
            continue
        start, head = pending if pending is not None else (number, "")
        if line.endswith("\\"):
            pending = (start, head + line[:-1] + " ")
            continue
        pending = None
        lines.append((start, head + line))
    return lines


def expand(value: str, unit: Unit, instance: str) -> str:
    """`value` with the specifiers of `unit`'s instance `instance` replaced."""
    known = {
        "i": instance,
        "n": unit.instance(instance),
        "d": f"/run/credentials/{unit.instance(instance)}",
        "C": "/var/cache",
        "%": "%",
    }

    def replace(match: re.Match[str]) -> str:
        if match.group(1) not in known:
            raise ValueError(f"{unit.name}: specifier %{match.group(1)} is not understood here")
        return known[match.group(1)]

    return _SPECIFIER.sub(replace, value)


def rooted(value: str, root: Path) -> str:
    """A host path the units name (or a value starting with one), moved under `root`."""
    for prefix in HIFI_PATHS:
        if value == prefix or value.startswith(prefix + "/"):
            return str(root) + value
    return value


@dataclass(frozen=True)
class Command:
    """What systemd would run for one instance: the command line and its environment."""

    argv: list[str]
    env: dict[str, str]


def service_command(unit: Unit, instance: str, root: Path) -> Command:
    """`ExecStart=` of `unit`'s `instance` with its environment, as systemd builds them
    (`Environment=` first, then each `EnvironmentFile=` in order, later ones winning), with the
    paths the units name moved under the staged `root`."""
    env = {"PATH": BASE_PATH}
    for setting in unit.values("Environment"):
        for assignment in shlex.split(expand(setting, unit, instance)):
            key, value = assignment.split("=", 1)
            env[key] = value
    for setting in unit.values("EnvironmentFile"):
        optional = setting.startswith("-")
        path = Path(rooted(expand(setting.removeprefix("-"), unit, instance), root))
        if optional and not path.exists():
            continue
        env.update(read_env_file(path))
    _set_up(unit, instance, root)
    exec_start = expand(unit.value("ExecStart"), unit, instance)
    if exec_start[:1] in "-@+!:|":
        raise ValueError(f"{unit.name}: ExecStart prefixes are not understood here: {exec_start}")
    argv = [rooted(arg, root) for arg in shlex.split(exec_start)]
    return Command(argv, {key: rooted(value, root) for key, value in env.items()})


def _set_up(unit: Unit, instance: str, root: Path) -> None:
    """What systemd does before it runs the unit: make its state and cache directories and
    copy each `LoadCredential=ID:PATH` to the unit's credentials directory (`%d/ID`)."""
    for key, base in (("StateDirectory", "/var/lib"), ("CacheDirectory", "/var/cache")):
        for setting in unit.values(key):
            for directory in setting.split():
                Path(rooted(f"{base}/{expand(directory, unit, instance)}", root)).mkdir(
                    mode=0o700, parents=True, exist_ok=True
                )
    for setting in unit.values("LoadCredential"):
        credential, source = expand(setting, unit, instance).split(":", 1)
        target = Path(rooted(expand(f"%d/{credential}", unit, instance), root))
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copy(rooted(source, root), target)
        target.chmod(0o400)


def read_env_file(path: Path) -> dict[str, str]:
    """An `EnvironmentFile=`: `KEY=VALUE` lines, `#` and `;` comments, optional quotes."""
    found: dict[str, str] = {}
    for number, line in _logical_lines(path.read_text()):
        key, equals, value = line.partition("=")
        if not equals or not key.strip().isidentifier():
            raise ValueError(f"{path}:{number}: not a KEY=VALUE line: {line!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        found[key.strip()] = value
    return found


def console_scripts() -> list[str]:
    """The names the units run under /opt/hifi/bin: every `ExecStart=` program's file name."""
    names = {Path(shlex.split(unit.value("ExecStart"))[0]).name for unit in read_units().values()}
    return sorted(names)


def stage_root(root: Path, shared_env: str) -> Path:
    """A `--root` tree as the install steps leave it: the console scripts under /opt/hifi/bin
    (wrappers running this venv's), `/etc/hifi/env` holding `shared_env`, the catalog directory,
    the streams directory, the dashboard token, hifi's units in /etc/systemd/system and this
    machine's own units (the targets ours are ordered after) in /usr/lib/systemd/system."""
    scripts = Path(sysconfig.get_path("scripts"))
    bin_dir = root / INSTALL_PREFIX.lstrip("/") / "bin"
    bin_dir.mkdir(parents=True)
    for name in console_scripts():
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(str(scripts / name))} "$@"\n')
        wrapper.chmod(0o755)
    etc = root / "etc" / "hifi"
    (etc / "destinations").mkdir(parents=True)
    (etc / "streams").mkdir()
    (etc / "env").write_text(shared_env)
    (etc / "dashboard-token").write_text("0123456789abcdef0123456789abcdef\n")
    for path in (etc / "env", etc / "dashboard-token"):
        path.chmod(0o600)
    system = root / SYSTEM_DIR
    system.mkdir(parents=True)
    for name in UNIT_NAMES:
        shutil.copy(UNITS_DIR / name, system / name)
    host_units = Path("/usr/lib/systemd/system")
    if host_units.is_dir():
        shutil.copytree(host_units, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    return root
