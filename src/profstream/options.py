"""The Ascend profiler's own option strings: ``PROFILING_OPTIONS`` and ``MS_PROFILER_OPTIONS``.

Both are JSON objects held in environment variables. They tell profstream what a PROF_XXX directory
can contain and how its output was bounded, so they are decoded into typed, frozen structs and
checked against the product documentation:

* ``PROFILING_OPTIONS`` (TensorFlow training / online inference): seeds/004_fc81bce50fc171d0.txt.
* ``MS_PROFILER_OPTIONS`` (MindSpore): seeds/002_1b9e32d581284b26.txt, with specs/framework_outputs.md
  §5.1-§5.3 for what the seed leaves open.

msgspec checks types, enumerations and ranges; the rules it cannot express (the ``storage_limit``
format, ``Custom:`` registers, ``host_sys`` lists, forbidden path characters, exclusivity and
dependencies) are checked here. Every violation is a :class:`ConfigError` whose key is
``<VARIABLE>.<option>`` and whose message reads "expected <rule>, got <value> - at `$.<option>`".

Choices where the seeds are silent or loose:

* An option is *in use* when the user wrote it in the JSON, unless its value switches it off
  (``"off"``, ``false``, ``null``). Exclusivity and "requires" rules look at options in use, not at
  defaults: seed 004 makes ``task_trace`` default ``"on"`` and ``aic_metrics`` default
  ``PipeUtilization``, so judging defaults would make ``instr_profiling_freq`` unusable.
* Seed 004 states no default for ``training_trace``; it is ``"off"`` (iteration trace is opt-in).
  ``output``, ``storage_limit``, ``fp_point``, ``bp_point``, the sampling frequencies and
  ``host_sys``/``host_sys_usage`` are ``None`` when not configured (the seed gives no default).
* "task_trace on requires training_trace on in training": seed 004 describes ``task_trace`` and
  ``task_time`` as one switch and ``on`` as equal to ``l1``, so the rule applies to both names and
  to every enabling value (``on``, ``l0``, ``l1``). It is checked only when ``training=True``; with
  ``training=False`` (online inference) ``training_trace`` ``"on"`` is an error instead, because the
  seed says online inference does not support it.
* Seed 004 says ``training_trace`` must be on "when collecting forward and backward operator data";
  a configured ``fp_point`` or ``bp_point`` (even ``""``, automatic detection) is such a request.
* ``aicpu``: the seed says any value other than ``on``/``off`` counts as ``off``, so such values
  are stored as ``"off"`` and logged as ``option_coerced``, never rejected.
* Integer options accept a JSON integer or a string of ASCII digits (option strings commonly carry
  ``"50"``); nothing else is coerced.
* ``storage_limit`` is exactly ``<digits>MB``: no sign, blank or other unit.
* ``Custom:`` registers: hex ``0x``/``0X`` or decimal, comma-separated without blanks, 1 to 8 of
  them; duplicates are not checked (the seed does not forbid them).
* ``host_sys``/``host_sys_usage``: ``cpu`` and/or ``mem``, comma-separated, each at most once.
* Platform-specific limits (no ``L2Cache`` on Atlas training products, ``instr_profiling_freq`` on
  Atlas A2 only) are not checked: the option string does not say which chip it runs on.
* ``MS_PROFILER_OPTIONS``: only the keys of seed 002 are known (``sync_enable`` and the 2.4+ keys of
  framework_outputs.md §5.2 are unknown options). ``start`` is required (seed: "必选"). A configured
  ``output_path`` must be absolute (seed: "绝对路径"); the default ``./data`` applies only when it is
  absent. ``aicore_metrics`` is limited to -1..5 (framework_outputs.md §5.1), ``timeline_limit``
  to ≥ 1 MB. ``aicore_metrics`` and ``timeline_limit`` count as used when configured; the boolean
  options when true.
* An empty environment variable counts as not set. A key repeated in the JSON keeps its last value.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any, Final, Literal, TypeVar, cast, get_args

import msgspec
import msgspec.inspect as mi

from profstream import events
from profstream.errors import ConfigError

PROFILING_OPTIONS: Final = "PROFILING_OPTIONS"
MS_PROFILER_OPTIONS: Final = "MS_PROFILER_OPTIONS"

Switch = Literal["on", "off"]
TaskSwitch = Literal["on", "off", "l0", "l1"]
TaskLevel = Literal["off", "l0", "l1"]
HostSysItem = Literal["cpu", "mem"]
AicMetricsGroup = Literal[
    "ArithmeticUtilization",
    "PipeUtilization",
    "Memory",
    "MemoryL0",
    "MemoryUB",
    "ResourceConflictRatio",
    "L2Cache",
    "Custom",
]

#: the named ``aic_metrics`` groups (seed 004); ``Custom:<registers>`` is the other form.
AIC_METRICS_GROUPS: Final[tuple[str, ...]] = tuple(g for g in get_args(AicMetricsGroup) if g != "Custom")
CUSTOM_PREFIX: Final = "Custom:"
CUSTOM_REGISTER_MIN: Final = 0x1
CUSTOM_REGISTER_MAX: Final = 0x6E
CUSTOM_REGISTER_COUNT_MAX: Final = 8
STORAGE_LIMIT_MIN_MB: Final = 200
STORAGE_LIMIT_MAX_MB: Final = 4294967295
HOST_SYS_ITEMS: Final[tuple[str, ...]] = get_args(HostSysItem)
#: characters seed 004 forbids in ``output``, with the spelling the seed uses.
OUTPUT_FORBIDDEN: Final[Mapping[str, str]] = {
    "\n": r"\n",
    "\f": r"\f",
    "\r": r"\r",
    "\b": r"\b",
    "\t": r"\t",
    "\v": r"\v",
    "\x7f": r"\u007F",
}
#: options seed 004 says cannot run together with ``instr_profiling_freq``.
INSTR_EXCLUSIVE: Final = (
    "training_trace",
    "task_trace",
    "hccl",
    "aicpu",
    "fp_point",
    "bp_point",
    "aic_metrics",
    "l2",
    "task_time",
    "runtime_api",
)
#: MindSpore options that need ``op_time`` true (seed 002).
NEEDS_OP_TIME: Final = ("profile_memory", "profile_communication", "aicore_metrics", "timeline_limit")
MIB: Final = 1024 * 1024

Hz1To100 = Annotated[int, msgspec.Meta(ge=1, le=100)]
Hz1To50 = Annotated[int, msgspec.Meta(ge=1, le=50)]
Cycles300To30000 = Annotated[int, msgspec.Meta(ge=300, le=30000)]

_DIGITS = re.compile(r"[0-9]+")
_STORAGE_LIMIT = re.compile(r"(?P<mb>[0-9]+)MB")
_REGISTER = re.compile(r"0[xX][0-9a-fA-F]+|[0-9]+")
_BYTE_POSITION = re.compile(r"\(byte [0-9]+\)")
_AT_FIELD = re.compile(r" - at `\$\.(?P<name>\w+)`$")
_MISSING_FIELD = re.compile(r"missing required field `(?P<name>\w+)`")


class ProfilingOptions(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """``PROFILING_OPTIONS`` as seed 004 defines it; defaults are the seed's.

    Build it with :func:`parse_profiling_options`, which also runs the rules msgspec cannot express.
    Frequencies are in Hz, ``instr_profiling_freq`` in cycles.
    """

    output: str | None = None  # result directory; overrides ASCEND_WORK_PATH
    storage_limit: str | None = None  # "<N>MB"; None = 90 % of the free disk
    training_trace: Switch = "off"  # iteration trace (FP/BP, gradient aggregation)
    task_trace: TaskSwitch = "on"
    task_time: TaskSwitch = "on"
    hccl: Switch = "off"
    aicpu: Switch = "off"
    fp_point: str | None = None  # first forward op name; "" = detect automatically
    bp_point: str | None = None  # last backward op name; "" = detect automatically
    aic_metrics: str = "PipeUtilization"  # a group of AIC_METRICS_GROUPS or "Custom:<registers>"
    l2: Switch = "off"
    msproftx: Switch = "off"
    runtime_api: Switch = "off"
    sys_hardware_mem_freq: Hz1To100 | None = None
    llc_profiling: Literal["read", "write"] = "read"
    sys_io_sampling_freq: Hz1To100 | None = None
    sys_interconnection_freq: Hz1To50 | None = None
    dvpp_freq: Hz1To100 | None = None
    instr_profiling_freq: Cycles300To30000 | None = None
    host_sys: str | None = None  # "cpu", "mem" or both, comma-separated (per process)
    host_sys_usage: str | None = None  # same items, whole system and all processes
    host_sys_usage_freq: Hz1To50 = 50

    @property
    def storage_limit_mb(self) -> int | None:
        """The storage limit in MB, or None (the collector then uses 90 % of the free disk)."""
        return None if self.storage_limit is None else _storage_limit_mb(self.storage_limit)

    @property
    def aic_metrics_group(self) -> AicMetricsGroup:
        """The PMU event group, ``"Custom"`` for a register list."""
        return _aic_metrics(self.aic_metrics)[0]

    @property
    def custom_registers(self) -> tuple[int, ...]:
        """The ``Custom:`` PMU registers as ints, empty for a named group."""
        return _aic_metrics(self.aic_metrics)[1]

    @property
    def host_sys_items(self) -> tuple[HostSysItem, ...]:
        """The ``host_sys`` selections (process-level CPU/memory)."""
        return () if self.host_sys is None else _host_items("host_sys", self.host_sys)

    @property
    def host_sys_usage_items(self) -> tuple[HostSysItem, ...]:
        """The ``host_sys_usage`` selections (system and all-process CPU/memory)."""
        return () if self.host_sys_usage is None else _host_items("host_sys_usage", self.host_sys_usage)

    @property
    def task_trace_level(self) -> TaskLevel:
        """``task_trace`` with ``on`` read as ``l1``, as seed 004 says they are the same."""
        return _task_level(self.task_trace)

    @property
    def task_time_level(self) -> TaskLevel:
        """``task_time`` with ``on`` read as ``l1``."""
        return _task_level(self.task_time)

    @property
    def training_trace_on(self) -> bool:
        """Iteration-trace (step trace) data is collected."""
        return self.training_trace == "on"

    @property
    def hccl_on(self) -> bool:
        """HCCL data is collected (deprecated switch, seed 004)."""
        return self.hccl == "on"

    @property
    def aicpu_on(self) -> bool:
        """AI CPU operator details are collected."""
        return self.aicpu == "on"

    @property
    def l2_on(self) -> bool:
        """L2 cache sampling is collected."""
        return self.l2 == "on"

    @property
    def msproftx_on(self) -> bool:
        """msproftx user/framework data is collected."""
        return self.msproftx == "on"

    @property
    def runtime_api_on(self) -> bool:
        """Runtime API data is collected."""
        return self.runtime_api == "on"


class MsProfilerOptions(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """``MS_PROFILER_OPTIONS`` as seed 002 defines it; defaults are the seed's.

    ``timeline_limit`` is in MB (framework_outputs.md §5.3: ``500*1024*1024`` bytes by default).
    """

    start: bool
    output_path: str = "./data"
    op_time: bool = True
    profile_memory: bool = False
    profile_communication: bool = False
    aicore_metrics: Annotated[int, msgspec.Meta(ge=-1, le=5)] = 0
    l2_cache: bool = False
    timeline_limit: Annotated[int, msgspec.Meta(ge=1)] = 500
    data_process: bool = True
    parallel_strategy: bool = True

    @property
    def timeline_limit_bytes(self) -> int:
        """The timeline file size cap in bytes (MB * 1024 * 1024, framework_outputs.md §5.3)."""
        return self.timeline_limit * MIB


class EnvironmentOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The option strings found in an environment; None where the variable is not set."""

    profiling: ProfilingOptions | None = None
    ms_profiler: MsProfilerOptions | None = None

    def items(self) -> tuple[tuple[str, ProfilingOptions | MsProfilerOptions], ...]:
        """(variable name, parsed options) for each variable that was set, for reporting."""
        pairs = ((PROFILING_OPTIONS, self.profiling), (MS_PROFILER_OPTIONS, self.ms_profiler))
        return tuple((name, parsed) for name, parsed in pairs if parsed is not None)


def parse_profiling_options(text: str, *, training: bool = True) -> ProfilingOptions:
    """Decode and validate a ``PROFILING_OPTIONS`` string (seed 004).

    ``training`` says whether training profiling is on, which decides the ``task_trace`` /
    ``training_trace`` rule; ``False`` means online inference.
    """
    raw = _load_object(PROFILING_OPTIONS, text, ProfilingOptions)
    opts = _convert(PROFILING_OPTIONS, _prepare_profiling(raw), ProfilingOptions)
    _check_profiling(opts, frozenset(raw), training=training)
    return opts


def parse_ms_profiler_options(text: str) -> MsProfilerOptions:
    """Decode and validate an ``MS_PROFILER_OPTIONS`` string (seed 002)."""
    raw = _load_object(MS_PROFILER_OPTIONS, text, MsProfilerOptions)
    opts = _convert(MS_PROFILER_OPTIONS, raw, MsProfilerOptions)
    _check_ms_profiler(opts, frozenset(raw))
    return opts


def from_environment(env: Mapping[str, str], *, training: bool = True) -> EnvironmentOptions:
    """Parse ``PROFILING_OPTIONS`` and ``MS_PROFILER_OPTIONS`` from ``env`` where they are set."""
    profiling = env.get(PROFILING_OPTIONS, "")
    ms_profiler = env.get(MS_PROFILER_OPTIONS, "")
    return EnvironmentOptions(
        profiling=parse_profiling_options(profiling, training=training) if profiling.strip() else None,
        ms_profiler=parse_ms_profiler_options(ms_profiler) if ms_profiler.strip() else None,
    )


# --- decoding -------------------------------------------------------------------------------------

_S = TypeVar("_S", bound=msgspec.Struct)


def _load_object(variable: str, text: str, cls: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON object in ``text``; malformed JSON, non-objects and unknown options are errors."""
    try:
        raw = msgspec.json.decode(text, type=dict[str, Any])
    except msgspec.ValidationError as exc:
        msg = f"expected a JSON object, got another JSON value ({exc})"
        raise ConfigError(msg, key=variable) from exc
    except msgspec.DecodeError as exc:
        # msgspec names the byte of most errors; a truncated text fails at its end.
        where = "" if _BYTE_POSITION.search(str(exc)) else f" (byte {len(text.encode())}, end of input)"
        msg = f"expected valid JSON, got a parse error: {exc}{where}"
        raise ConfigError(msg, key=variable) from exc
    unknown = [name for name in raw if name not in cls.__struct_fields__]
    if unknown:
        msg = (
            f"unknown option(s) {', '.join(map(repr, unknown))}; "
            f"expected one of {', '.join(cls.__struct_fields__)}"
        )
        raise ConfigError(msg, key=f"{variable}.{unknown[0]}")
    return raw


def _convert(variable: str, raw: dict[str, Any], cls: type[_S]) -> _S:
    """msgspec validation, its errors restated with the option's value and documented rule."""
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if at := _AT_FIELD.search(text):
            name = at["name"]
            raise _violation(variable, name, raw[name], _describe(_field_types(cls)[name])) from exc
        if missing := _MISSING_FIELD.search(text):
            msg = f"expected the required option {missing['name']!r}, got none ({text})"
            raise ConfigError(msg, key=f"{variable}.{missing['name']}") from exc
        raise ConfigError(text, key=variable) from exc


@functools.cache
def _field_types(cls: type[msgspec.Struct]) -> dict[str, mi.Type]:
    info = cast(mi.StructType, mi.type_info(cls))
    return {field.name: field.type for field in info.fields}


def _describe(kind: mi.Type) -> str:
    """The rule a msgspec type enforces, in words (``an integer in [1, 100]``)."""
    if isinstance(kind, mi.UnionType):
        return " or ".join(_describe(k) for k in kind.types if not isinstance(k, mi.NoneType))
    if isinstance(kind, mi.LiteralType):
        return "one of " + ", ".join(f'"{v}"' for v in kind.values)
    if isinstance(kind, mi.IntType):
        if kind.ge is not None and kind.le is not None:
            return f"an integer in [{kind.ge}, {kind.le}]"
        return "an integer" if kind.ge is None else f"an integer >= {kind.ge}"
    if isinstance(kind, mi.BoolType):
        return "a JSON boolean (true or false)"
    if isinstance(kind, mi.StrType):
        return "a string"
    msg = f"no description for msgspec type {kind!r}"
    raise TypeError(msg)


def _violation(variable: str, option: str, value: object, rule: str) -> ConfigError:
    shown = msgspec.json.encode(value).decode()
    return ConfigError(f"expected {rule}, got {shown} - at `$.{option}`", key=f"{variable}.{option}")


def _in_use(opts: msgspec.Struct, configured: frozenset[str], name: str) -> bool:
    """Written in the JSON with a value that does not switch the option off."""
    value = getattr(opts, name)
    return name in configured and value is not None and value is not False and value != "off"


# --- PROFILING_OPTIONS rules (seed 004) -----------------------------------------------------------


def _prepare_profiling(raw: dict[str, Any]) -> dict[str, Any]:
    """Apply the seed's ``aicpu`` coercion and accept integers written as digit strings."""
    out = dict(raw)
    if "aicpu" in out and out["aicpu"] not in ("on", "off"):
        events.get_logger(component="options").warning(
            events.OPTION_COERCED, key=f"{PROFILING_OPTIONS}.aicpu", value=out["aicpu"], to="off"
        )
        out["aicpu"] = "off"
    for name, value in out.items():
        if isinstance(value, str) and name in _INT_OPTIONS and _DIGITS.fullmatch(value):
            out[name] = int(value)
    return out


def _check_profiling(opts: ProfilingOptions, configured: frozenset[str], *, training: bool) -> None:
    if opts.output is not None:
        found = [label for char, label in OUTPUT_FORBIDDEN.items() if char in opts.output]
        if found:
            rule = f"a path without {' '.join(OUTPUT_FORBIDDEN.values())} (found {' '.join(found)})"
            raise _violation(PROFILING_OPTIONS, "output", opts.output, rule)
    if opts.storage_limit is not None:
        _storage_limit_mb(opts.storage_limit)
    _aic_metrics(opts.aic_metrics)
    for name in ("host_sys", "host_sys_usage"):
        value = getattr(opts, name)
        if value is not None:
            _host_items(name, value)

    if _in_use(opts, configured, "instr_profiling_freq"):
        clash = [n for n in INSTR_EXCLUSIVE if _in_use(opts, configured, n)]
        if clash:
            rule = (
                f"instr_profiling_freq without {', '.join(INSTR_EXCLUSIVE)} (mutually exclusive); "
                f"also configured: {', '.join(clash)}"
            )
            raise _violation(PROFILING_OPTIONS, "instr_profiling_freq", opts.instr_profiling_freq, rule)

    trace = f'training_trace is "{opts.training_trace}"'
    if training:
        for name in ("task_trace", "task_time"):
            if _in_use(opts, configured, name) and not opts.training_trace_on:
                rule = f'{name} enabled only with training_trace "on" in training ({trace})'
                raise _violation(PROFILING_OPTIONS, name, getattr(opts, name), rule)
    elif opts.training_trace_on:
        rule = 'training_trace "off": online inference does not support training_trace'
        raise _violation(PROFILING_OPTIONS, "training_trace", opts.training_trace, rule)
    for name in ("fp_point", "bp_point"):
        if _in_use(opts, configured, name) and not opts.training_trace_on:
            rule = f'{name} only with training_trace "on", which collects forward/backward data ({trace})'
            raise _violation(PROFILING_OPTIONS, name, getattr(opts, name), rule)


def _storage_limit_mb(value: str) -> int:
    match = _STORAGE_LIMIT.fullmatch(value)
    if match is None or not STORAGE_LIMIT_MIN_MB <= int(match["mb"]) <= STORAGE_LIMIT_MAX_MB:
        rule = f'"<N>MB" with N in [{STORAGE_LIMIT_MIN_MB}, {STORAGE_LIMIT_MAX_MB}]'
        raise _violation(PROFILING_OPTIONS, "storage_limit", value, rule)
    return int(match["mb"])


def _aic_metrics(value: str) -> tuple[AicMetricsGroup, tuple[int, ...]]:
    """The group and the ``Custom:`` registers of an ``aic_metrics`` value."""
    if value in AIC_METRICS_GROUPS:
        return cast(AicMetricsGroup, value), ()
    if not value.startswith(CUSTOM_PREFIX):
        rule = f'one of {", ".join(AIC_METRICS_GROUPS)} or "{CUSTOM_PREFIX}<register>,..."'
        raise _violation(PROFILING_OPTIONS, "aic_metrics", value, rule)
    items = value.removeprefix(CUSTOM_PREFIX).split(",")
    if len(items) > CUSTOM_REGISTER_COUNT_MAX:
        rule = f"at most {CUSTOM_REGISTER_COUNT_MAX} Custom registers, found {len(items)}"
        raise _violation(PROFILING_OPTIONS, "aic_metrics", value, rule)
    registers = []
    for item in items:
        if not _REGISTER.fullmatch(item):
            rule = f"comma-separated hex (0x..) or decimal registers, found {item!r}"
            raise _violation(PROFILING_OPTIONS, "aic_metrics", value, rule)
        register = int(item, 16 if item[:2] in ("0x", "0X") else 10)
        if not CUSTOM_REGISTER_MIN <= register <= CUSTOM_REGISTER_MAX:
            rule = f"registers in [0x{CUSTOM_REGISTER_MIN:X}, 0x{CUSTOM_REGISTER_MAX:X}], found {item}"
            raise _violation(PROFILING_OPTIONS, "aic_metrics", value, rule)
        registers.append(register)
    return "Custom", tuple(registers)


def _host_items(option: str, value: str) -> tuple[HostSysItem, ...]:
    items = value.split(",")
    if any(item not in HOST_SYS_ITEMS for item in items) or len(set(items)) != len(items):
        rule = f"comma-separated {' and/or '.join(HOST_SYS_ITEMS)}, each at most once"
        raise _violation(PROFILING_OPTIONS, option, value, rule)
    return cast(tuple[HostSysItem, ...], tuple(items))


def _task_level(value: TaskSwitch) -> TaskLevel:
    return "l1" if value == "on" else value


def _is_int(kind: mi.Type) -> bool:
    if isinstance(kind, mi.UnionType):
        return any(_is_int(k) for k in kind.types)
    return isinstance(kind, mi.IntType)


_INT_OPTIONS: Final = frozenset(
    name for name, kind in _field_types(ProfilingOptions).items() if _is_int(kind)
)


# --- MS_PROFILER_OPTIONS rules (seed 002) ---------------------------------------------------------


def _check_ms_profiler(opts: MsProfilerOptions, configured: frozenset[str]) -> None:
    if "output_path" in configured and not PurePosixPath(opts.output_path).is_absolute():
        rule = 'an absolute path (seed 002; "./data" is used only when output_path is absent)'
        raise _violation(MS_PROFILER_OPTIONS, "output_path", opts.output_path, rule)
    if not opts.op_time:
        for name in NEEDS_OP_TIME:
            if _in_use(opts, configured, name):
                rule = f"{name} only with op_time true (op_time is false)"
                raise _violation(MS_PROFILER_OPTIONS, name, getattr(opts, name), rule)
