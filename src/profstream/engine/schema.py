"""The canonical tables: every operator writes, and every sink reads, these schemas.

Conventions (DESIGN.md "Data flow"): times are int64 nanoseconds on the host monotonic clock
(``*_ns``); sizes are bytes; strings that repeat are dictionary-encoded; ids are int64 unless a
narrower type is what the raw record holds. A value that is absent is a null, never a sentinel,
except where msprof itself prints the sentinel (``context_id`` 4294967295, ``model_id`` 4294967295),
so sinks can reproduce it. Conversion to microseconds happens only in sinks.

The ``tasks`` table has a variable tail: the PMU metric columns of the collection's
``aic_metrics`` group (float64, msprof's metric names without units, e.g. ``aic_mac_ratio``), see
:func:`tasks_schema`. Every other table is fixed here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa

STRING = pa.string()
DICT = pa.dictionary(pa.int32(), STRING)
I64 = pa.int64()
I32 = pa.int32()
F64 = pa.float64()

#: msprof's "no context" / "no model" value (msprof_outputs.md §2.1, §4b)
NO_ID = 4294967295


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, kind) for name, kind in fields])


#: one row per device task after pairing and the host join (op_summary / kernel_details rows)
TASKS_BASE = _schema(
    ("device_id", I32),
    ("stream_id", I32),  # logic stream id (after the stream-expand reconstruction)
    ("task_id", I32),
    ("batch_id", I32),  # task-id wraps (flip number)
    ("context_id", I64),  # FFTS+ sub-task / MIX context; NO_ID when none
    ("start_ns", I64),
    ("end_ns", I64),
    ("device_task_type", DICT),  # from the device log (e.g. AI_CORE, AI_CPU, SDMA)
    ("host_task_type", DICT),  # task_track type (KERNEL_AICORE, KERNEL_AIVEC, MEMCPY_ASYNC, ...)
    ("op_name", DICT),  # node_basic_info op name, else the kernel name; null when unknown
    ("kernel_name", DICT),  # the launch's task_track kernel name (hash_dic); null when 0 or not found
    ("op_type", DICT),
    ("task_type", DICT),  # GE task type: AI_CORE, AI_VECTOR_CORE, AI_CPU, MIX_AIC, MIX_AIV, HCCL, ...
    ("op_state", DICT),  # static / dynamic
    ("block_dim", I32),
    ("mix_block_dim", I32),
    ("hf32_eligible", DICT),  # YES / NO
    ("input_shapes", DICT),  # msprof text form: tensors joined by ';', dims by ','
    ("input_data_types", DICT),
    ("input_formats", DICT),
    ("output_shapes", DICT),
    ("output_data_types", DICT),
    ("output_formats", DICT),
    ("model_id", I64),  # NO_ID when the task is not part of a model
    ("connection_id", I64),  # links the host launch API (api.connection_id) to this task
    ("launch_ns", I64),  # start of the launching API (flow start), null when unknown
    ("launch_thread_id", I64),
    ("launch_level", DICT),  # the level of that API: node or acl (operators/host_join.py)
    ("memcpy_size", I64),  # a MEMCPY_ASYNC task's bytes from its memcpy_info; null when none matched
    ("memcpy_operation", DICT),  # its copy direction (host to device, ...; other); null likewise
)


#: the intermediate stream between device-log pairing and the host join: device side only
DEVICE_TASKS_BASE = _schema(
    ("device_id", I32),
    ("stream_id", I32),
    ("task_id", I32),
    ("batch_id", I32),
    ("context_id", I64),
    ("start_ns", I64),
    ("end_ns", I64),
    ("device_task_type", DICT),
)


def _with_metrics(schema: pa.Schema, metric_columns: Iterable[str]) -> pa.Schema:
    for name in metric_columns:
        schema = schema.append(pa.field(name, F64))
    return schema


def tasks_schema(metric_columns: Iterable[str] = ()) -> pa.Schema:
    """``tasks`` with the PMU metric columns of one ``aic_metrics`` group appended (float64)."""
    return _with_metrics(TASKS_BASE, metric_columns)


def device_tasks_schema(metric_columns: Iterable[str] = ()) -> pa.Schema:
    """``device_tasks`` (paired device logs, PMU metrics joined) with its metric columns."""
    return _with_metrics(DEVICE_TASKS_BASE, metric_columns)


#: iterations (step_trace csv) and framework steps (ProfilerStep#)
STEPS = _schema(
    ("device_id", I32),
    ("kind", DICT),  # model (ts_track tags 0..4), step (tags 60000/60001), framework (ProfilerStep#)
    ("model_id", I64),
    ("iteration_id", I64),  # index id within the model, from 1; framework: the step number
    ("start_ns", I64),
    ("end_ns", I64),
    ("fp_ns", I64),
    ("bp_ns", I64),
    ("data_aug_ns", I64),  # Data Aug Bound
    ("reduce_start_ns", pa.list_(I64)),
    ("reduce_end_ns", pa.list_(I64)),
    ("host_start_ns", I64),  # framework steps: the ProfilerStep op
    ("host_end_ns", I64),
)


TABLES: Mapping[str, pa.Schema] = {
    "tasks": TASKS_BASE,
    # host API calls (CANN layer of the timeline, api_statistic)
    "api": _schema(
        ("level", DICT),  # acl, model, node, communication, runtime, ...
        ("name", DICT),
        ("struct_type", DICT),  # the resolved ``type`` (e.g. launch)
        ("thread_id", I64),
        ("start_ns", I64),
        ("end_ns", I64),
        ("item_id", I64),
        ("item", DICT),  # the item id as msprof prints it (hash_dic name, or the number)
        ("request_id", I64),
        ("connection_id", I64),
    ),
    # torch ops, task-queue enqueue/dequeue events (framework layer of trace_view.json)
    "ops": _schema(
        ("op_id", I64),  # position in start order; the op tree refers to it
        ("parent_id", I64),  # enclosing op (op tree), null for a root
        ("kind", DICT),  # cpu_op, enqueue, dequeue
        ("name", DICT),
        ("pid", I64),
        ("tid", I64),
        ("start_ns", I64),
        ("end_ns", I64),
        ("sequence_number", I64),
        ("fwd_thread_id", I64),
        ("correlation_id", I64),  # enqueue/dequeue
        ("input_shapes", DICT),
        ("input_dtypes", DICT),
        ("call_stack", pa.string()),
        ("module_hierarchy", pa.string()),
        ("flops", pa.string()),  # torch_npu's with_flops extra args, as written (``key:value;...``)
    ),
    # arrows between events: HostToDevice, async_npu (torch_to_npu), async_task_queue, fwdbwd
    "flows": _schema(
        ("kind", DICT),
        ("flow_id", I64),
        ("src_pid", I64),
        ("src_tid", I64),
        ("src_ns", I64),
        ("dst_device_id", I32),  # null when the destination is on the host
        ("dst_pid", I64),
        ("dst_tid", I64),  # device tasks: stream id; null for a communication op
        ("dst_ns", I64),
        ("dst_group", DICT),  # a communication op's group (its thread on the HCCL layer), else null
        ("correlation_id", I64),  # task queue: the enqueue/dequeue pair (async_npu: its dequeue window)
    ),
    # HCCL operators (Communication layer, communication_statistic, overlap)
    "comm": _schema(
        ("device_id", I32),
        ("op_name", DICT),
        ("op_type", DICT),
        ("group_name", DICT),
        ("start_ns", I64),
        ("end_ns", I64),
        ("model_id", I64),
        ("connection_id", I64),  # the launching node API's (HostToDevice flow id)
        ("launch_ns", I64),  # that API's start and thread: where the op's flow starts
        ("launch_thread_id", I64),
        ("rank_size", I64),
        ("data_type", DICT),
        ("alg_type", DICT),
        ("count", I64),
        ("relay", pa.bool_()),
        ("retry", pa.bool_()),
    ),
    # HCCL tasks on the plane threads of the Communication layer
    "comm_tasks": _schema(
        ("device_id", I32),
        ("op_name", DICT),
        ("group_name", DICT),
        ("plane_id", I64),
        ("name", DICT),  # task type, e.g. Notify_Wait, Memcpy
        ("start_ns", I64),
        ("end_ns", I64),
        ("stream_id", I32),
        ("task_id", I32),
        ("context_id", I64),
        ("notify_id", I64),
        ("src_rank", I64),
        ("dst_rank", I64),
        ("transport_type", DICT),
        ("size_bytes", I64),
        ("data_type", DICT),
        ("link_type", DICT),
        ("master", pa.bool_()),  # on the op's master stream (hccl API type ``master``; msprof isMaster)
        ("rdma_type", DICT),  # RDMASendNotify / RDMASendPayload (hccl_info rdmaType)
        ("duration_estimated_us", F64),
        ("bandwidth_gbps", F64),  # size over duration, or the payload group's (kernels/hccl.py)
        ("model_id", I64),  # the op's
    ),
    # operator memory (operator_memory.csv): PTA allocator blocks and GE/CANN operator memory
    "memory": _schema(
        ("device_id", I32),
        ("source", DICT),  # PTA or GE
        ("name", DICT),
        ("size_bytes", I64),
        ("alloc_ns", I64),
        ("release_ns", I64),
        ("active_release_ns", I64),
        ("duration_ns", I64),
        ("active_duration_ns", I64),
        ("alloc_total_allocated", I64),
        ("alloc_total_reserved", I64),
        ("alloc_total_active", I64),
        ("release_total_allocated", I64),
        ("release_total_reserved", I64),
        ("release_total_active", I64),
        ("stream_ptr", I64),
        ("device_type", DICT),  # NPU:<id>
    ),
    # allocator totals over time (memory_record.csv)
    "memory_record": _schema(
        ("device_id", I32),
        ("component", DICT),  # APP, PTA, GE, PTA+GE, WORKSPACE
        ("time_ns", I64),
        ("total_allocated", I64),
        ("total_reserved", I64),
        ("total_active", I64),
        ("stream_ptr", I64),
        ("device_type", DICT),
    ),
    # npu_mem samples (NPU MEM layer, npu_mem csv)
    "npu_mem": _schema(
        ("device_id", I32),
        ("event", DICT),  # APP or Device
        ("time_ns", I64),
        ("ddr_bytes", I64),
        ("hbm_bytes", I64),
    ),
    "npu_module_mem": _schema(
        ("device_id", I32),
        ("component", DICT),
        ("time_ns", I64),
        ("total_reserved_bytes", I64),  # null: only the release was captured (-1 in msprof)
    ),
    # L2 cache rates per task record (l2_cache csv), in record order; op names are the layouts'
    "l2_cache": _schema(
        ("device_id", I32),
        ("stream_id", I32),
        ("task_id", I32),
        ("task_type", I32),  # as the record holds it
        ("hit_rate", F64),
        ("victim_rate", F64),
    ),
    # the AI Core frequency from the collection start to its end (AI Core Freq layer)
    "aicore_freq": _schema(
        ("device_id", I32),
        ("time_ns", I64),
        ("freq_mhz", I64),
    ),
    # HBM bandwidth per sample, unit and direction (HBM layer, hbm csv), in msprof's row order
    "hbm": _schema(
        ("device_id", I32),
        ("time_ns", I64),
        ("hbm_id", I32),
        ("event", DICT),  # read or write
        ("bandwidth", F64),  # MB/s
    ),
    "steps": STEPS,
    # torch_npu's device step ranges (framework_outputs.md §4c) have the shape of ``steps``
    "framework_steps": STEPS,
    # Overlap Analysis intervals per device
    "overlap": _schema(
        ("device_id", I32),
        ("kind", DICT),  # Computing, Communication, Communication(Not Overlapped), Free
        ("start_ns", I64),
        ("end_ns", I64),
    ),
    # per-step overlap sums (step_trace_time.csv)
    "step_time": _schema(
        ("device_id", I32),
        ("step", I64),
        ("computing_ns", I64),
        ("communication_not_overlapped_ns", I64),
        ("overlapped_ns", I64),
        ("communication_ns", I64),
        ("free_ns", I64),
        ("stage_ns", I64),
        ("bubble_ns", I64),
        ("communication_not_overlapped_exclude_receive_ns", I64),
        ("preparing_ns", I64),
        # the host start Preparing subtracts from (the framework step's start; the step-less row: the
        # first torch op); null without one
        ("host_start_ns", I64),
    ),
    "op_statistic": _schema(
        ("device_id", I32),
        ("model_name", DICT),  # graph export only
        ("op_type", DICT),
        ("core_type", DICT),
        ("count", I64),
        ("total_ns", I64),
        ("min_ns", I64),
        ("avg_ns", F64),
        ("max_ns", I64),
        ("ratio", F64),  # percent
    ),
    "api_statistic": _schema(
        ("level", DICT),
        ("name", DICT),
        ("total_us", F64),  # msprof rounds each duration to 3 decimals of a microsecond first
        ("count", I64),
        ("avg_us", F64),
        ("min_us", F64),
        ("max_us", F64),
        ("variance", F64),
    ),
    # torch_npu operator_details.csv: one row per torch op except ProfilerStep#
    "operator_details": _schema(
        ("device_id", I32),  # the device of the op's kernels; null when unknown
        ("op_id", I64),  # ops.op_id
        ("name", DICT),
        ("input_shapes", DICT),
        ("call_stack", pa.string()),
        ("host_self_ns", I64),  # duration minus the durations of its child ops
        ("host_total_ns", I64),
        ("device_self_ns", I64),  # kernels linked (async_npu) to this op
        ("device_total_ns", I64),  # kernels linked to its subtree
        ("device_self_aicore_ns", I64),  # the same, AI_CORE kernels only
        ("device_total_aicore_ns", I64),
        # the same four as torch_npu sums them for its CSV: float µs added kernel by kernel in start
        # order; null when no kernel was added (operators/operator_details.py)
        ("device_self_us", F64),
        ("device_total_us", F64),
        ("device_self_aicore_us", F64),
        ("device_total_aicore_us", F64),
    ),
    # msprof --analyze communication time info, one row per HCCL op (communication.json)
    "comm_ops": _schema(
        ("device_id", I32),
        ("op_name", DICT),
        ("group_name", DICT),
        ("op_type", DICT),
        ("start_ns", I64),
        ("end_ns", I64),
        ("transit_ns", I64),  # null: the op had no transit (msprof prints an integer 0)
        ("wait_ns", I64),  # null: no Notify_Wait
        ("synchronization_ns", I64),  # null: no Notify_Wait before the first transit
        ("idle_ns", I64),  # elapse - transit - wait
    ),
    # transfers per (HCCL op, link, transport): communication bandwidth info and matrix
    "comm_links": _schema(
        ("device_id", I32),
        ("op_name", DICT),
        ("group_name", DICT),
        ("op_type", DICT),
        ("start_ns", I64),  # the op's start
        ("src_rank", I64),  # null: no valid link (msprof leaves it out of the matrix)
        ("dst_rank", I64),
        ("transport_type", DICT),  # LOCAL (on chip), HCCS, PCIE, SIO, RDMA, or the raw link type
        ("size_bytes", I64),
        ("transit_ns", I64),
        ("bandwidth_gbps", F64),  # size / transit (bytes per ns), 0 when the time is 0
        ("packets", I64),  # transfers (an RDMA payload group is one)
        ("large_packets", I64),  # transfers above msprof's size threshold of the transport
        ("packet_sizes", pa.list_(I64)),  # size distribution: distinct transfer sizes (bytes)
        ("packet_counts", pa.list_(I64)),  # ... how many transfers had each size
        ("packet_transit_ns", pa.list_(I64)),  # ... and their summed time
    ),
    "comm_statistic": _schema(
        ("device_id", I32),
        ("op_type", DICT),
        ("count", I64),
        ("total_ns", I64),
        ("min_ns", I64),
        ("avg_ns", F64),
        ("max_ns", I64),
        ("ratio", F64),
    ),
    # torch_npu Python tracer calls replayed into spans (python_function events of trace_view.json)
    "python_calls": _schema(
        ("pid", I64),
        ("tid", I64),
        ("start_ns", I64),
        ("end_ns", I64),
        ("name", DICT),  # "file(line): function", a C function, or "nn.Module: <class>_<module id>"
        ("kind", DICT),  # python, module, c
        ("python_id", I64),  # position of the call among its thread's records (torch_npu's "Python id")
        ("parent_id", I64),  # the enclosing call's python_id, 0 at the top
        ("module_id", I64),  # modules: n-th instance of its class on the thread; else null
    ),
    # Python garbage collections (torch.gc_record; the "Python GC" process of trace_view.json)
    "gc": _schema(
        ("pid", I64),
        ("tid", I64),  # the pid, as torch_npu's GCRecordBean gives it
        ("start_ns", I64),
        ("end_ns", I64),
    ),
}


def one_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``values`` as one array: a chunked array of one chunk (the usual table column) without a copy."""
    if isinstance(values, pa.Array):
        return values
    return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()


def conform(schema: pa.Schema, columns: Mapping[str, pa.Array | object]) -> pa.RecordBatch:
    """A batch of ``schema`` from named columns; a missing column is all null, strings are encoded.

    Raises ``KeyError`` for a column the schema does not have, so a typo cannot vanish silently.
    """
    extra = set(columns) - set(schema.names)
    if extra:
        msg = f"columns not in the schema: {sorted(extra)}"
        raise KeyError(msg)
    length = next((len(v) for v in columns.values() if hasattr(v, "__len__")), 0)
    arrays = []
    for field in schema:
        value = columns.get(field.name)
        if value is None:
            arrays.append(pa.nulls(length, field.type))
            continue
        array = value if isinstance(value, pa.Array | pa.ChunkedArray) else pa.array(value)
        array = one_array(array)
        if array.type == STRING and field.type == DICT:
            array = array.dictionary_encode()  # what the cast gives, in about half the time
        elif array.type != field.type:
            array = array.cast(field.type)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
