"""pytest-benchmark setup: benchmarks run with `pytest bench --benchmark-enable`.

The bench scripts import one another as scripts do (``from macro import ...``: bench/ is on the path
of a script run from it); tests that use them get the same path.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
