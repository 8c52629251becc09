"""``python -m cbop.cli``: the same as the ``cbop`` command."""

import sys

from cbop.cli import main

sys.exit(main())
