"""``python -m tfdp.launch``: the ``tfdp launch`` command line (:mod:`tfdp.cli.launch`).

This module owns only that entry point, so that the library half
(:mod:`tfdp.launch`) never imports the command line.
"""

import sys

from tfdp.cli.launch import main

if __name__ == "__main__":  # pragma: no cover - run as a program by the tests' subprocesses
    sys.exit(main())
