"""Simulated runs exported once per test session (the exports are read by many tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from profstream.export import ExportReport, export
from profstream.simulate import SimulationConfig, simulate


@dataclass(frozen=True)
class Run:
    raw: Path
    truth: Path
    out: Path

    def export(self, layout: str, kind: str = "both", **options: object) -> ExportReport:
        return export(self.raw, kind=kind, layout=layout, output=self.out / layout, **options)  # type: ignore[arg-type]


def _run(tmp_path_factory: pytest.TempPathFactory, name: str, config: SimulationConfig) -> Run:
    base = tmp_path_factory.mktemp(name)
    simulate(config, base / "raw", truth_dir=base / "truth")
    return Run(base / "raw", base / "truth", base / "out")


@pytest.fixture(scope="session")
def torch_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A 910B torch_npu run (STARS, framework steps, PTA memory)."""
    return _run(
        tmp_path_factory,
        "torch",
        SimulationConfig(chip="910B", steps=3, ops_per_step=48, framework="torch_npu", seed=7),
    )


@pytest.fixture(scope="session")
def graph_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A 910A graph-mode run on two devices (HWTS + aicore.data, model iterations)."""
    return _run(
        tmp_path_factory, "graph", SimulationConfig(chip="910A", steps=3, ops_per_step=40, devices=2, seed=3)
    )
