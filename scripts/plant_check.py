#!/usr/bin/env python3
"""Plant known bugs one at a time in a copy of ``src``: the differential test must catch each.

A check of the checker, run by hand (never by the suite): for every plant, ``src/`` is copied to
a temporary directory, one line of it is replaced (the original must occur exactly once, so a
plant that no longer applies is reported, not silently skipped), and
``tests/test_differential.py`` runs as CI runs it (``-n 2``, derandomized) with the copy first on
``PYTHONPATH``. A plant is CAUGHT when the run fails with an assertion; the summary names the
failing tests and their first assertion line. The worktree itself is never modified.

Usage::

    .venv/bin/python scripts/plant_check.py                 # every plant, once
    .venv/bin/python scripts/plant_check.py --runs 2        # twice (derandomized: the same)
    .venv/bin/python scripts/plant_check.py --plant eval-padding-counted -k fit_path
    .venv/bin/python scripts/plant_check.py --baseline      # no plant: the test must pass

Exit status: 0 when every plant was caught in every run (and a baseline passed), else 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plant:
    """One realistic bug: replace ``old`` (exactly one occurrence) by ``new`` in ``path``."""

    name: str
    path: str  # relative to src/tfdp
    old: str
    new: str
    what: str


PLANTS = [
    Plant(
        "padding-rounded-down",
        "indices.py",
        "    return -(-n // num_replicas)\n",
        "    return n // num_replicas\n",
        "DistributedSampler's per-rank length rounded down: the padded tail never seen",
    ),
    Plant(
        "eval-padding-counted",
        "input/entries.py",
        "weight = sampler.mask(int(start)).astype(np.float32)",
        "weight = np.ones(idx.shape, np.float32)",
        "evaluation counts the padded duplicates (weight 1 instead of the mask)",
    ),
    Plant(
        "bound-call-cached-by-multi",
        "train/loop.py",
        "            if (group, n) not in calls:\n"
        "                calls[group, n] = self.train_step.bind(\n"
        "                    stream[0], spec, group, n, train_input.return_ids, width\n"
        "                )\n"
        "            return calls[group, n]\n",
        "            if (group, n > 1) not in calls:\n"
        "                calls[group, n > 1] = self.train_step.bind(\n"
        "                    stream[0], spec, group, n, train_input.return_ids, width\n"
        "                )\n"
        "            return calls[group, n > 1]\n",
        "the Trainer's bound call cached by (group, n > 1): a call of 2 steps runs 3",
    ),
    Plant(
        "rank-fed-next-ranks-ids",
        "input/pipeline.py",
        "ranks = [worker * local + j for j in range(local)]",
        "ranks = [(worker * local + j + 1) % self.num_replicas for j in range(local)]",
        "replica r fed rank (r + 1) % W's ids (both loops; the fit path must see it too)",
    ),
    Plant(
        "l2-not-divided-by-replicas",
        "train/step.py",
        "loss += tf.nn.scale_regularization_loss(reg) / group",
        "loss += reg / group",
        "the regularisation loss counted once per replica (unscaled by the replica count)",
    ),
    Plant(
        "l2-unscaled",
        "train/step.py",
        "loss += tf.nn.scale_regularization_loss(reg) / group",
        "loss += reg",
        "the regularisation loss counted once per replica and micro-batch (issue 25)",
    ),
    # The options the issue added to the draws: a realistic bug in each.
    Plant(
        "sample-weights-ignored",
        "train/step.py",
        "weighted = per_ex if w is None else per_ex * tf.cast(w, per_ex.dtype)",
        "weighted = per_ex",
        "the Trainer's step ignores the training sample weights",
    ),
    Plant(
        "augment-keyed-by-index",
        "input/examples.py",
        "self.finish_one(self.augment_one(example, key, pos), idx, pos, key, weight)",
        "self.finish_one(self.augment_one(example, key, idx), idx, pos, key, weight)",
        "a per-example augmentation keyed by the example's index, not its list position "
        "(repeats and padding augmented alike)",
    ),
    Plant(
        "block-shuffle-one-key",
        "sources/tfrecord/stream.py",
        "records, seed=tf.stack([key, block])",
        "records, seed=tf.stack([key, tf.zeros_like(block)])",
        "every block of a TFRecord lane shuffled by the same permutation",
    ),
]


def _planted_copy(plant: Plant | None, into: Path) -> Path:
    src = into / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    if plant is not None:
        path = src / "tfdp" / plant.path
        text = path.read_text()
        count = text.count(plant.old)
        if count != 1:
            raise SystemExit(
                f"plant {plant.name}: the original text occurs {count} times in src/tfdp/"
                f"{plant.path} (expected once): update the plant to today's code"
            )
        path.write_text(text.replace(plant.old, plant.new))
    return src


_BARE = ("", "AssertionError:")  # no message of their own: the next line says it


def _first_messages(out: str) -> dict[str, str]:
    """Each failed test's first non-empty ``E`` line (pytest's failure sections)."""
    first: dict[str, str] = {}
    name = None
    for line in out.splitlines():
        head = re.match(r"^_{3,} (\S+) _{3,}$", line)
        if head:
            name = head.group(1)
        elif name and name not in first and line.startswith("E ") and line[1:].strip() not in _BARE:
            first[name] = line[1:].strip()
    return first


def _run(plant: Plant | None, args: argparse.Namespace) -> tuple[str, str, float]:
    """One run of the differential test on a planted copy: ``(outcome, summary, seconds)``.

    ``outcome`` is ``"failed"``, ``"passed"`` or ``"no verdict"`` (pytest crashed or was
    interrupted: never counted as a catch).
    """
    with tempfile.TemporaryDirectory(prefix="tfdp-plant-") as tmp:
        src = _planted_copy(plant, Path(tmp))
        env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop("TFDP_DIFF_RANDOM", None)
        env["COLUMNS"] = "300"  # the short summary keeps each failure's message
        where = subprocess.run(
            [sys.executable, "-c", "import tfdp; print(tfdp.__file__)"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert where.startswith(str(src)), f"the copy is not the one imported: {where}"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            str(args.workers),
            "-p",
            "no:cacheprovider",
            "-rf",
            "tests/test_differential.py",
        ]
        if args.k:
            cmd += ["-k", args.k]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    out = proc.stdout + proc.stderr
    failed = [line for line in out.splitlines() if line.startswith("FAILED ")]
    crashed = proc.returncode not in (0, 1)  # 1: tests failed; anything else: no verdict
    if crashed:
        return "no verdict", f"pytest exited {proc.returncode}:\n{out[-3000:]}", seconds
    first = _first_messages(out)
    lines = []
    for f in failed:
        name = re.sub(r"^FAILED tests/test_differential.py::", "", f).split(" - ")[0]
        lines.append(f"  {name} - {first.get(name, f)}"[:240])
    last = out.strip().splitlines()[-1] if out.strip() else ""
    return ("failed" if failed else "passed"), "\n".join([*lines, f"  ({last})"]), seconds


def main() -> int:
    """Run the chosen plants (and a baseline); 0 when every plant was caught every time."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plant", action="append", choices=[p.name for p in PLANTS])
    parser.add_argument("--runs", type=int, default=1, help="runs per plant (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (CI: 2)")
    parser.add_argument("-k", help="a pytest -k expression (e.g. fit_path)")
    parser.add_argument("--baseline", action="store_true", help="also run without any plant")
    parser.add_argument("--list", action="store_true", help="list the plants and exit")
    args = parser.parse_args()
    if args.list:
        for p in PLANTS:
            print(f"{p.name:28s} src/tfdp/{p.path}: {p.what}")
        return 0
    chosen = [p for p in PLANTS if not args.plant or p.name in args.plant]
    ok = True
    if args.baseline:
        outcome, summary, seconds = _run(None, args)
        print(f"baseline (no plant): {outcome} in {seconds:.0f} s")
        if outcome != "passed":
            print(summary)
        ok &= outcome == "passed"
    for plant in chosen:
        for run in range(1, args.runs + 1):
            outcome, summary, seconds = _run(plant, args)
            verdict = {"failed": "CAUGHT", "passed": "MISSED"}.get(outcome, "NO VERDICT")
            caught = verdict == "CAUGHT"
            print(f"{plant.name} (run {run}): {verdict} in {seconds:.0f} s -- {plant.what}")
            print(summary, flush=True)
            ok &= caught
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
