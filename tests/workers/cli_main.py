"""`tfdp ARGS` as a script path (for helpers that start scripts): runs the tfdp process."""

from tfdp.cli.app import run

run()
