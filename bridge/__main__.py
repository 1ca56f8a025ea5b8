"""``python -m ptxbridge``: the ``ptxbridge`` command."""

import sys

from ptxbridge.cli import main

sys.exit(main())
