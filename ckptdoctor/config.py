"""``[tool.ckptdoctor]`` in the nearest ``pyproject.toml`` above the working directory, or a
``ckptdoctor.toml`` there: settings the command line does not give (the command line wins)."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptdoctor.errors import InvalidValue
from ckptdoctor.model import Finding, Role, Severity, detached
from ckptdoctor.readers.trust import Trusted, trust_refusal
from ckptdoctor.regular import read_regular
from ckptdoctor.render import named
from ckptdoctor.rules.context import Thresholds
from ckptdoctor.units import parse_size

if TYPE_CHECKING:
    from ckptdoctor.planners.retention import PruneSettings
    from ckptdoctor.rules.rule import Rule

PRUNE_KEYS = frozenset(
    {
        "keep-last",
        "keep-best",
        "metric",
        "mode",
        "keep-every",
        "keep-within",
        "keep",
        "min-age",
        "metrics-file",
        "verify",
        "max-runs",
        "abort-uploads",
    }
)


class ConfigError(InvalidValue):
    """A configuration file that cannot be used (exit 2, naming the file and key)."""


TOP_KEYS = frozenset(
    {
        "select",
        "ignore",
        "fail-on",
        "format",
        "severity",
        "thresholds",
        "min-age",
        "prune",
        "roles",
        "max-download",
        "trusted-globals",
        "ray",
    }
)
HINTED_ROLES = ("model", "optimizer", "scheduler")
THRESHOLD_KEYS = {"undersized": "undersized", "oversized": "oversized", "optimizer-margin": "optimizer_margin", "min-peers": "min_peers"}
SEVERITIES = ("error", "warning", "info")
ENVIRONMENT = {
    "CKPTDOCTOR_FORMAT": "format",
    "CKPTDOCTOR_FAIL_ON": "fail-on",
    "CKPTDOCTOR_SELECT": "select",
    "CKPTDOCTOR_IGNORE": "ignore",
    "CKPTDOCTOR_MAX_DOWNLOAD": "max-download",
    "CKPTDOCTOR_TRUSTED_GLOBALS": "trusted-globals",
    "CKPTDOCTOR_RAY": "ray",
}
"""Environment twins of settings (pip-audit's pattern): between the command line and the file."""


MAX_DOWNLOAD = 2**30
"""``max-download``'s default: 1 GiB."""


@dataclass(frozen=True)
class Settings:
    """What the command line does not say, from the environment and the configuration file."""

    select: tuple[str, ...] = ()
    """Rule codes, code prefixes (``CKD1``) or names to report; empty: all."""
    ignore: tuple[str, ...] = ()
    fail_on: str | None = None
    format: str | None = None
    severity: Mapping[str, Severity] = field(default_factory=dict)
    """Per-rule severity overrides, by code."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    min_age: str | None = None
    roles: Mapping[str, Role] = field(default_factory=dict)
    """Name prefixes of a project's own checkpointers and the role each holds (``ema = "model"``)."""
    max_download: int = MAX_DOWNLOAD
    """Bytes ``verify`` reads from object stores without asking (egress costs money)."""
    trusted_globals: Trusted = field(default_factory=Trusted)
    """Classes the user declared trusted (``trusted-globals``, as torch's ``add_safe_globals``):
    a pickle that needs only them and harmless globals is CKD402, not CKD401."""
    ray: str | None = None
    """The Ray cluster ``verify --deep`` fans its ranges out over (``auto``, or an address); None
    or ``off``: read here."""
    source: str | None = None
    """The file the settings came from, if any."""
    prune_table: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """``[tool.ckptdoctor.prune]`` as read: :meth:`prune` checks it where a prune or a disk check
    uses it (a table no other command reads does not stop them)."""

    def prune(self) -> PruneSettings:
        """The ``[tool.ckptdoctor.prune]`` table (``[prune]`` of ``ckptdoctor.toml``), checked:
        ConfigError names the file and an unknown key or a value it cannot use."""
        if not isinstance(self.prune_table, dict):
            raise ConfigError(f"{self.source}: [tool.ckptdoctor.prune] must be a table")
        unknown = sorted(set(self.prune_table) - PRUNE_KEYS)
        if unknown:
            raise ConfigError(
                f"{self.source}: unknown key {unknown[0]!r} in [tool.ckptdoctor.prune] (known: {', '.join(sorted(PRUNE_KEYS))})"
            )
        # the retention planner loads every layout: only a prune or a disk check asks for it
        from ckptdoctor.planners.retention import PolicyError, PruneSettings

        try:
            return PruneSettings.read(self.prune_table)
        except PolicyError as error:
            raise ConfigError(f"{self.source}: [tool.ckptdoctor.prune] {error}") from error

    def apply(self, findings: tuple[Finding, ...], select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> tuple[Finding, ...]:
        """``findings`` as configured: only the selected rules, none of the ignored ones (the
        command line's ``select`` replaces the file's, its ``ignore`` adds to it), severities
        overridden."""
        chosen = select or self.select
        dropped = (*self.ignore, *ignore)
        kept = []
        for finding in findings:
            if chosen and not any(_matches(finding.code, key) for key in chosen):
                continue
            # a finding that stands for others (CKD117) goes with them all, as it stands for nothing then
            if any(_matches(code, key) for code in (finding.code,) for key in dropped) or (
                finding.stands_for and all(any(_matches(code, key) for key in dropped) for code in finding.stands_for)
            ):
                continue
            override = self.severity.get(finding.code)
            kept.append(dataclasses.replace(finding, severity=override) if override and override is not finding.severity else finding)
        return _as_severe_as_their_parts(kept, frozenset(self.severity))


def _as_severe_as_their_parts(findings: list[Finding], overridden: frozenset[str]) -> tuple[Finding, ...]:
    """The findings that stand for others (CKD117) and their parts, kept together: one is as severe
    as the most severe of its parts where its own severity is not configured (lowering CKD101
    lowers the interrupted save that is only that), and no part is more severe than one whose
    severity is (a configured CKD117 bounds what it stands for: the exit code follows the count).
    A part whose finding is left out stands on its own: it names none (``part_of``)."""
    parents = {(f.run, f.code, f.index): f for f in findings if f.stands_for}
    worst: dict[tuple[str | None, str, int | None], Severity] = {}
    for finding in findings:
        if finding.part_of is not None:
            key = (finding.run, *finding.part_of)
            worst[key] = max(worst.get(key, finding.severity), finding.severity, key=lambda level: level.rank)
    kept = []
    for finding in findings:
        key = (finding.run, finding.code, finding.index)
        if finding.stands_for and finding.code not in overridden and key in worst:
            finding = dataclasses.replace(finding, severity=worst[key])
        elif (
            finding.part_of is not None
            and (parent := parents.get((finding.run, *finding.part_of))) is not None
            and parent.code in overridden
            and finding.severity.rank > parent.severity.rank
        ):
            finding = dataclasses.replace(finding, severity=parent.severity)
        kept.append(finding)
    return detached(kept)


def _matches(code: str, key: str) -> bool:
    """Whether a rule ``key`` (a code, a code's prefix, or a name) names the rule of ``code``."""
    from ckptdoctor.rules.registry import find_rule  # the rule table loads when findings are filtered, not with the settings

    key = key.strip()
    rule = find_rule(code)
    return (rule is not None and rule.name == key.lower()) or code.startswith(key.upper())


def settings(config: str | None = None, environ: Mapping[str, str] | None = None, start: str | None = None) -> Settings:
    """Settings from ``config`` (or ``$CKPTDOCTOR_CONFIG``, or the nearest ``[tool.ckptdoctor]``
    / ``ckptdoctor.toml``), with the environment over them; ConfigError names a bad key."""
    environ = os.environ if environ is None else environ
    found = _located(config, environ, start)
    path, table = found if found is not None else (None, {})
    values: dict[str, Any] = dict(table)
    unknown = sorted(set(values) - TOP_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} in [tool.ckptdoctor] (known: {', '.join(sorted(TOP_KEYS))})")
    checked = _checked(values, path)
    for variable, key in ENVIRONMENT.items():
        if variable in environ:  # each checked on its own, so that an error names the variable
            raw = environ[variable]
            listed = key in ("select", "ignore", "trusted-globals")
            value: Any = [part.strip() for part in raw.split(",") if part.strip()] if listed else raw
            single = _checked({key: value}, variable)
            checked = dataclasses.replace(checked, **{key.replace("-", "_"): getattr(single, key.replace("-", "_"))})
    return checked


def check_rules(values: tuple[str, ...], where: str, key: str = "select") -> tuple[str, ...]:
    """``values`` if each is a rule code, code prefix or name; ConfigError naming ``where`` and
    ``key`` (``select`` or ``ignore``) else."""
    checked = _checked({key: list(values)}, where)
    return checked.ignore if key == "ignore" else checked.select


def _located(config: str | None, environ: Mapping[str, str], start: str | None) -> tuple[str, Mapping[str, Any]] | None:
    path = config or environ.get("CKPTDOCTOR_CONFIG")
    if path:
        return path, _explicit(path)
    # the run's project first (a cron job runs from anywhere), else where the command was run
    return (_find(start) if start else None) or _find(os.getcwd())


def _explicit(path: str) -> Mapping[str, Any]:
    if not os.path.exists(path):  # what exists but is no file (/dev/zero, a folder) _load says what it is
        raise ConfigError(f"{path}: no such configuration file")
    document = _load(path)
    if os.path.basename(path) == "pyproject.toml":
        tool = document.get("tool", {})
        table = tool.get("ckptdoctor", {}) if isinstance(tool, dict) else {}
        return table if isinstance(table, dict) else {}
    return document


@functools.cache
def _rules_by_key() -> dict[str, Rule]:
    """Every rule by its code and by its name."""
    # the rule table loads every layout: only when a setting names a rule
    from ckptdoctor.rules.registry import RULES

    return {rule.code: rule for rule in RULES} | {rule.name: rule for rule in RULES}


def _checked(values: Mapping[str, Any], where: str | None) -> Settings:
    def fail(key: str, why: str) -> ConfigError:
        return ConfigError(f"{where}: {key}: {why}")

    lists: dict[str, tuple[str, ...]] = {}
    for key in ("select", "ignore"):
        value = values.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise fail(key, "must be a list of rule codes, code prefixes (CKD1) or names")
        for item in value:
            item = item.strip()
            known = _rules_by_key()
            if item.lower() not in known and not (item.upper().startswith("CKD") and any(code.startswith(item.upper()) for code in known)):
                raise fail(key, f"{item!r} is no rule code, prefix or name")
        lists[key] = tuple(item.strip() for item in value)
    fail_on = values.get("fail-on")
    if fail_on is not None and fail_on not in SEVERITIES:
        raise fail("fail-on", f"must be one of {', '.join(SEVERITIES)}, not {fail_on!r}")
    fmt = values.get("format")
    if fmt is not None:
        try:  # a report's formats, as `--format` offers them (in any case), and refused with its message
            fmt = named(fmt).name
        except ValueError as error:
            raise fail("format", str(error)) from error
    severity = values.get("severity", {})
    if not isinstance(severity, dict):
        raise fail("severity", "must be a table of rule code = severity")
    overrides = {}
    for key, level in severity.items():
        rule = _rules_by_key().get(str(key).upper()) or _rules_by_key().get(str(key))
        if rule is None:
            raise fail(f"severity.{key}", "no such rule")
        if level not in SEVERITIES:
            raise fail(f"severity.{key}", f"must be one of {', '.join(SEVERITIES)}, not {level!r}")
        overrides[rule.code] = Severity(level)
    thresholds = values.get("thresholds", {})
    if not isinstance(thresholds, dict):
        raise fail("thresholds", "must be a table")
    given: dict[str, float] = {}
    for key, value in thresholds.items():
        if key not in THRESHOLD_KEYS:
            raise fail(f"thresholds.{key}", f"unknown (known: {', '.join(THRESHOLD_KEYS)})")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise fail(f"thresholds.{key}", f"must be a positive number, not {value!r}")
        given[THRESHOLD_KEYS[key]] = int(value) if key == "min-peers" else float(value)
    roles = values.get("roles", {})
    if not isinstance(roles, dict):
        raise fail("roles", 'must be a table of name prefix = role ("model", "optimizer" or "scheduler")')
    hinted = {}
    for prefix, role in roles.items():
        if role not in HINTED_ROLES:
            raise fail(f"roles.{prefix}", f"must be one of {', '.join(HINTED_ROLES)}, not {role!r}")
        hinted[str(prefix)] = Role(role)
    defaults = Thresholds()
    max_download = values.get("max-download", MAX_DOWNLOAD)
    if isinstance(max_download, str):
        try:
            max_download = parse_size(max_download, "max-download")
        except ValueError:
            raise fail("max-download", "must be a size such as 20GiB") from None
    if isinstance(max_download, bool) or not isinstance(max_download, int) or max_download < 0:
        raise fail("max-download", "must be a size such as 20GiB")
    min_age = values.get("min-age")
    if min_age is not None and not isinstance(min_age, str | int | float):
        raise fail("min-age", "must be a duration such as 10min")
    ray = values.get("ray")
    if ray is not None and (not isinstance(ray, str) or not ray.strip()):
        raise fail("ray", 'must be a Ray cluster\'s address, "auto" or "off"')
    trusted = values.get("trusted-globals", [])
    if not isinstance(trusted, list) or not all(isinstance(item, str) for item in trusted):
        raise fail("trusted-globals", 'must be a list of module.Class of your own package: ["mypkg.Config"]')
    for item in trusted:
        if (refused := trust_refusal(item.strip())) is not None:
            raise fail("trusted-globals", f"{item!r} cannot be trusted: {refused}")
    return Settings(
        select=lists["select"],
        ignore=lists["ignore"],
        fail_on=fail_on,
        format=fmt,
        severity=overrides,
        thresholds=Thresholds(
            undersized=float(given.get("undersized", defaults.undersized)),
            oversized=float(given.get("oversized", defaults.oversized)),
            optimizer_margin=float(given.get("optimizer_margin", defaults.optimizer_margin)),
            min_peers=int(given.get("min_peers", defaults.min_peers)),
        ),
        min_age=str(min_age) if min_age is not None else None,
        max_download=max_download,
        ray=ray.strip() if ray is not None else None,
        roles=hinted,
        trusted_globals=Trusted.declared((item.strip() for item in trusted), where or "") if trusted else Trusted(),
        source=where,
        prune_table=values.get("prune", {}),
    )


def _find(folder: str) -> tuple[str, Mapping[str, Any]] | None:
    folder = os.path.abspath(folder)
    while True:
        own = os.path.join(folder, "ckptdoctor.toml")
        if os.path.isfile(own):
            return own, _load(own)
        project = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(project):
            tool = _load(project, naming=b"ckptdoctor").get("tool", {})
            table = tool.get("ckptdoctor") if isinstance(tool, dict) else None
            if isinstance(table, dict):
                return project, table
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _load(path: str, naming: bytes | None = None) -> dict[str, Any]:
    """The TOML document in ``path``. With ``naming``: ``{}``, unparsed, when no key in it can be
    that name (a key is spelt out in the file, or escaped in a quoted key), as in a project's
    ``pyproject.toml`` with no table of ckptdoctor's: the parser loads only for a configuration."""
    try:
        text = read_regular(path, MAX_CONFIG)
    except OSError as error:
        raise ConfigError(f"{path}: {error.strerror or error}") from error
    if naming is not None and naming not in text and b"\\u" not in text and b"\\U" not in text:
        return {}
    if sys.version_info >= (3, 11):
        import tomllib  # the TOML parser loads only where there is a file to parse
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]

    try:
        document: dict[str, Any] = tomllib.loads(text.decode("utf-8"))
        return document
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not TOML ({error})") from error


MAX_CONFIG = 1024 * 1024
"""A configuration file longer than this is refused (a device or a wrong path, not a config)."""
