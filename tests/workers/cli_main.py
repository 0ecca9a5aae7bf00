"""`tfdp ARGS` as a script path (for helpers that start scripts): runs tfdp.cli.main."""

import sys

from tfdp.cli import main

sys.exit(main())
