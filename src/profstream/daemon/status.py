"""The daemon's metrics and its optional status endpoint (Prometheus text format on 127.0.0.1).

The collector updates one :class:`Metrics` under a lock; :class:`StatusServer` serves it at
``/metrics`` from a thread of :class:`http.server.ThreadingHTTPServer`, bound to the loopback
address only (the metrics name files of the training job, so they stay on the node).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: how far back records/s is measured, in seconds
RATE_WINDOW_S = 10.0


@dataclass
class Metrics:
    """Counters and gauges of one daemon; every method takes the lock."""

    records: dict[str, int] = field(default_factory=dict)  # family -> records read
    lag_s: float = 0.0
    bytes_on_disk: int = 0
    last_commit_unix: float | None = None
    windows: int = 0
    gaps: int = 0
    _samples: deque[tuple[float, dict[str, int]]] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, family: str, rows: int) -> None:
        with self._lock:
            self.records[family] = self.records.get(family, 0) + rows

    def committed(self, window_bytes: int) -> None:
        with self._lock:
            self.bytes_on_disk += window_bytes
            self.last_commit_unix = time.time()
            self.windows += 1

    def set(self, *, lag_s: float | None = None, bytes_on_disk: int | None = None) -> None:
        with self._lock:
            if lag_s is not None:
                self.lag_s = lag_s
            if bytes_on_disk is not None:
                self.bytes_on_disk = bytes_on_disk

    def add_gaps(self, count: int) -> None:
        with self._lock:
            self.gaps += count

    def rates(self, now: float | None = None) -> dict[str, float]:
        """Records per second per family over the last :data:`RATE_WINDOW_S`."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._samples.append((now, dict(self.records)))
            while len(self._samples) > 1 and now - self._samples[0][0] > RATE_WINDOW_S:
                self._samples.popleft()
            then, old = self._samples[0]
            span = now - then
            if span <= 0:
                return {family: 0.0 for family in self.records}
            return {family: (n - old.get(family, 0)) / span for family, n in self.records.items()}

    def render(self) -> str:
        """The Prometheus text exposition (version 0.0.4)."""
        rates = self.rates()
        with self._lock:
            lines = [
                "# HELP profstream_records_total Raw records read, per record family.",
                "# TYPE profstream_records_total counter",
                *(f'profstream_records_total{{family="{f}"}} {n}' for f, n in sorted(self.records.items())),
                "# HELP profstream_records_per_second Raw records read per second, per record family.",
                "# TYPE profstream_records_per_second gauge",
                *(f'profstream_records_per_second{{family="{f}"}} {r:.3f}' for f, r in sorted(rates.items())),
                "# HELP profstream_lag_seconds How long the oldest complete unread slice has waited.",
                "# TYPE profstream_lag_seconds gauge",
                f"profstream_lag_seconds {self.lag_s:.3f}",
                "# HELP profstream_output_bytes Bytes the daemon's committed outputs hold on disk.",
                "# TYPE profstream_output_bytes gauge",
                f"profstream_output_bytes {self.bytes_on_disk}",
                "# HELP profstream_windows_committed_total Output windows committed.",
                "# TYPE profstream_windows_committed_total counter",
                f"profstream_windows_committed_total {self.windows}",
                "# HELP profstream_gaps_total Raw slices lost before they were read.",
                "# TYPE profstream_gaps_total counter",
                f"profstream_gaps_total {self.gaps}",
            ]
            if self.last_commit_unix is not None:
                lines += [
                    "# HELP profstream_last_commit_timestamp_seconds Unix time of the last commit.",
                    "# TYPE profstream_last_commit_timestamp_seconds gauge",
                    f"profstream_last_commit_timestamp_seconds {self.last_commit_unix:.3f}",
                ]
        return "\n".join(lines) + "\n"


class StatusServer:
    """``GET /metrics`` on ``127.0.0.1:port`` in a daemon thread; :meth:`close` stops it."""

    def __init__(self, metrics: Metrics, port: int) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = metrics.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:  # requests are not daemon events
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="status", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
