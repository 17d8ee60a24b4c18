"""``python -m profstream``: the same as the ``profstream`` command."""

import sys

from profstream.cli import main

sys.exit(main())
