"""PMU metric columns and formulas (msprof_outputs.md §4c) against values worked out by hand from the spec."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from profstream.engine.operators import pmu
from profstream.errors import ConfigError

PIPE = (0x8, 0xA, 0x9, 0xB, 0xC, 0xD, 0x54, 0x55)
EXCT = (0x416, 0x417, 0x9, 0x302, 0xC, 0x303, 0x54, 0x55)
ARITH = (0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x4F)
MEMORY = (0x15, 0x16, 0x31, 0x32, 0xF, 0x10, 0x12, 0x13)
MEMORY_L0 = (0x1B, 0x1C, 0x21, 0x22, 0x27, 0x28, 0x29, 0x2A)
MEMORY_UB = (0x10, 0x13, 0x37, 0x38, 0x3D, 0x3E, 0x43, 0x44)
CONFLICT = (0x64, 0x65, 0x66)
L2 = (0x500, 0x502, 0x504, 0x506, 0x508, 0x50A)
ACCESS = (0x32, 0x3D, 0x3E, 0x206, 0x20C, 0x50C, 0x50D, 0x50E)
V4, CLOUD, DC = 5, 1, 4


def counters(
    aic: list[list[int]] | None = None,
    aiv: list[list[int]] | None = None,
    n: int = 1,
) -> pmu.Counters:
    """Counters of ``n`` tasks from rows ``[cycles, c0, c1, ...]`` (None: that side absent)."""

    def side(rows: list[list[int]] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if rows is None:
            return np.zeros(n, np.int64), np.zeros((8, n), np.int64), np.zeros(n, np.bool_)
        full = np.zeros((n, 9), np.int64)
        for i, row in enumerate(rows):
            full[i, : len(row)] = row
        return full[:, 0], full[:, 1:].T.copy(), np.ones(n, np.bool_)

    aic_cycles, aic_counts, has_aic = side(aic)
    aiv_cycles, aiv_counts, has_aiv = side(aiv)
    return pmu.Counters(aic_cycles, aic_counts, aiv_cycles, aiv_counts, has_aic, has_aiv)


def values(layout: pmu.MetricLayout, c: pmu.Counters, duration_ns: int = 1000) -> dict[str, np.ndarray]:
    n = len(c.aic_cycles)
    return pmu.device_metrics(layout, c, np.full(n, duration_ns, np.int64))


# ----------------------------------------------------------------------------- columns


def test_pipe_utilization_columns_python_path() -> None:
    assert pmu.metric_columns("PipeUtilization", CLOUD, aic_events=PIPE) == [
        "aicore_time",
        "total_cycles",
        "vec_time",
        "vec_ratio",
        "mac_time",
        "mac_ratio",
        "scalar_time",
        "scalar_ratio",
        "mte1_time",
        "mte1_ratio",
        "mte2_time",
        "mte2_ratio",
        "mte3_time",
        "mte3_ratio",
        "icache_miss_rate",
        "memory_bound",
        "cube_utilization",  # mac_ratio and total_cycles are columns (DataManager.add_cube_usage)
    ]


def test_pipe_utilization_columns_v4_exct_aic_and_unsupported_removed() -> None:
    columns = pmu.metric_columns("PipeUtilization", V4, aic_events=EXCT, aiv_events=PIPE)
    assert columns == [
        "aicore_time",
        "aic_total_cycles",
        "aic_mac_time",
        "aic_mac_ratio",
        "aic_scalar_time",
        "aic_scalar_ratio",
        "aic_mte1_time",
        "aic_mte1_ratio",
        "aic_mte2_time",
        "aic_mte2_ratio",
        "aic_fixpipe_time",
        "aic_fixpipe_ratio",
        "aic_icache_miss_rate",
        "aiv_time",
        "aiv_total_cycles",
        "aiv_vec_time",
        "aiv_vec_ratio",
        "aiv_scalar_time",
        "aiv_scalar_ratio",
        "aiv_mte2_time",
        "aiv_mte2_ratio",
        "aiv_mte3_time",
        "aiv_mte3_ratio",
        "aiv_icache_miss_rate",
        "cube_utilization",
    ]
    # the AIC side keeps PipeUtilization when its events are the ordinary list
    plain = pmu.metric_columns("PipeUtilization", V4, aic_events=PIPE, aiv_events=PIPE)
    assert "aic_mte3_ratio" in plain and "aic_fixpipe_ratio" not in plain
    assert "aic_vec_ratio" not in plain and "memory_bound" not in plain


def test_v4_aiv_block_follows_aiv_metrics() -> None:
    """The 910B collector writes ai_core_metrics PipeUtilizationExct and aiv_metrics PipeUtilization
    (SetParamsForAicMetrics / SetParamsForAivMetrics); msprof's C++ reads each side's own group
    (sample_info.cpp), so the AIV block keeps vec and mte3 as in the real Level1 kernel_details."""
    layout = pmu.build_layout(
        "PipeUtilizationExct", V4, aic_events=EXCT, aiv_events=PIPE, aiv_group="PipeUtilization"
    )
    expected = pmu.metric_columns("PipeUtilization", V4, aic_events=EXCT, aiv_events=PIPE)
    assert list(layout.columns) == expected
    assert [b.group for b in layout.blocks] == ["PipeUtilizationExct", "PipeUtilization"]


def test_group_columns_per_chip() -> None:
    assert pmu.metric_columns("ArithmeticUtilization", V4)[2:] == [
        "aic_mac_fp16_ratio",
        "aic_mac_int8_ratio",
        "aic_cube_fops",
        "aiv_time",
        "aiv_total_cycles",
        "aiv_vec_fp32_ratio",
        "aiv_vec_fp16_ratio",
        "aiv_vec_int32_ratio",
        "aiv_vec_misc_ratio",
        "aiv_vector_fops",
    ]
    assert pmu.metric_columns("ArithmeticUtilization", CLOUD)[-2:] == ["cube_fops", "vector_fops"]
    # Python drops l2 read/write of Memory (AicPmuUtils._remove_list); C++ keeps them, last
    assert pmu.metric_columns("Memory", CLOUD)[2:] == [
        "ub_read_bw",
        "ub_write_bw",
        "l1_read_bw",
        "l1_write_bw",
        "main_mem_read_bw",
        "main_mem_write_bw",
    ]
    assert pmu.metric_columns("Memory", V4)[-2:] == ["aiv_l2_read_bw", "aiv_l2_write_bw"]
    assert "aic_ub_read_bw" not in pmu.metric_columns("Memory", V4)
    assert pmu.metric_columns("MemoryUB", CLOUD)[2:] == [
        "ub_read_bw_vector",
        "ub_write_bw_vector",
        "ub_read_bw_scalar",
        "ub_write_bw_scalar",
    ]
    assert pmu.metric_columns("ResourceConflictRatio", V4) == [
        "aicore_time",
        "aic_total_cycles",
        "aiv_time",
        "aiv_total_cycles",
        "aiv_vec_bankgroup_cflt_ratio",
        "aiv_vec_bank_cflt_ratio",
        "aiv_vec_resc_cflt_ratio",
    ]
    l0 = pmu.metric_columns("MemoryL0", V4)
    assert "aic_l0c_read_bw" not in l0 and "aic_l0c_read_bw_cube" in l0 and "aiv_l0a_read_bw" not in l0
    assert pmu.metric_columns("L2Cache", CLOUD)[2:] == [
        "write_cache_hit",
        "write_cache_miss_allocate",
        "r0_read_cache_hit",
        "r0_read_cache_miss_allocate",
        "r1_read_cache_hit",
        "r1_read_cache_miss_allocate",
    ]
    assert pmu.metric_columns("MemoryAccess", V4)[2:9] == [
        "aic_read_main_memory_datas",
        "aic_write_main_memory_datas",
        "aic_GM_to_L1_datas",
        "aic_L0C_to_L1_datas",
        "aic_L0C_to_GM_datas",
        "aic_GM_to_UB_datas",
        "aic_UB_to_GM_datas",
    ]
    assert pmu.metric_columns("PipelineExecuteUtilization", 7)[-3:] == [
        "fixpipe_exe_time",
        "fixpipe_exe_ratio",
        "memory_bound",
    ]
    custom = "Custom:0x1b,0x1c"
    assert pmu.metric_columns(custom, CLOUD, aic_events=(0x1B, 0x1C)) == [
        "aicore_time",
        "total_cycles",
        "r1b",
        "r1c",
    ]
    assert pmu.metric_columns(custom, V4, aic_events=(0x1B,), aiv_events=(0x2A,))[2:] == [
        "aic_r1b",
        "aiv_time",
        "aiv_total_cycles",
        "aiv_r2a",
    ]
    assert pmu.metric_columns("", CLOUD) == []


def test_unknown_group_and_bad_events_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown aic_metrics group 'Bogus'"):
        pmu.metric_columns("Bogus", CLOUD)
    with pytest.raises(ConfigError, match="hex PMU event ids"):
        pmu.parse_events("0x8,zz")
    assert pmu.parse_events("0x8,0xa, 0x500") == (0x8, 0xA, 0x500)


# ----------------------------------------------------------------------------- formulas


def test_pipe_utilization_ratios_icache_and_memory_bound() -> None:
    layout = pmu.build_layout("PipeUtilization", CLOUD, aic_events=PIPE, freq_mhz=800, ai_core_num=32)
    # cycles, then vec, mac, scalar, mte1, mte2, mte3, icache_req, icache_miss
    got = values(
        layout,
        counters(
            aic=[
                [1000, 100, 200, 300, 400, 500, 600, 50, 5],
                [0, 1, 1, 1, 1, 1, 1, 0, 7],
                [1000, 100, 0, 0, 0, 0, 0, 0, 7],
            ],
            n=3,
        ),
    )
    assert got["total_cycles"].tolist() == [1000, 0, 1000]
    # no cycles: the Python path keeps the raw count (CalculateAiCoreData._cal_pmu_metrics)
    assert got["vec_ratio"].tolist() == [0.1, 1.0, 0.1]
    assert got["mac_ratio"][0] == 0.2 and got["mte3_ratio"][0] == 0.6
    assert got["icache_miss_rate"][0] == 0.1  # r55 / r54
    # r54 = 0: the Python path keeps r55 / cycles (the raw r55 without cycles)
    assert got["icache_miss_rate"][1:].tolist() == [7.0, 0.007]
    assert got["memory_bound"][0] == pytest.approx(0.5 / 0.2)  # mte2 / max(mac, vec)
    # msprof's Python add_mem_bound: 0 when max(vec, mac) is 0; a zero mac alone does not matter
    assert got["memory_bound"][1:].tolist() == [1.0, 0.0]  # raw counts 1 / max(1, 1) without cycles
    assert np.isnan(got["vec_time"]).all() and np.isnan(got["aicore_time"]).all()  # host side


def test_exct_and_exe_ratios() -> None:
    exct = pmu.build_layout(
        "PipeUtilization", V4, aic_events=EXCT, aiv_events=PIPE, freq_mhz=800, ai_core_num=24
    )
    got = values(exct, counters(aic=[[1000, 10, 20, 30, 40, 50, 60, 0, 9]]))
    assert got["aic_mac_ratio"][0] == pytest.approx(0.03)  # (r416 + r417) / cycles
    assert got["aic_mte1_ratio"][0] == pytest.approx(0.04)  # r302
    assert got["aic_fixpipe_ratio"][0] == pytest.approx(0.06)  # r303
    assert got["aic_icache_miss_rate"][0] == 0.0  # C++: 0 when r54 is 0
    exe_events = (0x12C, 0x49, 0x4A, 0x9, 0x302, 0xC, 0xD, 0x303)
    exe = pmu.build_layout("PipelineExecuteUtilization", 7, aic_events=exe_events, freq_mhz=1000)
    got = values(exe, counters(aic=[[100, 1, 2, 3, 4, 5, 6, 7, 8]]))
    assert got["vec_exe_ratio"][0] == pytest.approx(0.01)
    assert got["mac_exe_ratio"][0] == pytest.approx(0.05)  # r49 + r4a
    assert got["fixpipe_exe_ratio"][0] == pytest.approx(0.08)
    assert got["memory_bound"][0] == pytest.approx(0.06 / 0.05)


def test_arithmetic_fops_per_chip() -> None:
    row = [[1000, 10, 20, 30, 40, 50, 60, 70]]  # r49 r4a r4b r4c r4d r4e r4f
    got = values(
        pmu.build_layout("ArithmeticUtilization", CLOUD, aic_events=ARITH, freq_mhz=1000), counters(aic=row)
    )
    assert got["mac_fp16_ratio"][0] == pytest.approx(0.01)
    assert got["vec_fp16_ratio"][0] == pytest.approx(0.09)  # (r4c + r4d) / cycles
    assert got["cube_fops"][0] == 10 * 8192 + 20 * 16384
    assert got["vector_fops"][0] == 40 * 128 + 50 * 64 + 30 * 64 + 60 * 64 + 70 * 32
    dc = values(
        pmu.build_layout("ArithmeticUtilization", DC, aic_events=ARITH, freq_mhz=1000), counters(aic=row)
    )
    assert dc["vector_fops"][0] == 40 * 128 + 50 * 64 + 30 * 64 + 60 * 16 + 70 * 16


def test_bandwidths_python_and_cpp_constants() -> None:
    gb = 1 << 33
    # 800 MHz and 800_000 cycles: 1 ms; a count of 2**33 / pipe gives 1000 GB/s
    python = pmu.build_layout("Memory", CLOUD, aic_events=MEMORY, freq_mhz=800)
    row = [[800_000, gb // 1024, 0, gb // 4096, gb // 2048, gb // 2048, 0, gb // 64, 0]]
    got = values(python, counters(aic=row))
    assert got["ub_read_bw"][0] == pytest.approx(1000.0)
    assert got["l1_read_bw"][0] == pytest.approx(1000.0)
    assert got["l1_write_bw"][0] == pytest.approx(1000.0)  # Python: 256 x 8
    assert got["main_mem_read_bw"][0] == pytest.approx(1000.0)  # 8 x 8
    cpp = pmu.build_layout("Memory", V4, aic_events=MEMORY, aiv_events=MEMORY, freq_mhz=800)
    got = values(cpp, counters(aic=row))
    assert got["aic_l1_write_bw"][0] == pytest.approx(500.0)  # C++: 128 x 8
    assert got["aic_l2_read_bw"][0] == pytest.approx(1000.0)
    assert got["aiv_ub_read_bw"][0] == 0.0  # AIC-only task: AIV side zero-filled
    l0_row = [[800_000, 0, 0, gb // 2048, 0, 0, gb // 8192, 0, 0]]  # l0b_read r21, l0c_read_bw_cube r28
    py_l0 = values(
        pmu.build_layout("MemoryL0", CLOUD, aic_events=MEMORY_L0, freq_mhz=800), counters(aic=l0_row)
    )
    cpp_l0 = values(
        pmu.build_layout("MemoryL0", V4, aic_events=MEMORY_L0, freq_mhz=800), counters(aic=l0_row)
    )
    assert py_l0["l0b_read_bw"][0] == pytest.approx(1000.0)  # 256 x 8
    assert cpp_l0["aic_l0b_read_bw"][0] == pytest.approx(2000.0)  # 256 x 16
    assert py_l0["l0c_read_bw_cube"][0] == pytest.approx(1000.0 / 4)  # 256 x 8
    assert cpp_l0["aic_l0c_read_bw_cube"][0] == pytest.approx(1000.0)  # 256 x 32
    ub = values(
        pmu.build_layout("MemoryUB", CLOUD, aic_events=MEMORY_UB, freq_mhz=800),
        counters(aic=[[800_000, 0, 0, gb // 128, 0, 0, 0, gb // 256, 0]]),
    )
    assert ub["ub_read_bw_scalar"][0] == pytest.approx(1000.0)  # 128 x 1
    assert ub["ub_read_bw_vector"][0] == pytest.approx(1000.0)  # 128 x 2
    # no cycles: the raw count in Python (_cal_pmu_metrics skips the formula), 0 in C++
    assert values(python, counters(aic=[[0, 5]]))["ub_read_bw"][0] == 5.0
    no_cycles = values(cpp, counters(aic=[[0, 0, 0, 5]], aiv=[[0, 5]]))  # aic r31, aiv r15
    assert no_cycles["aic_l1_read_bw"][0] == 0.0 and no_cycles["aiv_ub_read_bw"][0] == 0.0


def test_conflicts_l2_cache_memory_access_custom() -> None:
    got = values(
        pmu.build_layout("ResourceConflictRatio", CLOUD, aic_events=CONFLICT), counters(aic=[[200, 2, 4, 8]])
    )
    assert [
        got[c][0] for c in ("vec_bankgroup_cflt_ratio", "vec_bank_cflt_ratio", "vec_resc_cflt_ratio")
    ] == [
        0.01,
        0.02,
        0.04,
    ]
    got = values(pmu.build_layout("L2Cache", CLOUD, aic_events=L2), counters(aic=[[9, 1, 2, 3, 4, 5, 6]]))
    assert got["r1_read_cache_miss_allocate"][0] == 6 and got["write_cache_hit"][0] == 1
    access = pmu.build_layout("MemoryAccess", V4, aic_events=ACCESS, aiv_events=ACCESS)
    # r32 r3d r3e r206 r20c r50c r50d r50e
    got = values(access, counters(aic=[[1, 1000, 8, 16, 200, 600, 80, 16, 24]]))
    assert got["aic_read_main_memory_datas"][0] == (16 + 24) * 0.125
    assert got["aic_write_main_memory_datas"][0] == 10.0
    assert got["aic_GM_to_L1_datas"][0] == (1000 - 200) * 0.25
    assert got["aic_L0C_to_L1_datas"][0] == 25.0
    assert got["aic_L0C_to_GM_datas"][0] == (600 - 200) * 0.125
    assert got["aic_GM_to_UB_datas"][0] == 2.0 and got["aic_UB_to_GM_datas"][0] == 1.0
    custom = pmu.build_layout("Custom:0x1b,0x3", CLOUD, aic_events=(0x1B, 0x3))
    got = values(custom, counters(aic=[[50, 7, 9]]))
    assert (got["r1b"][0], got["r3"][0], got["total_cycles"][0]) == (7.0, 9.0, 50.0)


def test_missing_pmu_is_null_and_v4_zero_fills_the_other_side() -> None:
    layout = pmu.build_layout(
        "PipeUtilization", V4, aic_events=PIPE, aiv_events=PIPE, freq_mhz=800, ai_core_num=24
    )
    c = counters(aiv=[[1000, 500], [0]], n=2)
    c = pmu.Counters(c.aic_cycles, c.aic, c.aiv_cycles, c.aiv, c.has_aic, np.array([True, False]))
    got = values(layout, c)
    assert (
        got["aiv_vec_ratio"][0] == 0.5 and got["aic_mac_ratio"][0] == 0.0 and got["aic_total_cycles"][0] == 0
    )
    assert np.isnan(got["aiv_vec_ratio"][1]) and np.isnan(got["aic_total_cycles"][1])
    assert got["cube_utilization"][0] == 0.0 and np.isnan(got["cube_utilization"][1])


def test_cube_utilization() -> None:
    layout = pmu.build_layout(
        "PipeUtilization", V4, aic_events=PIPE, aiv_events=PIPE, freq_mhz=800, ai_core_num=24
    )
    # 1_920_000 cycles / (800 MHz * 24 cores) = 100 µs of all cores; over a 200 µs task: 50 %
    got = values(layout, counters(aic=[[1_920_000, 0, 960_000]]), duration_ns=200_000)
    assert got["cube_utilization"][0] == pytest.approx(50.0)
    # msprof's Python cube_usage: 0 when the duration, the cycles or the (rounded) mac ratio is 0
    assert (
        values(layout, counters(aic=[[1_920_000, 0, 960_000]]), duration_ns=0)["cube_utilization"][0] == 0.0
    )
    assert values(layout, counters(aic=[[1_920_000]]), duration_ns=200_000)["cube_utilization"][0] == 0.0
    rounds_to_zero = counters(aic=[[100_000, 0, 40]])  # mac ratio 0.0004 prints as 0.0
    assert values(layout, rounds_to_zero, duration_ns=200_000)["cube_utilization"][0] == 0.0


def test_memory_bound_reads_the_ratios_as_op_summary_rounds_them() -> None:
    layout = pmu.build_layout("PipeUtilization", CLOUD, aic_events=PIPE, freq_mhz=800, ai_core_num=32)
    # vec 0.1234, mac 0.0004, mte2 0.2346 -> rounded 0.123, 0.0, 0.235 -> 0.235 / 0.123
    got = values(layout, counters(aic=[[10_000, 1234, 4, 0, 0, 2346]]))
    assert got["memory_bound"][0] == pytest.approx(0.235 / 0.123)
    cube = pmu.build_layout("PipeUtilization", CLOUD, aic_events=PIPE, freq_mhz=800, ai_core_num=32)
    assert "cube_utilization" in cube.columns


# ----------------------------------------------------------------------------- host side


def _joined(
    layout: pmu.MetricLayout, metrics: dict[str, list[float | None]], **host: list[object]
) -> pa.RecordBatch:
    columns = {name: pa.array(v, pa.float64()) for name, v in metrics.items()}
    columns |= {name: pa.array(v) for name, v in host.items()}
    for name in layout.columns:
        if name not in columns:
            columns[name] = pa.nulls(len(next(iter(columns.values()))), pa.float64())
    return pa.RecordBatch.from_pydict(columns)


def test_finish_metrics_python_path() -> None:
    layout = pmu.build_layout("PipeUtilization", CLOUD, aic_events=PIPE, freq_mhz=800, ai_core_num=32)
    batch = _joined(
        layout,
        {"total_cycles": [1_600_000, 1_600_000, 1_000], "vec_ratio": [0.25, 0.5, 0.5]},
        block_dim=[64, None, 3],
        mix_block_dim=[0, 0, 0],
        task_type=["AI_CORE", "AI_CORE", "AI_CORE"],
    )
    out = pmu.finish_metrics(batch, layout)
    # 1_600_000 cycles at 800 MHz = 2000 µs over 64 blocks, 2 waves of 32 cores: 62.5 µs
    time = out.column("aicore_time").to_pylist()
    # no block dim: 0, as Utils.cal_total_time returns when block_num is 0 (no GE task)
    assert time[0] == 62.5 and time[1] == 0.0
    assert out.column("vec_time").to_pylist()[1] == 0.0
    assert time[2] == round(1000 / 800 / 3 * 1, 2)  # Python rounds to 2 decimals
    assert out.column("vec_time").to_pylist()[0] == 62.5 * 0.25
    assert out.column("mac_time").to_pylist()[0] is None  # no ratio


def test_finish_metrics_v4_mix_uses_mix_block_dim_on_the_secondary_side() -> None:
    layout = pmu.build_layout(
        "PipeUtilization", V4, aic_events=PIPE, aiv_events=PIPE, freq_mhz=1000, ai_core_num=24, aiv_num=48
    )
    batch = _joined(
        layout,
        {
            "aic_total_cycles": [48_000, 48_000],
            "aiv_total_cycles": [96_000, 96_000],
            "aiv_vec_ratio": [0.5, 0.5],
        },
        block_dim=[24, 48],
        mix_block_dim=[48, 24],
        task_type=pa.array(["MIX_AIC", "MIX_AIV"]).dictionary_encode(),
    )
    out = pmu.finish_metrics(batch, layout)
    aic, aiv = out.column("aicore_time").to_pylist(), out.column("aiv_time").to_pylist()
    # MIX_AIC: AIC main (block 24, one wave of 24 cores): 48 µs / 24 = 2 µs;
    # AIV secondary (mix block 48, one wave of 48): 96 µs / 48 = 2 µs
    assert aic[0] == pytest.approx(2.0) and aiv[0] == pytest.approx(2.0)
    # MIX_AIV: AIC secondary uses mix 24; AIV main uses block 48
    assert aic[1] == pytest.approx(2.0) and aiv[1] == pytest.approx(2.0)
    assert out.column("aiv_vec_time").to_pylist()[0] == pytest.approx(1.0)
    assert not math.isnan(aic[0])


def test_finish_metrics_without_block_dim_or_counters() -> None:
    layout = pmu.build_layout(
        "PipeUtilization", V4, aic_events=EXCT, aiv_events=PIPE, freq_mhz=1000, ai_core_num=24, aiv_num=48
    )
    batch = _joined(
        layout,
        {"aic_total_cycles": [48_000, None], "aic_mac_ratio": [0.5, None]},
        block_dim=[0, 24],
        mix_block_dim=[0, 0],
        task_type=["AI_CORE", "AI_CORE"],
    )
    out = pmu.finish_metrics(batch, layout)
    # C++ CalculatorTotalTime: 0 when the block num is 0; a task without PMU counters stays null
    assert out.column("aicore_time").to_pylist() == [0.0, None]
    assert out.column("aic_mac_time").to_pylist() == [0.0, None]


def test_finish_metrics_v4_custom_rounds_time_as_python() -> None:
    # Custom: on CHIP_V4_1_0 is computed by msprof's Python FftsPmuCalculator: Utils.cal_total_time rounds
    # 1000 cycles / 1000 MHz / 3 blocks = 0.3333 µs to 0.33
    layout = pmu.build_layout(
        "Custom:0x1b,0x3", V4, aic_events=(0x1B, 0x3), aiv_events=(0x1B, 0x3), freq_mhz=1000, ai_core_num=24
    )
    batch = _joined(
        layout, {"aic_total_cycles": [1000]}, block_dim=[3], mix_block_dim=[0], task_type=["AI_CORE"]
    )
    assert pmu.finish_metrics(batch, layout).column("aicore_time").to_pylist() == [0.33]
    pipe = pmu.build_layout(
        "PipeUtilization", V4, aic_events=PIPE, aiv_events=PIPE, freq_mhz=1000, ai_core_num=24
    )
    batch = _joined(
        pipe, {"aic_total_cycles": [1000]}, block_dim=[3], mix_block_dim=[0], task_type=["AI_CORE"]
    )
    assert pmu.finish_metrics(batch, pipe).column("aicore_time").to_pylist()[0] == pytest.approx(1 / 3)
