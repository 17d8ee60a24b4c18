"""PROFILING_OPTIONS (seed 004) and MS_PROFILER_OPTIONS (seed 002): every rule passes and fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from structlog.testing import capture_logs

from profstream import events
from profstream.errors import ConfigError
from profstream.options import (
    INSTR_EXCLUSIVE,
    MS_PROFILER_OPTIONS,
    PROFILING_OPTIONS,
    EnvironmentOptions,
    MsProfilerOptions,
    ProfilingOptions,
    from_environment,
    parse_ms_profiler_options,
    parse_profiling_options,
)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TRAINING_ON = {"training_trace": "on"}


def dumps(options: object) -> str:
    return msgspec.json.encode(options).decode()


def profiling(options: dict[str, Any], *, training: bool = True) -> ProfilingOptions:
    return parse_profiling_options(dumps(options), training=training)


def ms_profiler(options: dict[str, Any]) -> MsProfilerOptions:
    return parse_ms_profiler_options(dumps({"start": True, **options}))


def assert_names(
    exc: pytest.ExceptionInfo[ConfigError], variable: str, option: str, value: str, rule: str
) -> None:
    message = str(exc.value)
    assert exc.value.key == f"{variable}.{option}"
    assert option in message
    assert value in message
    assert rule in message


# --- PROFILING_OPTIONS: values accepted --------------------------------------------------------------

GOOD_PROFILING = [
    {"output": "/home/HwHiAiUser/output"},
    {"output": "output"},
    {"output": "/tmp/with space/ü"},
    {"storage_limit": "200MB"},
    {"storage_limit": "4294967295MB"},
    {"training_trace": "off"},
    {"training_trace": "on"},
    *(
        {name: value, **TRAINING_ON}
        for name in ("task_trace", "task_time")
        for value in ("on", "off", "l0", "l1")
    ),
    {"task_trace": "off"},
    *(
        {name: value}
        for name in ("hccl", "l2", "msproftx", "runtime_api", "aicpu")
        for value in ("on", "off")
    ),
    {"fp_point": "", "bp_point": "", **TRAINING_ON},
    {"fp_point": "fp32_vars/conv2d/BatchNorm", "bp_point": "gradients/AddN_70", **TRAINING_ON},
    *({"aic_metrics": group} for group in ("ArithmeticUtilization", "PipeUtilization", "Memory")),
    *({"aic_metrics": group} for group in ("MemoryL0", "MemoryUB", "ResourceConflictRatio", "L2Cache")),
    {"aic_metrics": "Custom:0x49,0x8,0x15,0x1b,0x64,0x10"},
    {"aic_metrics": "Custom:1"},
    {"aic_metrics": "Custom:110"},
    {"aic_metrics": "Custom:0X6E,0x6e,0x01"},
    {"aic_metrics": "Custom:1,2,3,4,5,6,7,8"},
    {"llc_profiling": "read"},
    {"llc_profiling": "write"},
    *(
        {name: value}
        for name in ("sys_hardware_mem_freq", "sys_io_sampling_freq", "dvpp_freq")
        for value in (1, 100)
    ),
    {"sys_interconnection_freq": 1},
    {"sys_interconnection_freq": 50},
    {"sys_io_sampling_freq": "50"},
    {"host_sys_usage_freq": 1},
    {"host_sys_usage_freq": "50"},
    *(
        {name: value}
        for name in ("host_sys", "host_sys_usage")
        for value in ("cpu", "mem", "cpu,mem", "mem,cpu")
    ),
    {"instr_profiling_freq": 300},
    {
        "instr_profiling_freq": "30000",
        "sys_io_sampling_freq": 10,
        "host_sys": "cpu",
        "llc_profiling": "write",
    },
    {"instr_profiling_freq": 1000, "training_trace": "off", "task_trace": "off", "task_time": "off"},
    {"instr_profiling_freq": 1000, "hccl": "off", "aicpu": "off", "l2": "off", "runtime_api": "off"},
    {"instr_profiling_freq": None, "task_trace": "on", **TRAINING_ON},
]


@pytest.mark.parametrize("options", GOOD_PROFILING, ids=dumps)
def test_profiling_accepts_documented_values(options: dict[str, Any]) -> None:
    """Each documented value decodes, and every configured option keeps its (integer) value."""
    opts = profiling(options)
    for name, value in options.items():
        expected = int(value) if isinstance(value, str) and value.isdigit() else value
        assert getattr(opts, name) == expected, name


# --- PROFILING_OPTIONS: violations -------------------------------------------------------------------

BAD_PROFILING = [
    # (options, option, value shown in the message, rule text)
    *(
        ({"output": f"/tmp/a{char}b"}, "output", "/tmp/a", f"(found {label})")
        for char, label in [
            ("\n", r"\n"),
            ("\f", r"\f"),
            ("\r", r"\r"),
            ("\b", r"\b"),
            ("\t", r"\t"),
            ("\v", r"\v"),
            ("\x7f", r"\u007F"),
        ]
    ),
    ({"output": 5}, "output", "5", "a string"),
    *(
        ({"storage_limit": value}, "storage_limit", value, '"<N>MB" with N in [200, 4294967295]')
        for value in (
            "199MB",
            "4294967296MB",
            "0MB",
            "200",
            "200mb",
            "200 MB",
            "-200MB",
            "+200MB",
            "MB",
            "2GB",
        )
    ),
    ({"storage_limit": 200}, "storage_limit", "200", "a string"),
    ({"training_trace": "ON"}, "training_trace", '"ON"', 'one of "off", "on"'),
    ({"task_trace": "l2", **TRAINING_ON}, "task_trace", '"l2"', '"l0", "l1"'),
    ({"task_time": True, **TRAINING_ON}, "task_time", "true", '"l0", "l1"'),
    *(
        ({name: "yes"}, name, '"yes"', 'one of "off", "on"')
        for name in ("hccl", "l2", "msproftx", "runtime_api")
    ),
    ({"fp_point": 1, **TRAINING_ON}, "fp_point", "1", "a string"),
    ({"bp_point": ["x"], **TRAINING_ON}, "bp_point", '["x"]', "a string"),
    *(
        ({"aic_metrics": value}, "aic_metrics", value, "PipeUtilization")
        for value in ("pipeutilization", "", "L2", "custom:0x1", "Custom")
    ),
    ({"aic_metrics": "Custom:"}, "aic_metrics", "Custom:", "hex (0x..) or decimal registers, found ''"),
    ({"aic_metrics": "Custom:0x49, 0x8"}, "aic_metrics", "Custom:0x49, 0x8", "found ' 0x8'"),
    ({"aic_metrics": "Custom:0xZZ"}, "aic_metrics", "Custom:0xZZ", "found '0xZZ'"),
    ({"aic_metrics": "Custom:1,,2"}, "aic_metrics", "Custom:1,,2", "found ''"),
    ({"aic_metrics": "Custom:0x0"}, "aic_metrics", "Custom:0x0", "registers in [0x1, 0x6E], found 0x0"),
    ({"aic_metrics": "Custom:0x6F"}, "aic_metrics", "Custom:0x6F", "registers in [0x1, 0x6E], found 0x6F"),
    ({"aic_metrics": "Custom:111"}, "aic_metrics", "Custom:111", "registers in [0x1, 0x6E], found 111"),
    (
        {"aic_metrics": "Custom:1,2,3,4,5,6,7,8,9"},
        "aic_metrics",
        "Custom:1,2,3",
        "at most 8 Custom registers",
    ),
    ({"llc_profiling": "both"}, "llc_profiling", '"both"', 'one of "read", "write"'),
    *(
        ({name: value}, name, dumps(value), f"an integer in [{low}, {high}]")
        for name, low, high in [
            ("sys_hardware_mem_freq", 1, 100),
            ("sys_io_sampling_freq", 1, 100),
            ("sys_interconnection_freq", 1, 50),
            ("dvpp_freq", 1, 100),
            ("instr_profiling_freq", 300, 30000),
            ("host_sys_usage_freq", 1, 50),
        ]
        for value in (low - 1, high + 1, "abc", 1.5, "50.0", " 50", True)
    ),
    *(
        ({name: value}, name, dumps(value), "comma-separated cpu and/or mem, each at most once")
        for name in ("host_sys", "host_sys_usage")
        for value in ("", "disk", "cpu,cpu", "cpu, mem", "cpu,", "CPU")
    ),
    *(
        (
            {"instr_profiling_freq": 300, name: value},
            "instr_profiling_freq",
            "300",
            f"(mutually exclusive); also configured: {name}",
        )
        for name, value in [
            *((switch, "on") for switch in ("training_trace", "hccl", "aicpu", "l2", "runtime_api")),
            ("task_trace", "l0"),
            ("task_time", "on"),
            ("fp_point", ""),
            ("bp_point", "bp"),
            ("aic_metrics", "PipeUtilization"),
        ]
    ),
    ({"task_trace": "on"}, "task_trace", '"on"', 'training_trace "on" in training (training_trace is "off")'),
    ({"task_time": "l0", "training_trace": "off"}, "task_time", '"l0"', 'only with training_trace "on"'),
    ({"task_trace": "l1"}, "task_trace", '"l1"', 'only with training_trace "on" in training'),
    ({"fp_point": ""}, "fp_point", '""', 'fp_point only with training_trace "on"'),
    ({"bp_point": "AddN_70"}, "bp_point", '"AddN_70"', 'bp_point only with training_trace "on"'),
    ({"foo": 1}, "foo", "'foo'", "unknown option"),
    ({"Output": "/x", "storage-limit": "200MB"}, "Output", "'storage-limit'", "unknown option"),
]


@pytest.mark.parametrize(("options", "option", "value", "rule"), BAD_PROFILING, ids=repr)
def test_profiling_rejects_violations(options: dict[str, Any], option: str, value: str, rule: str) -> None:
    """A violation is a ConfigError keyed PROFILING_OPTIONS.<option> naming the value and the rule."""
    with pytest.raises(ConfigError) as exc:
        profiling(options)
    assert_names(exc, PROFILING_OPTIONS, option, value, rule)


def test_exclusivity_covers_exactly_the_documented_options() -> None:
    """instr_profiling_freq excludes the ten options seed 004 lists, and every one is tested above."""
    assert set(INSTR_EXCLUSIVE) == {
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
    }
    tested = {rule.rsplit(": ", 1)[1] for _, option, _, rule in BAD_PROFILING if "mutually" in rule}
    assert tested == set(INSTR_EXCLUSIVE)


def test_exclusivity_lists_every_clash() -> None:
    """All conflicting options are named, not just the first."""
    with pytest.raises(ConfigError, match="also configured: task_trace, aic_metrics"):
        profiling({"instr_profiling_freq": 500, "task_trace": "on", "aic_metrics": "Memory"})


def test_online_inference_rules() -> None:
    """Inference accepts task_trace without training_trace and rejects training_trace on."""
    assert profiling({"task_trace": "on", "aicpu": "on"}, training=False).task_trace == "on"
    with pytest.raises(ConfigError) as exc:
        profiling({"training_trace": "on"}, training=False)
    assert_names(exc, PROFILING_OPTIONS, "training_trace", '"on"', "online inference does not support")


def test_aicpu_other_values_read_as_off() -> None:
    """Seed 004: an aicpu value other than on/off is handled as off, and that is logged."""
    with capture_logs() as logs:
        assert profiling({"aicpu": "maybe"}).aicpu == "off"
        assert profiling({"aicpu": 1}).aicpu == "off"
    assert [entry["event"] for entry in logs] == [events.OPTION_COERCED] * 2
    assert logs[0]["value"] == "maybe"
    assert logs[0]["key"] == "PROFILING_OPTIONS.aicpu"


@pytest.mark.parametrize(
    ("text", "position"),
    [('{"output": }', "(byte 11)"), ('{"output": "/x"', "(byte 15, end of input)"), ("", "(byte 0")],
)
def test_profiling_bad_json_names_variable_and_position(text: str, position: str) -> None:
    """Malformed JSON names the variable and the byte where parsing failed."""
    with pytest.raises(ConfigError) as exc:
        parse_profiling_options(text)
    assert exc.value.key == PROFILING_OPTIONS
    assert str(exc.value).startswith(PROFILING_OPTIONS)
    assert position in str(exc.value)


@pytest.mark.parametrize("text", ["[]", '"on"', "null", "1"])
def test_profiling_must_be_object(text: str) -> None:
    """A JSON value that is not an object is rejected with what was found."""
    with pytest.raises(ConfigError, match="expected a JSON object") as exc:
        parse_profiling_options(text)
    assert exc.value.key == PROFILING_OPTIONS


def test_profiling_defaults_match_seed() -> None:
    """Defaults stated by seed 004, and not-configured options as None."""
    opts = parse_profiling_options("{}")
    assert opts == ProfilingOptions()
    assert (opts.task_trace, opts.task_time) == ("on", "on")
    assert (opts.hccl, opts.aicpu, opts.l2, opts.msproftx, opts.runtime_api) == ("off",) * 5
    assert opts.aic_metrics == "PipeUtilization"
    assert opts.llc_profiling == "read"
    assert opts.host_sys_usage_freq == 50
    assert opts.training_trace == "off"
    assert opts.storage_limit is None
    assert opts.storage_limit_mb is None
    assert opts.output is None
    assert opts.instr_profiling_freq is None


def test_profiling_derived_values() -> None:
    """Properties expose storage MB, the metrics group, Custom registers, host items and task levels."""
    opts = profiling(
        {
            "storage_limit": "0250MB",
            "aic_metrics": "Custom:0x49,8,0X1b",
            "host_sys": "mem,cpu",
            "training_trace": "on",
            "task_time": "l0",
            "hccl": "on",
        }
    )
    assert opts.storage_limit_mb == 250
    assert opts.aic_metrics_group == "Custom"
    assert opts.custom_registers == (0x49, 8, 0x1B)
    assert opts.host_sys_items == ("mem", "cpu")
    assert opts.host_sys_usage_items == ()
    assert (opts.task_trace_level, opts.task_time_level) == ("l1", "l0")
    assert opts.training_trace_on
    assert opts.hccl_on
    assert not (opts.aicpu_on or opts.l2_on or opts.msproftx_on or opts.runtime_api_on)
    named = profiling({"aic_metrics": "MemoryUB", "task_trace": "off"})
    assert (named.aic_metrics_group, named.custom_registers, named.task_trace_level) == (
        "MemoryUB",
        (),
        "off",
    )


def test_profiling_seed_example() -> None:
    """The configuration example printed in seed 004 is accepted."""
    text = (
        '{"output":"/tmp/profiling","training_trace":"on","task_trace":"on","fp_point":"","bp_point":"",'
        '"aic_metrics":"PipeUtilization"}'
    )
    opts = parse_profiling_options(text)
    assert (opts.output, opts.fp_point, opts.aic_metrics_group) == ("/tmp/profiling", "", "PipeUtilization")


def test_profiling_example_file_and_round_trip() -> None:
    """configs/profiling_options.example.json is valid, complete, and survives encode/decode."""
    text = (CONFIGS / "profiling_options.example.json").read_text(encoding="utf-8")
    opts = parse_profiling_options(text)
    assert msgspec.structs.asdict(opts) == msgspec.structs.asdict(ProfilingOptions()) | msgspec.json.decode(
        text
    )
    assert set(ProfilingOptions.__struct_fields__) - set(msgspec.json.decode(text)) == {
        "instr_profiling_freq"
    }
    assert parse_profiling_options(msgspec.json.encode(opts).decode()) == opts


# --- MS_PROFILER_OPTIONS -----------------------------------------------------------------------------

GOOD_MS = [
    {"output_path": "/home/user/code/data"},
    *(
        {name: value}
        for name in ("op_time", "l2_cache", "data_process", "parallel_strategy")
        for value in (True, False)
    ),
    {"profile_memory": True},
    {"profile_communication": True, "op_time": True},
    {"profile_memory": False, "profile_communication": False, "op_time": False},
    {"aicore_metrics": -1},
    {"aicore_metrics": 5},
    {"timeline_limit": 1},
    {"timeline_limit": 20},
    {"op_time": False, "l2_cache": True, "data_process": True},
]


@pytest.mark.parametrize("options", GOOD_MS, ids=dumps)
def test_ms_profiler_accepts_documented_values(options: dict[str, Any]) -> None:
    """Each documented value decodes unchanged."""
    opts = ms_profiler(options)
    for name, value in options.items():
        assert getattr(opts, name) == value, name


BAD_MS = [
    ({"output_path": "relative/dir"}, "output_path", '"relative/dir"', "an absolute path"),
    ({"output_path": "./data"}, "output_path", '"./data"', "an absolute path"),
    ({"output_path": None}, "output_path", "null", "a string"),
    *(
        ({name: value}, name, shown, "a JSON boolean (true or false)")
        for name in ("op_time", "profile_memory", "profile_communication", "l2_cache", "data_process")
        for value, shown in (("true", '"true"'), (1, "1"))
    ),
    ({"parallel_strategy": None}, "parallel_strategy", "null", "a JSON boolean"),
    *(
        ({"op_time": False, name: value}, name, shown, f"{name} only with op_time true (op_time is false)")
        for name, value, shown in [
            ("profile_memory", True, "true"),
            ("profile_communication", True, "true"),
            ("aicore_metrics", 0, "0"),
            ("timeline_limit", 500, "500"),
        ]
    ),
    ({"aicore_metrics": 6}, "aicore_metrics", "6", "an integer in [-1, 5]"),
    ({"aicore_metrics": -2}, "aicore_metrics", "-2", "an integer in [-1, 5]"),
    ({"aicore_metrics": "1"}, "aicore_metrics", '"1"', "an integer in [-1, 5]"),
    ({"timeline_limit": 0}, "timeline_limit", "0", "an integer >= 1"),
    ({"timeline_limit": 1.5}, "timeline_limit", "1.5", "an integer >= 1"),
    ({"sync_enable": True}, "sync_enable", "'sync_enable'", "unknown option"),
    ({"profiler_level": "Level0"}, "profiler_level", "'profiler_level'", "unknown option"),
]


@pytest.mark.parametrize(("options", "option", "value", "rule"), BAD_MS, ids=repr)
def test_ms_profiler_rejects_violations(options: dict[str, Any], option: str, value: str, rule: str) -> None:
    """A violation is a ConfigError keyed MS_PROFILER_OPTIONS.<option> naming the value and the rule."""
    with pytest.raises(ConfigError) as exc:
        ms_profiler(options)
    assert_names(exc, MS_PROFILER_OPTIONS, option, value, rule)


@pytest.mark.parametrize(("text", "shown"), [("{}", "none"), ('{"start": "yes"}', '"yes"')])
def test_ms_profiler_start_is_a_required_boolean(text: str, shown: str) -> None:
    """start must be present (seed 002: required) and a boolean; false is allowed."""
    assert parse_ms_profiler_options('{"start": false}').start is False
    with pytest.raises(ConfigError) as exc:
        parse_ms_profiler_options(text)
    assert_names(
        exc, MS_PROFILER_OPTIONS, "start", shown, "required" if shown == "none" else "a JSON boolean"
    )


def test_ms_profiler_bad_json_names_variable_and_position() -> None:
    """Malformed JSON names MS_PROFILER_OPTIONS and the failing byte."""
    with pytest.raises(ConfigError, match=r"^MS_PROFILER_OPTIONS: .*\(byte 9\)") as exc:
        parse_ms_profiler_options('{"start" true}')
    assert exc.value.key == MS_PROFILER_OPTIONS


def test_ms_profiler_defaults_match_seed() -> None:
    """Defaults stated by seed 002; timeline_limit 500 MB is 500*1024*1024 bytes (spec §5.3)."""
    opts = parse_ms_profiler_options('{"start": true}')
    assert opts == MsProfilerOptions(start=True)
    assert opts.output_path == "./data"
    assert (opts.op_time, opts.data_process, opts.parallel_strategy) == (True, True, True)
    assert (opts.profile_memory, opts.profile_communication, opts.l2_cache) == (False, False, False)
    assert opts.aicore_metrics == 0
    assert opts.timeline_limit == 500
    assert opts.timeline_limit_bytes == 500 * 1024 * 1024


def test_ms_profiler_seed_example() -> None:
    """The export line printed in seed 002 is accepted (with an absolute output path)."""
    text = (
        '{"start": true, "output_path": "/XXX", "profile_memory": false, "profile_communication": false,'
        ' "aicore_metrics": 0, "l2_cache": false}'
    )
    assert parse_ms_profiler_options(text) == MsProfilerOptions(start=True, output_path="/XXX")


def test_ms_profiler_example_file_and_round_trip() -> None:
    """configs/ms_profiler_options.example.json is valid, complete, and survives encode/decode."""
    text = (CONFIGS / "ms_profiler_options.example.json").read_text(encoding="utf-8")
    opts = parse_ms_profiler_options(text)
    assert msgspec.structs.asdict(opts) == msgspec.json.decode(text)
    assert set(msgspec.json.decode(text)) == set(MsProfilerOptions.__struct_fields__)
    assert opts.timeline_limit_bytes == 1000 * 1024 * 1024
    assert parse_ms_profiler_options(msgspec.json.encode(opts).decode()) == opts


# --- environment -------------------------------------------------------------------------------------


def test_from_environment_reads_both_variables() -> None:
    """Both variables are parsed when set; other variables are ignored."""
    env = {
        "PROFILING_OPTIONS": '{"training_trace": "on", "task_trace": "on"}',
        "MS_PROFILER_OPTIONS": '{"start": true, "timeline_limit": 20}',
        "PATH": "/usr/bin",
    }
    found = from_environment(env)
    assert found.profiling == ProfilingOptions(training_trace="on")
    assert found.ms_profiler == MsProfilerOptions(start=True, timeline_limit=20)
    assert found.items() == (
        ("PROFILING_OPTIONS", found.profiling),
        ("MS_PROFILER_OPTIONS", found.ms_profiler),
    )
    assert from_environment({"MS_PROFILER_OPTIONS": '{"start": false}'}).items() == (
        ("MS_PROFILER_OPTIONS", MsProfilerOptions(start=False)),
    )


@pytest.mark.parametrize("env", [{}, {"PROFILING_OPTIONS": "", "MS_PROFILER_OPTIONS": "  "}])
def test_from_environment_unset_or_empty(env: dict[str, str]) -> None:
    """Unset or empty variables give None."""
    assert from_environment(env) == EnvironmentOptions()
    assert from_environment(env).items() == ()


def test_from_environment_passes_training_mode_and_errors() -> None:
    """training=False reaches the PROFILING_OPTIONS rules; a bad value still raises."""
    env = {"PROFILING_OPTIONS": '{"task_trace": "on"}'}
    assert from_environment(env, training=False).profiling == ProfilingOptions()
    with pytest.raises(ConfigError, match=r"^PROFILING_OPTIONS\.task_trace: "):
        from_environment(env)
    with pytest.raises(ConfigError, match=r"^MS_PROFILER_OPTIONS\.start: "):
        from_environment({"MS_PROFILER_OPTIONS": "{}"})
