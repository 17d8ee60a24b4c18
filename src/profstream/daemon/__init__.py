"""The collector daemon: following live PROF_XXX directories, aging them under ``storage_limit``.

So far: :mod:`profstream.daemon.aging`, the storage_limit aging policy of the
Ascend collector (specs/msprof_outputs.md §4g) and the timeline_limit aging of
output windows.
"""
