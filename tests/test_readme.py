"""Every command in the README runs (the test-suite command itself is what CI runs)."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from two_replicas import answer_two_replicas

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# Not run here, with the reason: installing is what scripts/setup.sh does before any test,
# and the test-suite command is the command running this test.
SKIP = {
    "bash scripts/run-tests.sh": "it is the command running this test (CI runs it)",
    "pip install -e '.[cpu]'": "scripts/setup.sh installs tfdp before the tests run",
    "pip install -e '.[gpu]'": "needs CUDA wheels; no GPU here",
    "pip install -e '.[cpu,plot]'": "scripts/setup.sh installs tfdp[dev], which holds both",
    "pip install -e '.[cpu,models]'": "scripts/setup.sh --tests installs keras-hub (tfdp[models])",
    "pip install -e .": "scripts/setup.sh installs tfdp before the tests run",
}


def bash_blocks() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    out = []
    for block in blocks:
        cmds = [line.split("  #")[0].strip() for line in block.splitlines()]
        out.append([c for c in cmds if c and not c.startswith("#")])
    return out


def test_every_readme_command_is_known_here():
    commands = [c for block in bash_blocks() for c in block]
    assert "bash scripts/run-main.sh" in commands
    assert all(c.startswith(("bash ", "pip ", "tfdp ")) for c in commands), commands


def run(cmd: str, cwd: Path, **changes: str | None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    for name, value in changes.items():  # None: unset
        env.pop(name, None) if value is None else env.__setitem__(name, value)
    return subprocess.run(
        cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )


def test_main_job_reaches_95_percent(tmp_path):
    # As a user runs it: TF_CPP_MIN_LOG_LEVEL unset (tfdp sets it, and holds TensorFlow's
    # import to it: tests/test_tf_start.py shows the records that would come otherwise).
    proc = run(f"bash scripts/run-main.sh --no-progress --run-dir {tmp_path / 'main'}", ROOT,
               TF_CPP_MIN_LOG_LEVEL=None)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "absl::InitializeLog" not in proc.stderr and "oneDNN" not in proc.stderr, proc.stderr
    last = json.loads((tmp_path / "main/metrics.jsonl").read_text().splitlines()[-1])
    assert last["val_sparse_categorical_accuracy"] >= 0.95, last


def runs_here(cmd: str) -> bool:
    """Commands run by ``tfdp.cli.main`` in this process: all but `tfdp launch` (a new Python +
    TensorFlow process costs seconds). `tfdp evaluate --replicas 4` runs on this process's 4
    logical CPUs (tests/conftest.py); `tfdp train` (2 replicas) gets this session's
    MirroredStrategy over 2 of them (``answer_two_replicas``). The `tfdp` entry point as a
    process: the main job (scripts/run-main.sh) and `tfdp launch`'s workers."""
    return cmd.startswith(("tfdp plot ", "tfdp sampler ", "tfdp data ", "tfdp train ")) or (
        cmd.startswith("tfdp evaluate ") and cmd.endswith(" --replicas 4")
    )


def _last_epoch(run: Path) -> dict:
    return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])


@pytest.mark.parametrize("index", [2, 3, 4])  # quickstart, multi-worker, TFRecord shards
def test_readme_block_runs(tmp_path, index, monkeypatch, capsys, mirrored_of):
    from tfdp.cli import main

    monkeypatch.chdir(tmp_path)
    answered = answer_two_replicas(monkeypatch, mirrored_of)
    block = bash_blocks()[index]
    ran_here, said = [], {}
    for cmd in block:
        if cmd in SKIP:
            continue
        if runs_here(cmd):
            capsys.readouterr()
            code = main(shlex.split(cmd)[1:])
            out, err = capsys.readouterr()
            assert code == 0, f"{cmd}\n{out[-2000:]}\n{err[-2000:]}"
            ran_here.append(cmd)
        else:
            proc = run(cmd, tmp_path)
            assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
            out = proc.stdout
        said[cmd.split()[1]] = out
    trains = [c for c in ran_here if c.startswith("tfdp train ")]
    assert len(answered) == len(trains) == (index != 3)  # block 3's train: launch's workers
    if index == 2:
        assert len(ran_here) == 4  # train, evaluate, plot, sampler
        assert (tmp_path / "runs/quickstart/curves.png").is_file()
        assert (tmp_path / "layout.png").is_file()
    elif index == 3:
        assert (tmp_path / "runs/two-workers/metrics.jsonl").is_file()
    if index in (2, 4):  # evaluated exactly on 4 replicas: the held-out metrics of the run's 2
        run_dir = tmp_path / ("runs/quickstart" if index == 2 else "runs/from-shards")
        last, evaluated = _last_epoch(run_dir), json.loads(said["evaluate"])
        assert evaluated["replicas"] == 4
        for key in ("loss", "sparse_categorical_accuracy"):
            assert evaluated[key] == pytest.approx(last[f"val_{key}"], abs=1e-5), (key, last)
    if index == 4:  # trained from the converted shards; evaluated on the held-out last shard
        assert "tfdp data convert digits shards --shards 10" in ran_here
        assert _last_epoch(tmp_path / "runs/from-shards")["val_sparse_categorical_accuracy"] > 0.2


def test_install_block_is_skipped_for_a_stated_reason():
    for cmd in bash_blocks()[1]:
        assert cmd in SKIP, cmd


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_install_lines_name_real_extras_and_the_declared_floors():
    project = _pyproject()["project"]
    extras = set(project["optional-dependencies"])
    named = {e for c in bash_blocks()[1] for e in re.findall(r"\[([a-z,]+)\]", c)}
    assert {"cpu", "gpu", "cpu,plot"} <= named
    assert {e for group in named for e in group.split(",")} <= extras
    assert "matplotlib>=3.7" in project["optional-dependencies"]["plot"]
    floors = dict(re.findall(r"(tensorflow-cpu|keras)>=([0-9.]+)", " ".join(
        project["optional-dependencies"]["cpu"])))  # fmt: skip
    assert f"TensorFlow >= {floors['tensorflow-cpu']}, Keras >= {floors['keras']}" in README


def test_readme_statements_about_the_command_hold(tmp_path):
    """The prose lines about `python -m tfdp`, --version, JSON configs, the batch flags,
    model.keras, the Ctrl-C hint and --nproc-per-node (each exercised in tests/test_cli_habits.py
    and tests/test_launch.py): here, the names they use exist."""
    from tfdp.cli import build_parser
    from tfdp.recipe import MODEL_FILE, load_config_file

    assert MODEL_FILE == "model.keras" and "`runs/<name>/model.keras`" in README
    for flag in ("--batch-size-per-replica", "--config", "--resume", "--run-dir"):
        assert flag in build_parser().commands["train"].format_help() and flag in README
    assert "--nproc-per-node" in build_parser().commands["launch"].format_help()
    (tmp_path / "c.json").write_text('{"epochs": 2}')
    assert load_config_file(tmp_path / "c.json") == {"epochs": 2}
    out = run("python -m tfdp --version", tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("tfdp ")
    assert "docs/guide.md" in README and (ROOT / "docs/guide.md").is_file()


GUIDE = (ROOT / "docs/guide.md").read_text()


def test_guide_sample_config_is_a_valid_config(tmp_path):
    from tfdp.recipe import TrainConfig, check_config, load_config_file

    (block,) = re.findall(r"```yaml\n(.*?)```", GUIDE, flags=re.S)
    (tmp_path / "train.yaml").write_text(block)
    values = load_config_file(tmp_path / "train.yaml")
    assert values["batch_size"] == 64 and values["sampler"] == "repeat-aug"
    check_config(TrainConfig(**values))


def test_guide_python_sampler_example_runs():
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", GUIDE, flags=re.S) if "s = " in b]
    scope: dict = {}
    exec(block, scope)
    assert len(scope["s"].indices()) == 3  # ceil(12 / 4)


def test_guide_elastic_resume_names_a_real_api():
    import inspect

    from tfdp.samplers import DistributedSampler

    section = GUIDE.split("## Changing the number of workers", 1)[1].split("\n## ", 1)[0]
    assert "load_state_dict(state, allow_world_size_change=True)" in section
    params = inspect.signature(DistributedSampler.load_state_dict).parameters
    assert "allow_world_size_change" in params
    s2 = DistributedSampler(12, num_replicas=2, rank=0, shuffle=False)
    s2.set_epoch(0)
    state = s2.state_dict()
    s3 = DistributedSampler(12, num_replicas=3, rank=0, shuffle=False)
    s3.load_state_dict(state, allow_world_size_change=True)  # as the guide says: works


def test_cluster_paragraphs_name_what_the_tests_run():
    tests = (ROOT / "tests/test_cluster_envs.py").read_text()
    assert "`TFDP_SLURM_PORT_BASE` (default 8888)" in README and "TFDP_SLURM_PORT_BASE" in tests
    assert "srun`'s environment train to identical weights" in README
    assert "def test_slurm_job_step_trains_to_identical_weights" in tests
    assert "def test_kubeflow_tfjob_with_a_chief_trains_to_identical_weights" in tests


# The README's Python example needs its data and model: CIFAR-like uint8 images (the digits,
# levels 0..16, blown up to 32x32 and levels 0..255) and a small CNN.
PYTHON_PRELUDE = """
import numpy as np
from tfdp.recipe.digits import load_digits
from tfdp.recipe.networks import small_cnn

(x, labels), (x_val, y_val) = load_digits()


def as_cifar(d):
    big = np.kron(d.astype(np.int64), np.ones((1, 4, 4, 1), np.int64))
    return (big * 255 // 16).astype(np.uint8)


images, x_val = as_cifar(x), as_cifar(x_val)


def build_model():
    return small_cnn((32, 32, 1), 10, width=4)
"""
README_EPOCHS = "trainer.fit(train, epochs=100, eval_input=held_out)"


def test_readme_python_example_trains_to_a_sensible_loss(tmp_path, monkeypatch, mirrored_of):
    """The README's Python example, as written, learns: its losses are those of scaled pixels.

    On raw 0-255 pixels (the example without ToFloat) the first epoch's loss was 177; scaled to
    [0, 1] a 10-class problem starts near ln(10) = 2.3 and goes down. The block runs in this
    process (a new Python + TensorFlow process costs seconds): its
    ``make_strategy(cpu_replicas=2)`` gets this session's MirroredStrategy over 2 of its logical
    CPUs (the devices are made before TensorFlow initialises, once per process: that a script's
    first ``make_strategy`` makes them is what tests/test_examples.py's scripts show).
    """
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    (example,) = [b for b in blocks if "Trainer(" in b]
    assert example.count(README_EPOCHS) == 1
    example = example.replace(README_EPOCHS, README_EPOCHS.replace("100", "2"))
    answered = answer_two_replicas(monkeypatch, mirrored_of)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(PYTHON_PRELUDE + example, "README.md", "exec"), scope)
    assert answered == ["auto"]  # make_strategy(cpu_replicas=2)
    history = scope["trainer"].state.history
    assert (tmp_path / "runs/mine/metrics.jsonl").is_file()
    losses = [r["loss"] for r in history]
    # ln(10) = 2.30: a 10-class model's loss at the start, and the held-out loss of a guess.
    assert len(losses) == 2 and losses[0] < 2.6, losses
    assert losses[1] < losses[0] and history[-1]["val_loss"] < math.log(10), history


def test_readme_says_where_tfdp_is_before_the_quickstart():
    before, _ = README.split("## Quickstart", 1)[1].split("```bash", 1)
    assert "source .venv/bin/activate" in before and ".venv/bin/tfdp" in before


def test_setup_script_says_what_it_does_before_each_slow_step(tmp_path):
    """scripts/setup.sh on a fresh clone, with a stand-in Python that records what it is asked
    to do (a real install takes minutes): every step is announced before it runs."""
    import shutil

    repo = tmp_path / "clone"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/setup.sh", repo / "scripts/setup.sh")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    log = tmp_path / "calls.log"
    fake = tmp_path / "python"  # `python -m venv DIR` makes DIR/bin/python, a copy of itself
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "RUN $*" >> {log}\n'
        'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; fi\n'
        'if [ "$1" = "--version" ]; then echo "Python 3.x"; fi\n'
    )
    fake.chmod(0o755)
    proc = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=repo, env={**os.environ, "PYTHON": str(fake)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("setup: ")]
    runs = [line for line in log.read_text().splitlines() if not line.endswith("--version")]
    assert [s.split()[1] for s in said] == ["creating", "upgrading", "installing", "checking",
                                            "done"]  # fmt: skip
    assert [r.split()[1:4] for r in runs] == [
        ["-m", "venv", ".venv"], ["-m", "pip", "install"], ["-m", "pip", "install"],
        ["-c", "import", "tfdp,"],
    ]  # fmt: skip
    again = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=repo, env={**os.environ, "PYTHON": str(fake)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert again.returncode == 0 and again.stderr == ""  # installed: nothing to do, nothing said


def test_pytest_filters_only_known_third_party_warnings():
    """The test run's configuration hides named third-party warnings, never tfdp's own, and
    runs xdist without -q (which made it print "bringing up nodes..." twice) and by groups."""
    options = _pyproject()["tool"]["pytest"]["ini_options"]
    for entry in options["filterwarnings"]:
        action, message, category, *module = entry.split(":")
        assert action == "ignore" and len(message) > 20 and category.endswith("Warning"), entry
        assert not module or not module[0].startswith("tfdp"), entry
    script = (ROOT / "scripts/run-tests.sh").read_text()
    (command,) = [line for line in script.splitlines() if "-m pytest" in line]
    assert " -q" not in command and "-n auto" in command
    # the tests that share a module fixture (a training run) go to one worker, which runs it once
    assert "--dist loadgroup" in command
