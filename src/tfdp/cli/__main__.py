"""``python -m tfdp.cli``: the ``tfdp`` command."""

import sys

from tfdp.cli import main

sys.exit(main())
