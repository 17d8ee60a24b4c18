"""The import source: outputs that msprof or torch_npu already exported, read back as canonical tables.

``open_export(path)`` finds the export (``ASCEND_PROFILER_OUTPUT/`` or
``mindstudio_profiler_output/``) and returns an :class:`ExportedRun`; ``run.table(name)`` streams
a canonical table (:data:`profstream.engine.schema.TABLES`) as a ``pyarrow.RecordBatchReader``
and ``run.tables`` lists the ones the export has. Trace JSON is read incrementally
(:mod:`.trace`), CSVs with pyarrow's streaming CSV reader (:mod:`.csv_tables`); times are the
export's local wall-clock ns, converted from the decimal text exactly (:mod:`.run`).
"""

from profstream.engine.imports.run import ExportedRun, open_export

__all__ = ["ExportedRun", "open_export"]
