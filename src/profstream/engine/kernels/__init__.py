"""numba kernels of the streaming operators, each behind a validating wrapper function.

* :mod:`.overlap` — interval union, difference/intersection, Free gaps, per-step sums
  (Overlap Analysis, ``step_trace_time``);
* :mod:`.pairing` — device task start/end pairing (HWTS, STARS ACSQ, FFTS+ sub-tasks);
* :mod:`.memory` — allocation matching (PyTorch adapter ``operator_memory``, GE operator memory).
* :mod:`.tree` — the torch op tree: nesting by time containment, the deepest op around a time.
* :mod:`.text` — JSON array framing and exact decimal parsing for the import source.

Kernels take numpy arrays, scalars and preallocated outputs, return counts, and keep whatever must
survive between batches in small state arrays the caller passes in (see ``_dispatch`` and
``_table``). Submodules are imported on demand, so importing the engine does not import numba.
"""
