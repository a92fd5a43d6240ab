"""``python -m vcollect``: the same as the ``vcollect`` command."""

import sys

from vcollect.cli import main

sys.exit(main())
