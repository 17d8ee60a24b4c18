"""The simulator: determinism, decodability, slicing, truth, wraps, memory cases, both chips."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.codecs import DecodeContext, StreamTraits, codec_for_file
from profstream.codecs.framework import BLOCK_FREE, C_CALL, FREE, MALLOC, PY_CALL
from profstream.errors import ConfigError
from profstream.simulate import SimulationConfig, SimulationResult, simulate
from profstream.simulate.config import CHIPS
from profstream.simulate.python_tracer import GC_THRESHOLD_MS
from profstream.simulate.truth import union_length
from profstream.simulate.workload import TASK_ID_SPAN

SMALL = {"steps": 3, "ops_per_step": 48, "slice_bytes": 4096}
RECORD_SIZES = {"hwts": 64, "aicore": 128, "stars_soc": 64, "ffts_profile": 128, "task_track": 64}

Run = tuple[SimulationResult, Path, Path]
Stream = dict[str, Any]


def _run(tmp: Path, **settings_: Any) -> Run:
    out, truth = tmp / "out", tmp / "truth"
    return simulate(SimulationConfig(**settings_), out, truth), out, truth


@pytest.fixture(scope="module", params=["910A", "910B"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A small two-device torch_npu run of each chip."""
    return _run(
        tmp_path_factory.mktemp(request.param), chip=request.param, devices=2, framework="torch_npu", **SMALL
    )


def _numbers(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s*:\s*(\d+)$", path.read_text(), re.M)}


def _traits(prof: Path) -> StreamTraits:
    info = json.loads((prof / "host" / "info.json").read_text())
    return StreamTraits(platform=int(info["platform_version"]), version=info["version"])


def _streams(prof: Path, framework: Path | None = None) -> dict[tuple[str, int, str], Stream]:
    """Every raw stream of a collection, its slices concatenated in order and decoded."""
    traits = _traits(prof)
    groups: dict[tuple[str, int, str], list[tuple[int, Path]]] = defaultdict(list)
    dirs = [*prof.glob("*/data"), *([framework / "FRAMEWORK"] if framework else [])]
    for path in (p for d in dirs for p in d.iterdir()):
        found = codec_for_file(path.name, traits)
        if found is None:
            assert path.name.endswith(".done"), path
            continue
        codec, match = found
        names = match.groupdict()
        key = (codec.family, int(names.get("dev") or -1), names.get("aging") or "")
        groups[key].append((int(names.get("slice") or 0), path))
    out = {}
    for key, files in groups.items():
        files.sort()
        raw = b"".join(p.read_bytes() for _, p in files)
        codec = codec_for_file(files[0][1].name, traits)
        assert codec is not None
        decoded = codec[0].decode(
            np.frombuffer(raw, np.uint8), DecodeContext(path=str(files[0][1]), traits=traits)
        )
        assert decoded.consumed == len(raw), key
        assert decoded.dropped == 0, (key, decoded.drop_reason)
        columns = {name: decoded.batch.column(name) for name in decoded.batch.schema.names}
        out[key] = {"rows": decoded.batch.num_rows, "files": [p for _, p in files], "raw": raw, **columns}
    return out


def _np(values: Any) -> np.ndarray:
    return values.to_numpy(zero_copy_only=False) if isinstance(values, pa.Array | pa.ChunkedArray) else values


def _host(streams: dict[tuple[str, int, str], Stream], family: str) -> dict[str, np.ndarray]:
    """A host family's columns, aging and unaging groups together."""
    parts = [s for (f, _, _), s in streams.items() if f == family]
    names = [n for n in parts[0] if n not in ("rows", "files", "raw")]
    return {n: np.concatenate([_np(p[n]) for p in parts]) for n in names}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    """The output is a function of the config: same seed -> identical trees, another seed -> other bytes."""
    first = _tree(_run(tmp_path / "a", chip="910B", framework="torch_npu", **SMALL)[1])
    second = _tree(_run(tmp_path / "b", chip="910B", framework="torch_npu", **SMALL)[1])
    other = _tree(_run(tmp_path / "c", chip="910B", framework="torch_npu", seed=7, **SMALL)[1])
    assert first == second
    assert first.keys() != other.keys() or any(first[k] != other[k] for k in first)


def test_every_file_decodes_and_counts_match_truth(run: Run) -> None:
    """Each stream decodes whole with its codec, and its row count is the truth's record count."""
    result, _, truth = run
    counts = pq.read_table(truth / "counts.parquet").to_pylist()
    streams = _streams(result.roots[0], result.framework_dirs[0])
    decoded = {key: s["rows"] for key, s in streams.items()}
    expected = {(c["family"], c["device_id"], c["aging"]): c["records"] for c in counts}
    assert decoded == expected
    families = {key[0] for key in decoded}
    common = {"ts_track", "npu_mem", "npu_module_mem", "api_event", "task_track", "node_basic_info"}
    common |= {"tensor_info", "hccl_info", "hccl_op_info", "task_memory_info", "hash_dic", "type_info_dic"}
    common |= {"torch_op_range", "torch_op_mark", "torch_memory_usage", "memcpy_info", "graph_id_map"}
    common |= {"torch_python_tracer_func", "torch_python_tracer_hash", "torch_gc_record"}
    assert common <= families
    platform = _traits(result.roots[0]).platform
    assert ({"stars_soc", "ffts_profile", "lpm_freq"} <= families) == (platform == 5)
    assert ({"hwts", "aicore"} <= families) == (platform == 1)


def test_done_files_state_real_sizes(run: Run) -> None:
    """Every data slice and control file has a .done whose filesize is its size; data slices add times."""
    root = run[1]
    files = [
        p
        for p in root.rglob("*")
        if p.is_file() and not p.name.endswith(".done") and "FRAMEWORK" not in p.parts
    ]
    files = [p for p in files if p.suffix != ".json" or p.parent.name != root.name]
    for path in files:
        if path.name.startswith("profiler_info"):
            continue
        done = Path(f"{path}.done")
        assert done.exists(), path
        numbers = _numbers(done)
        assert numbers["filesize"] == path.stat().st_size
        if path.parent.name == "data":
            assert done.read_text().splitlines()[1:] == [
                f"starttime:{numbers['starttime']}",
                f"endtime  :{numbers['endtime']}",
            ]
            assert numbers["starttime"] <= numbers["endtime"]
        else:
            assert set(numbers) == {"filesize"}


def test_slices_roll_at_slice_bytes_and_records_straddle(run: Run) -> None:
    """Slices roll once they reach slice_bytes (not beyond one chunk more), cutting records in two."""
    result = run[0]
    limit = SMALL["slice_bytes"]
    straddles = 0
    for count in result.counts:
        sizes = [p.stat().st_size for p in count.files]
        if not count.files or count.files[0].parent.name != "data":
            continue
        assert all(limit <= s < 2 * limit for s in sizes[:-1]), (count.family, sizes)
        assert 0 < sizes[-1] < 2 * limit
        size = RECORD_SIZES.get(count.family)
        straddles += sum(s % size != 0 for s in sizes[:-1]) if size else 0
    assert straddles > 0


def test_device_times_convert_to_the_truth(run: Run) -> None:
    """Device task logs, converted with the control files (spec §3.2), give the truth's tasks exactly."""
    result, _, truth = run
    prof = result.roots[0]
    streams = _streams(prof)
    tasks = pq.read_table(truth / "tasks.parquet")
    for device in (0, 1):
        folder = prof / f"device_{device}"
        info = json.loads((folder / f"info.json.{device}").read_text())
        freq = int(info["DeviceInfo"][0]["hwts_frequency"])
        host_freq = float(info["CPU"][0]["Frequency"])
        host, dev = (
            _numbers(folder / f"host_start.log.{device}"),
            _numbers(folder / f"dev_start.log.{device}"),
        )
        base = host["clock_monotonic_raw"] + int(host["cntvct_diff"] * 1000 / host_freq)
        stars = info["platform_version"] == "5"
        log = streams["stars_soc" if stars else "hwts", device, ""]
        kind = _np(log["func_type" if stars else "log_type"])
        ns = base + (_np(log["syscnt"]).astype(np.int64) - dev["cntvct"]) * 1000 // freq
        mine = tasks.filter(pa.compute.equal(tasks["device_id"], device))
        for code, column in ((0, "start_ns"), (1, "end_ns")):
            got = set(
                zip(
                    _np(log["stream_id"])[kind == code].tolist(),
                    _np(log["task_id"])[kind == code].tolist(),
                    ns[kind == code].tolist(),
                    strict=True,
                )
            )
            want = set(
                zip(
                    _np(mine["stream_id"]).tolist(),
                    _np(mine["task_id"]).tolist(),
                    _np(mine[column]).tolist(),
                    strict=True,
                )
            )
            assert got == want


def test_host_counters_agree_between_start_logs(run: Run) -> None:
    """Host timestamps convert to the same ns with host/host_start.log and with any device's log."""
    prof = run[0].roots[0]
    api = _host(_streams(prof), "api_event")["begin_time"].astype(np.int64)
    host = _numbers(prof / "host" / "host_start.log")
    via_host = host["clock_monotonic_raw"] + (api - host["cntvct"]) * 10
    for device in (0, 1):
        log = _numbers(prof / f"device_{device}" / f"host_start.log.{device}")
        via_device = log["clock_monotonic_raw"] + log["cntvct_diff"] * 10 + (api - log["cntvct"]) * 10
        np.testing.assert_array_equal(via_device, via_host)


def test_task_ids_wrap_with_flips_on_both_sides(run: Run) -> None:
    """Ids wrap past 65535; host FLIP_TASK and device tag-14 records split the batches as the truth says."""
    result, _, truth = run
    prof = result.roots[0]
    streams = _streams(prof)
    tasks = pq.read_table(truth / "tasks.parquet")
    assert _np(tasks["batch_id"]).max() >= 1
    assert _np(tasks["task_id"]).max() >= TASK_ID_SPAN - 40
    track = _host(streams, "task_track")
    is_flip = track["task_type"] == 98
    assert is_flip.any()
    assert (track["task_id"][is_flip] == 0).all()
    for device in (0, 1):
        ts = streams["ts_track", device, ""]
        tag = _np(ts["tag"])
        flip_dev = {
            (s, f)
            for s, f in zip(
                _np(ts["stream_id"])[tag == 14].tolist(), _np(ts["flip_num"])[tag == 14].tolist(), strict=True
            )
        }
        mine = is_flip & (track["device_id"] == device)
        flip_host = set(zip(track["stream_id"][mine].tolist(), track["batch_id"][mine].tolist(), strict=True))
        assert flip_dev == flip_host
        assert flip_dev
        # host side: a task's batch field = number of flips of its stream before it
        for stream, _ in flip_host:
            on = (track["device_id"] == device) & (track["stream_id"] == stream)
            flips_at = np.sort(track["timestamp"][on & is_flip])
            others = on & ~is_flip
            batch = np.searchsorted(flips_at, track["timestamp"][others], side="right")
            np.testing.assert_array_equal(batch, track["batch_id"][others])


def test_memory_streams_hold_the_irregular_cases(run: Run) -> None:
    """Unmatched frees, never-freed allocations, and BLOCK_FREE both before and after FREE occur."""
    result = run[0]
    streams = _streams(result.roots[0], result.framework_dirs[0])
    ge = _host(streams, "task_memory_info")
    order = np.argsort(ge["timestamp"], kind="stable")
    addr, size = ge["addr"][order], ge["size"][order]
    first_alloc = {a: i for i, a in reversed(list(enumerate(addr.tolist()))) if size[i] > 0}
    first_free = {a: i for i, a in reversed(list(enumerate(addr.tolist()))) if size[i] < 0}
    assert any(a not in first_alloc or first_free[a] < first_alloc[a] for a in first_free)  # unmatched free
    last = {a: i for i, a in enumerate(addr.tolist())}
    assert any(size[i] > 0 for i in last.values())  # allocation never freed
    torch = streams["torch_memory_usage", -1, ""]
    kind, ptr, time = _np(torch["data_type"]), _np(torch["ptr"]), _np(torch["time_ns"])
    assert (_np(torch["alloc_size"])[kind == MALLOC] > 0).all()
    assert (_np(torch["alloc_size"])[kind != MALLOC] < 0).all()
    frees = sorted(zip(ptr[kind == FREE].tolist(), time[kind == FREE].tolist(), strict=True))
    blocks = sorted(zip(ptr[kind == BLOCK_FREE].tolist(), time[kind == BLOCK_FREE].tolist(), strict=True))
    assert len(frees) == len(blocks)
    before = sum(b[1] < f[1] for f, b in zip(frees, blocks, strict=True))
    assert 0 < before < len(frees)


def test_op_ranges_are_written_when_ops_end(run: Run) -> None:
    """torch_npu reports an op range from its exit callback: the file is in end order, each
    ProfilerStep after the ops it holds."""
    result = run[0]
    ops = _streams(result.roots[0], result.framework_dirs[0])["torch_op_range", -1, ""]
    start, end = _np(ops["start_ns"]), _np(ops["end_ns"])
    assert (np.diff(end) >= 0).all() and (np.diff(start) < 0).any()
    names = [str(n) for n in ops["name"]]
    steps = [i for i, name in enumerate(names) if name.startswith("ProfilerStep#")]
    assert len(steps) >= SMALL["steps"]
    is_step = np.zeros(len(names), bool)
    is_step[steps] = True
    for i in steps:
        inside = (start >= start[i]) & (end <= end[i]) & ~is_step
        assert inside.any() and np.flatnonzero(inside).max() < i


def test_dictionaries_resolve_every_id(run: Run) -> None:
    """Every (level, type) and every hash id the host records carry is in type_info_dic / hash_dic."""
    streams = _streams(run[0].roots[0])
    hashes = set(_host(streams, "hash_dic")["hash"].tolist())
    types = _host(streams, "type_info_dic")
    known = set(zip(types["level"].tolist(), types["type"].tolist(), strict=True))
    for family in (
        "api_event",
        "task_track",
        "node_basic_info",
        "tensor_info",
        "hccl_info",
        "hccl_op_info",
        "task_memory_info",
        "memcpy_info",
        "graph_id_map",
    ):
        rows = _host(streams, family)
        assert set(zip(rows["level"].tolist(), rows["type"].tolist(), strict=True)) <= known, family
        for name in (n for n in rows if n.endswith("_hash")):
            assert set(rows[name].tolist()) - {0} <= hashes, (family, name)
    track = _host(streams, "task_track")
    assert {(5000, t) for t in track["task_type"].tolist()} <= known
    api = _host(streams, "api_event")
    launches = api["level"] == 10000
    assert set(api["item_id"][launches].tolist()) <= hashes
    events = api["is_event"]
    assert (api["level"][events] == 15000).all()
    assert sorted(set(api["request_id"][events].tolist())) == [1, 2, 3]


def test_control_files_and_names(run: Run) -> None:
    """Directory names, host sample.json devices 64, device clocks and profiler_info follow the real files."""
    result = run[0]
    prof, framework = result.roots[0], result.framework_dirs[0]
    assert re.fullmatch(r"PROF_\d{6}_\d{17}_[A-Z]{16}", prof.name)
    assert re.fullmatch(r"[\w-]+_\d+_\d{17}_ascend_pt", framework.name)
    assert prof.parent == framework
    assert json.loads((prof / "host" / "sample.json").read_text())["devices"] == "64"
    info = json.loads((prof / "host" / "info.json").read_text())
    chip = CHIPS["910B" if info["platform_version"] == "5" else "910A"]
    for device in (0, 1):
        folder = prof / f"device_{device}"
        assert json.loads((folder / "sample.json").read_text())["devices"] == str(device)
        device_info = json.loads((folder / f"info.json.{device}").read_text())["DeviceInfo"][0]
        assert device_info["hwts_frequency"] == str(chip.hwts_freq_mhz)
        assert device_info["aic_frequency"] == str(chip.aic_freq_mhz)
        assert (folder / f"host_start.log.{device}").read_text().startswith(f"[Device{device}]\n")
        assert set(_numbers(folder / f"dev_start.log.{device}")) == {"clock_monotonic_raw", "cntvct"}
        for name in (f"start_info.{device}", f"end_info.{device}"):
            assert not (folder / name).read_text().endswith("\n")
    begin = json.loads((prof / "host" / "start_info").read_text())
    assert int(begin["collectionTimeBegin"]) * 1000 - int(begin["clockMonotonicRaw"]) > 0
    profiler_info = json.loads((framework / "profiler_info.json").read_text())
    assert profiler_info["start_info"]["syscnt_enable"] is True
    assert profiler_info["config"]["common_config"]["with_stack"] is True
    assert profiler_info["config"]["experimental_config"]["_gc_detect_threshold"] == GC_THRESHOLD_MS
    assert {p.name for p in (framework / "FRAMEWORK").iterdir()} == {
        "torch.op_range",
        "torch.op_mark",
        "torch.memory_usage",
        "torch.python_tracer_func",
        "torch.python_tracer_hash",
        "torch.gc_record",
    }


def _framework_ns(framework: Path) -> Any:
    """torch_npu's conversion of raw framework times (syscnt) to host monotonic ns (§1.4)."""
    start = json.loads((framework / "profiler_info.json").read_text())["start_info"]
    return lambda cnt: (
        (np.asarray(cnt, np.int64) - start["start_cnt"]) * 1000 // start["freq"] + start["start_monotonic"]
    )


def test_python_tracer_records_are_the_truths_calls(run: Run) -> None:
    """Per thread, the records (start frames last in the file, timed before its first record) are the
    truth's calls: a call record at each call's start, of its kind and name, at the position its Python id
    says; a return at each end but the start frames'. Calls nest with each other and with the torch ops
    (ProfilerSteps aside, which the start frames cover); each step has two Block modules."""
    result, _, truth = run
    framework = result.framework_dirs[0]
    streams = _streams(result.roots[0], framework)
    to_ns = _framework_ns(framework)
    func = streams["torch_python_tracer_func", -1, ""]
    hashes = streams["torch_python_tracer_hash", -1, ""]
    names = dict(zip(_np(hashes["key_hash"]).tolist(), [str(v) for v in hashes["value"]], strict=True))
    ts, tid, key, tag = (_np(func[n]) for n in ("ts", "thread_id", "key_hash", "tag"))
    assert set(key.tolist()) <= set(names)
    tids = sorted(set(tid.tolist()))
    assert len(tids) == 2  # one Python thread per device
    frames = 3 * len(tids)
    assert (tag[-frames:] == PY_CALL).all() and (ts[-frames:] < ts[0]).all()
    assert (tag[:-frames] != PY_CALL).any()
    calls = pq.read_table(truth / "python_calls.parquet").to_pylist()
    ranges = streams["torch_op_range", -1, ""]
    op_names = [str(n) for n in ranges["name"]]
    op_start, op_end = to_ns(_np(ranges["start_ns"])), to_ns(_np(ranges["end_ns"]))
    op_tid = _np(ranges["start_thread_id"])
    for thread in tids:
        mine = tid == thread
        order = np.argsort(to_ns(ts[mine]), kind="stable")  # the start frames' times are the smallest
        times, keys, tags = to_ns(ts[mine])[order], key[mine][order], tag[mine][order]
        rows = [c for c in calls if c["tid"] == thread]
        assert len(times) == 2 * len(rows) - 3
        assert sorted(times.tolist()) == sorted(
            [c["start_ns"] for c in rows] + [c["end_ns"] for c in rows if c["python_id"] >= 3]
        )
        objects: dict[str, str] = {}
        by_id = {c["python_id"]: c for c in rows}
        for c in rows:
            i = c["python_id"]
            assert times[i] == c["start_ns"] and tags[i] == (C_CALL if c["kind"] == "c" else PY_CALL)
            written = names[int(keys[i])]
            if c["kind"] == "module":
                cls, _, obj = written.partition("######")
                assert c["name"] == f"nn.Module: {cls}_{c['module_id']}"
                assert objects.setdefault(c["name"], obj) == obj  # one object per printed module
            else:
                assert written == c["name"] and c["module_id"] is None
            parent = by_id[c["parent_id"]]
            if i:
                assert parent["python_id"] < i
                assert parent["start_ns"] <= c["start_ns"] and c["end_ns"] <= parent["end_ns"]
        assert len(set(objects.values())) == len(objects)
        steps = [c for c in rows if c["name"] == "main.py(57): train_step"]
        assert len(steps) == SMALL["steps"]
        assert {c["name"] for c in rows if c["name"].startswith("nn.Module: Block_")} >= {
            "nn.Module: Block_0",
            "nn.Module: Block_1",
        }
        spans = np.array([(c["start_ns"], c["end_ns"]) for c in rows if c["python_id"] >= 3])
        for start, end, name, op in zip(op_start, op_end, op_names, op_tid, strict=True):
            if op != thread or name.startswith("ProfilerStep#"):
                continue
            enclosing = (spans[:, 0] < start) & (end < spans[:, 1])
            disjoint = (spans[:, 1] < start) | (end < spans[:, 0])
            assert (enclosing | disjoint).all() and enclosing.any(), name


def test_gc_records_are_the_truths_collections(run: Run) -> None:
    """torch.gc_record holds the truth's collections, each at least the profiler_info threshold long and
    between two steps' Python calls."""
    result, _, truth = run
    framework = result.framework_dirs[0]
    streams = _streams(result.roots[0], framework)
    to_ns = _framework_ns(framework)
    gc = streams["torch_gc_record", -1, ""]
    got = list(
        zip(_np(gc["process_id"]).tolist(), to_ns(_np(gc["start_ns"])), to_ns(_np(gc["end_ns"])), strict=True)
    )
    expected = pq.read_table(truth / "gc.parquet").to_pylist()
    assert [(p, int(s), int(e)) for p, s, e in got] == [
        (g["pid"], g["start_ns"], g["end_ns"]) for g in expected
    ]
    assert len(expected) == 2 and all(g["tid"] == g["pid"] for g in expected)
    assert all(g["end_ns"] - g["start_ns"] >= GC_THRESHOLD_MS * 1e6 for g in expected)
    calls = pq.read_table(truth / "python_calls.parquet").to_pylist()
    for g in expected:
        assert not any(
            c["start_ns"] < g["end_ns"] and g["start_ns"] < c["end_ns"] for c in calls if c["python_id"] >= 3
        )


def test_tracer_and_gc_switches_leave_the_other_streams_alone(tmp_path: Path) -> None:
    """Without with_stack and gc_detect the run writes the same other files byte for byte (also under
    target_bytes, which leaves these files out), and profiler_info.json says they are off."""
    settings_ = {
        "chip": "910B",
        "framework": "torch_npu",
        "ops_per_step": 32,
        "steps": 1,
        "target_bytes": 3 << 20,
    }
    on = _tree(_run(tmp_path / "on", **settings_)[1])
    off = _tree(_run(tmp_path / "off", with_stack=False, gc_detect=False, **settings_)[1])
    added = {k for k in on if k.rsplit("/", 1)[-1].startswith(("torch.python_tracer", "torch.gc_record"))}
    assert len(added) == 3 and on.keys() - off.keys() == added and off.keys() <= on.keys()
    [info] = [k for k in off if k.endswith("profiler_info.json")]
    assert {k: v for k, v in on.items() if k not in added and k != info} == {
        k: v for k, v in off.items() if k != info
    }
    config = json.loads(off[info])["config"]
    assert config["common_config"]["with_stack"] is False
    assert config["experimental_config"]["_gc_detect_threshold"] is None


def test_pmu_counters_fit_the_cycles_and_the_metrics_group(tmp_path: Path) -> None:
    """Counters never exceed the task's cycles, and a 3-event group leaves counters 3-7 at zero."""
    for chip, family in (("910A", "aicore"), ("910B", "ffts_profile")):
        result, _, _ = _run(
            tmp_path / chip, chip=chip, aic_metrics="ResourceConflictRatio", steps=2, ops_per_step=32
        )
        pmu = _streams(result.roots[0])[family, 0, ""]
        cycles = _np(pmu["total_cycle"]).astype(np.int64)
        counters = np.stack([_np(pmu[f"pmu_{i}"]).astype(np.int64) for i in range(8)], axis=1)
        assert (cycles > 0).all()
        assert (counters[:, :3] <= cycles[:, None]).all()
        assert (counters[:, :3] > 0).any()
        assert (counters[:, 3:] == 0).all()


def test_steps_truth_is_consistent(run: Run) -> None:
    """Per step: computing + not-overlapped communication + free = window, overlap within bounds."""
    steps = pq.read_table(run[2] / "steps.parquet").to_pylist()
    assert len(steps) == 2 * SMALL["steps"]
    for row in steps:
        window = row["step_end_ns"] - row["step_start_ns"]
        assert row["computing_ns"] + row["comm_not_overlapped_ns"] + row["free_ns"] == window
        assert 0 <= row["overlapped_ns"] <= row["communication_ns"]
        assert row["computing_ns"] > 0
        assert row["free_ns"] > 0
        assert row["step_start_ns"] < row["model_start_ns"] < row["fp_start_ns"] < row["bp_end_ns"]
        assert row["bp_end_ns"] <= row["iter_end_ns"] <= row["model_end_ns"] <= row["step_end_ns"]
    tasks = pq.read_table(run[2] / "tasks.parquet")
    for row in steps:
        mask = (_np(tasks["device_id"]) == row["device_id"]) & (_np(tasks["iteration"]) == row["iteration"])
        assert (_np(tasks["start_ns"])[mask] > row["step_start_ns"]).all()
        assert (_np(tasks["end_ns"])[mask] < row["step_end_ns"]).all()


intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 30)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_union_length_matches_a_brute_force_count(spans: list[tuple[int, int]]) -> None:
    """union_length equals the number of unit cells covered, counted one by one."""
    starts = np.array([s for s, _ in spans], np.int64)
    ends = starts + np.array([d for _, d in spans], np.int64)
    covered = np.zeros(256, bool)
    for s, e in zip(starts, ends, strict=True):
        covered[s:e] = True
    assert union_length(starts, ends) == int(covered.sum())


def test_target_bytes_keeps_going_until_reached(tmp_path: Path) -> None:
    """With target_bytes the run adds chunks of steps past ``steps`` until the raw size is reached."""
    target = 3 << 20
    result, _, _ = _run(tmp_path, chip="910A", ops_per_step=32, steps=1, target_bytes=target)
    assert result.steps > 1
    assert target <= result.bytes < 2 * target


def test_single_device_without_framework_has_no_framework_dir(tmp_path: Path) -> None:
    """framework none writes a bare PROF directory with one device and no FRAMEWORK files."""
    result, out, _ = _run(tmp_path, chip="910B", steps=1, ops_per_step=16)
    assert result.framework_dirs == ()
    assert [p.name for p in out.iterdir()] == [result.roots[0].name]
    assert sorted(p.name for p in result.roots[0].iterdir()) == ["device_0", "host"]


@pytest.mark.parametrize(
    ("key", "value"),
    [("steps", 0), ("ops_per_step", 4), ("aic_metrics", "Nope"), ("slice_bytes", 10), ("target_bytes", 0)],
)
def test_bad_settings_name_their_key(key: str, value: Any) -> None:
    """An invalid setting raises a ConfigError naming the setting."""
    with pytest.raises(ConfigError) as info:
        SimulationConfig(**{key: value})
    assert info.value.key == f"simulate.{key}"


def test_ranks_get_their_own_directories(tmp_path: Path) -> None:
    """Each rank writes its own *_ascend_pt dir with profiler_info_<rank>.json and its own device ids."""
    result, _, truth = _run(tmp_path, chip="910B", ranks=2, framework="torch_npu", steps=2, ops_per_step=16)
    assert len(result.roots) == len(result.framework_dirs) == 2
    for rank, (prof, framework) in enumerate(zip(result.roots, result.framework_dirs, strict=True)):
        info = json.loads((framework / f"profiler_info_{rank}.json").read_text())
        assert info["rank_id"] == rank
        assert [p.name for p in prof.glob("device_*")] == [f"device_{rank}"]
        hccl = _host(_streams(prof), "hccl_info")
        assert set(hccl["local_rank"].tolist()) == {rank}
        assert set(hccl["rank_size"].tolist()) == {2}
    counts = pq.read_table(truth / "counts.parquet")
    assert set(_np(counts["rank"]).tolist()) == {0, 1}
