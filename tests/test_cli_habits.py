"""The `tfdp` command for Keras / PyTorch users (issue 12): errors by class, fail fast, pipes,
extras, batch spellings, config.json as a config, the Ctrl-C hint, model.keras."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tfdp
from mw import digits_npz
from tfdp.cli import build_parser, main, train_request
from tfdp.recipe import TrainConfig, coerce, load_config_file

PY = sys.executable
BIN = str(Path(PY).parent)


def py(code: str, *args: str, cwd=None, timeout=300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [PY, "-c", code, *args], capture_output=True, text=True, cwd=cwd, env=env,
        timeout=timeout, check=False,
    )  # fmt: skip


# -- entry points ------------------------------------------------------------------------------


def test_python_m_tfdp_version_and_the_readme_sampler_line(tmp_path):
    version = subprocess.run(
        [PY, "-m", "tfdp", "--version"], capture_output=True, text=True, check=False
    )
    assert (version.returncode, version.stdout.strip()) == (0, f"tfdp {tfdp.__version__}")
    # `tfdp sampler` has train's defaults (--selected-round 0): this used to be refused.
    png = tmp_path / "x.png"
    drawn = subprocess.run(
        [PY, "-m", "tfdp", "sampler", "--num-examples", "12", "--replicas", "4", "--png", str(png)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert drawn.returncode == 0, drawn.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sampler_and_train_share_their_defaults():
    args = build_parser().parse_args(["sampler", "--num-examples", "10"])
    cfg = TrainConfig()
    assert (args.sampler, args.repeats, args.selected_round, args.seed) == (
        cfg.sampler, cfg.repeats, cfg.selected_round, cfg.seed,
    )  # fmt: skip


# -- errors: bad input (2) versus bugs (1) -----------------------------------------------------


def _boom(exc):
    def raise_it(*args, **kwargs):
        raise exc

    return raise_it


@pytest.mark.parametrize(
    "exc", [ValueError("could not broadcast shapes (3,) (4,)"), KeyError("labels")]
)
def test_an_internal_error_is_one_line_asking_for_a_report(monkeypatch, capsys, exc):
    monkeypatch.setattr("tfdp.cli.sampler.sampler_table", _boom(exc))
    assert main(["sampler", "--num-examples", "8", "--replicas", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"tfdp: internal error: {type(exc).__name__}: ")
    assert "please report" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_bad_input_is_exit_2_naming_it(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("not json\n")
    assert main(["plot", str(run)]) == 2
    assert "line 1: not valid JSON" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "curves")]) == 2
    assert "the image format comes from the extension" in capsys.readouterr().err
    assert main(["sampler", "--num-examples", "10", "--selected-round", "64"]) == 2
    assert "Pass a smaller --selected-round" in capsys.readouterr().err  # its flag


def test_a_closed_pipe_exits_quietly():
    proc = subprocess.Popen(
        [PY, "-m", "tfdp", "sampler", "--num-examples", "200000", "--replicas", "2",
         "--max-steps", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline()  # like `| head -1`
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 141, err
    assert err == b""


# -- fail fast: before TensorFlow is imported --------------------------------------------------

FAIL_FAST = """
import sys
from tfdp.cli import main
code = main(sys.argv[1:])
print(code, "tensorflow" in sys.modules)
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "{tmp}/nope.npz"], "--data: '{tmp}/nope.npz' does not exist"),
        (["--eval-data", "{tmp}/shards/*.tfrecord"], "matches no file"),
        (["--config", "{tmp}/bad.yaml"], "'epochs' must be of type int"),
        (["--epochs", "0"], "--epochs: must be an integer >= 1"),
        (["--sampler", "ra"], "must be one of"),
    ],
)
def test_bad_input_is_reported_before_tensorflow_loads(tmp_path, args, message):
    (tmp_path / "bad.yaml").write_text("epochs: [1, 2]\n")
    argv = [a.format(tmp=tmp_path) for a in args]
    out = py(FAIL_FAST, "train", *argv, "--run-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert out.stdout.split() == ["2", "False"], out.stdout + out.stderr
    assert message.format(tmp=tmp_path) in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r").exists()


EVERY_REFUSAL = """
import json, sys
from tfdp.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: --help, --version, a bad flag
        code = exc.code
    results.append([argv, code, "tensorflow" in sys.modules])
print(json.dumps(results))
"""


def test_help_version_and_every_refusal_come_before_tensorflow_loads(tmp_path):
    """`--help`, `--version` and refusals of bad flags or paths, for every command, in one
    process: TensorFlow is still not imported after all of them (they answer at once)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    t = str(tmp_path)
    cases = [
        ([], 0), (["--help"], 0), (["--version"], 0), (["--bogus"], 2),
        (["train", "--help"], 0), (["train", "--epochs", "0"], 2), (["train", "--epoch", "3"], 2),
        (["train", "--data", f"{t}/no.npz"], 2),
        (["train", "--eval-data", f"{t}/no/*.tfrecord"], 2),
        (["train", "--config", f"{t}/no.toml"], 2), (["train", "--lr", "x"], 2),
        (["train", "--resume", "--run-dir", f"{t}/empty"], 2), (["train", "--model", "nosuch"], 2),
        (["train", "--model", "no_such_module_xyz:net"], 2),
        (["train", "--record-samples", f"{t}/no/ids.jsonl"], 2),
        (["train", "--run-dir", f"{t}/full/f"], 2),
        (["evaluate", "--help"], 0), (["evaluate", f"{t}/no"], 2), (["evaluate", f"{t}/empty"], 2),
        (["evaluate", "R", "--replicas", "0"], 2),
        (["plot", "--help"], 0), (["plot", f"{t}/no"], 2), (["plot", f"{t}/empty"], 2),
        (["data", "--help"], 0), (["data", "convert", "--help"], 0),
        (["data", "convert", f"{t}/no", f"{t}/out"], 2),
        (["data", "convert", "digits", f"{t}/out", "--to", "csv"], 2),
        (["data", "convert", "digits", f"{t}/full"], 2),
        (["data", "convert", "digits", f"{t}/x.npz", "--shards", "2"], 2),
        (["data", "inspect", "--help"], 0), (["data", "inspect", f"{t}/no"], 2),
        (["sampler", "--help"], 0), (["sampler", "--num-examples", "0"], 2),
        (["sampler", "--num-examples", "4", "--png", f"{t}/x.unknown"], 2),
        (["launch", "--help"], 0), (["launch", "--workers", "0"], 2),
        (["launch", "--workers", "1"], 2),
    ]  # fmt: skip
    out = py(EVERY_REFUSAL, json.dumps([argv for argv, _ in cases]), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    for (argv, want), (_, code, tf_loaded) in zip(cases, results, strict=True):
        assert (code, tf_loaded) == (want, False), (argv, code, tf_loaded)
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.npz").exists()


MISSING = """
import sys
sys.modules[sys.argv[1]] = None  # as if not installed
from tfdp.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_missing_extra_is_named(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"epoch": 0, "loss": 1.0}\n')
    plot = py(MISSING, "matplotlib", "plot", str(run))
    assert plot.returncode == 2 and "pip install 'tfdp[plot]'" in plot.stderr, plot.stderr
    png = py(
        MISSING, "matplotlib", "sampler", "--num-examples", "8", "--png", str(tmp_path / "a.png")
    )
    assert png.returncode == 2 and "pip install 'tfdp[plot]'" in png.stderr, png.stderr
    train = py(MISSING, "tensorflow", "train", "--epochs", "1", "--run-dir", str(tmp_path / "r"))
    assert train.returncode == 2, train.stderr
    assert "needs tensorflow, which is not installed: pip install 'tfdp[cpu]'" in train.stderr
    assert "(or 'tfdp[gpu]')" in train.stderr


# -- porters' spellings ------------------------------------------------------------------------


def test_batch_size_flags_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["train", "--batch-size", "64", "--batch-size-per-replica", "32"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    config = tmp_path / "c.yaml"
    config.write_text("batch-size: 256\n")
    args = build_parser().parse_args(["train", "--config", str(config),
                                      "--batch-size-per-replica", "16"])  # fmt: skip
    cfg, given = train_request(args)  # the flag replaces the file's global batch
    assert (cfg.batch_size, cfg.batch_size_per_replica) == (64, 16) and "batch_size" not in given
    config.write_text("batch-size: 256\nbatch_size_per_replica: 16\n")
    args = build_parser().parse_args(["train", "--config", str(config)])
    with pytest.raises(tfdp.errors.ConfigError, match="gives both batch_size and batch_size_per"):
        train_request(args)


def test_a_run_s_config_json_is_a_config_file(tmp_path):
    """The guide's promise: `tfdp train --config RUN/config.json` starts a run with its options
    (its history and format are not options; its batch_size_per_replica is null)."""
    from tfdp.recipe.resume import write_run_config

    run = TrainConfig(epochs=3, lr=0.01, optimizer="sgd", batch_size=32, smoothing=0.1)
    write_run_config(str(tmp_path), run, [{"event": "start", "format": 2}])
    args = build_parser().parse_args(["train", "--config", str(tmp_path / "config.json")])
    cfg, _ = train_request(args)
    assert cfg == run


def test_repeat_aug_is_spelled_both_ways():
    assert TrainConfig(sampler="repeat_aug").sampler == "repeat-aug"
    assert coerce("sampler", "repeat_aug", "--sampler") == "repeat-aug"
    cfg, _ = train_request(build_parser().parse_args(["train", "--sampler", "repeat_aug"]))
    assert cfg.sampler == "repeat-aug"
    sampler = build_parser().parse_args(
        ["sampler", "--num-examples", "9", "--sampler", "repeat_aug"]
    )
    assert sampler.sampler == "repeat-aug"
    import numpy as np

    from tfdp.input import DistributedInput
    from tfdp.sources import ArraySource

    src = ArraySource((np.zeros((12, 2), np.float32), np.arange(12)))
    ra = {"num_repeats": 3, "selected_round": 0}
    a, b = (
        DistributedInput(None, src, sampler=name, batch_size=4, sampler_options=ra)
        for name in ("repeat-aug", "repeat_aug")
    )
    assert type(a.sampler) is type(b.sampler) is tfdp.RepeatAugSampler
    assert a.sampler.indices().tolist() == b.sampler.indices().tolist()


def test_config_json_is_a_config_file(tmp_path):
    saved = {**TrainConfig(epochs=4, lr=0.01).to_dict(), "history": [{"event": "start"}]}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert load_config_file(tmp_path / "config.json")["lr"] == 0.01
    (tmp_path / "c.json").write_text('{"epochs": 2, "batch-size": 32}')
    assert load_config_file(tmp_path / "c.json") == {"epochs": 2, "batch_size": 32}
    (tmp_path / "bad.json").write_text('{"epochs": 2,')
    with pytest.raises(tfdp.errors.ConfigError, match=r"bad\.json' could not be parsed"):
        load_config_file(tmp_path / "bad.json")


# -- a real run: Ctrl-C, the hint pasted as printed, epoch numbers, model.keras ----------------


@pytest.mark.slow
def test_ctrl_c_hint_pasted_as_printed_continues_the_run(tmp_path):
    run = tmp_path / "my run"  # a space: the hint must quote it
    # The hint and the resume are the point, not the model or the data: the one-layer model of
    # tests/workers/elastic_model.py (config.json names it, the pasted hint finds it on the
    # path), 100 ms a step in the first run (TFDP_ELASTIC_SLOW) so that Ctrl-C lands mid-run;
    # 560 of the digits, 504 for training: 16 steps an epoch (the full set's 44 steps and 360
    # held-out examples cost the slow run 12 s more).
    data = digits_npz(tmp_path, 560)
    workers = Path(__file__).parent / "workers"
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(workers), os.environ.get("PYTHONPATH")) if p),
    }
    first = subprocess.Popen(
        [PY, "-m", "tfdp", "train", "--epochs", "2", "--run-dir", str(run), "--no-progress",
         "--data", str(data), "--eval-fraction", "0.1", "--batch-size-per-replica", "16",
         "--checkpoint-every", "5", "--deterministic", "--model", "elastic_model:tiny",
         "--steps-per-call", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**env, "TFDP_ELASTIC_SLOW": "1"},
    )  # fmt: skip
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().strip()):  # epoch 1 is done
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 130, err
    assert "batch 32 global = 16 per replica x 2" in out  # the start line shows both
    assert json.loads((run / "config.json").read_text())["batch_size"] == 32
    logged = [int(m) for m in re.findall(r"^epoch (\d+) ", out, flags=re.M)]
    stopped = re.search(r"stopped (in|after) epoch (\d+) of 2", out)
    assert logged and stopped, out
    # One numbering: the epoch in progress is the one after the last epoch line.
    assert int(stopped.group(2)) == logged[-1] + (1 if stopped.group(1) == "in" else 0)
    assert not (run / "model.keras").exists()  # unfinished: the checkpoint is the state
    hint = re.search(r"Resume with: (.*)$", out, flags=re.M).group(1)
    assert hint == f"tfdp train --resume --run-dir '{run}'"
    second = subprocess.run(
        hint, shell=True, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
        check=False,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "resumed from" in second.stdout
    assert [json.loads(x)["epoch"] for x in metrics.read_text().splitlines()] == [0, 1]
    saved = re.search(r"model saved to (.*) \(keras", second.stdout).group(1)
    assert saved == str(run / "model.keras")
    import keras

    model = keras.models.load_model(saved)
    assert model.output_shape == (None, 10)


# -- tfdp sampler --png ------------------------------------------------------------------------


def test_sampler_picture_title_fits_colours_differ_padding_marked(tmp_path, monkeypatch):
    import numpy as np
    from matplotlib.figure import Figure

    from tfdp.cli.sampler import draw_layout, id_colour, padding_mask

    colours = np.array([id_colour(i) for i in range(2000)])
    gaps = np.abs(colours[1:] - colours[:-1]).max(axis=1)
    assert gaps.min() > 0.1  # neighbouring ids are told apart (tab20 repeated every 20)
    assert len({tuple(c) for c in colours.round(6)}) == len(colours)

    drawn = []
    original = Figure.savefig

    def keep(self, *args, **kwargs):
        drawn.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    samplers = [tfdp.DistributedSampler(10, 4, r, shuffle=False) for r in range(4)]
    # Positions 10 and 11 of the padded 12 (ranks 2 and 3, third entry) are copies of 0 and 1.
    assert [padding_mask(s).tolist() for s in samplers] == [[False] * 3] * 2 + [
        [False, False, True]
    ] * 2
    draw_layout(samplers, 1, str(tmp_path / "layout.svg"))
    fig = drawn[0]
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    title = ax.title.get_window_extent(renderer)
    assert fig.bbox.x0 <= title.x0 and title.x1 <= fig.bbox.x1  # the title fits
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 2
    assert ax.get_legend().get_texts()[0].get_text() == "padding copy (2)"
    assert (tmp_path / "layout.svg").read_text().lstrip().startswith("<?xml")


def _visible_ticks(axis, limits) -> list[float]:
    low, high = sorted(limits)
    return [t for t in axis.get_ticklocs() if low <= t <= high]


def test_plots_have_integer_ticks_for_epochs_and_ranks():
    """Epochs and ranks are whole numbers: no tick 1.9, 2.1 (one point) or -0.5 (a cell edge)."""
    from tfdp.cli.plot import metrics_figure
    from tfdp.cli.sampler import layout_figure

    # Two epochs: the samples/s panel leaves out the first, so it has one point.
    records = [{"epoch": e, "loss": 1.0 / (e + 1), "samples_per_s": 100.0 + e} for e in range(2)]
    for epochs in (records, records[:1]):
        fig = metrics_figure(epochs)
        fig.canvas.draw()
        for ax in fig.axes:
            ticks = _visible_ticks(ax.xaxis, ax.get_xlim())
            assert ticks and all(t == int(t) and t >= 1 for t in ticks), (ax.get_title(), ticks)
        assert fig.axes[2].get_xlim() == fig.axes[0].get_xlim()  # the panels line up
    for ranks, examples in ((3, 9), (2, 4), (4, 40)):
        samplers = [tfdp.DistributedSampler(examples, ranks, r) for r in range(ranks)]
        fig = layout_figure(samplers, 1)
        fig.canvas.draw()
        ax = fig.axes[0]
        ranks_shown = _visible_ticks(ax.yaxis, ax.get_ylim())
        assert ranks_shown == list(range(ranks))
        positions = _visible_ticks(ax.xaxis, ax.get_xlim())
        assert positions and all(t == int(t) and 0 <= t < len(samplers[0]) for t in positions)


# -- help shows the defaults the parser holds ------------------------------------------------

_STATED_DEFAULT = re.compile(r"\(default:? (.*)\)$", re.S)
#: The fewest arguments each command parses with (its required ones).
_MINIMAL_ARGS = {
    ("train",): [],
    ("evaluate",): ["RUN"],
    ("plot",): ["RUN"],
    ("sampler",): ["--num-examples", "4"],
    ("data", "convert"): ["SRC", "DST"],
    ("data", "inspect"): ["SRC"],
    ("launch",): ["--workers", "1", "--", "true"],
    ("models", "import"): ["NAME", "--from", "F", "--out", "M.keras"],
    ("models", "list"): [],
}


def _commands():
    """``(path, parser)`` for every command and sub-command of ``tfdp``."""
    import argparse

    from tfdp.cli import build_parser

    todo = [((), build_parser())]
    while todo:
        path, parser = todo.pop()
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, parser
        for action in subs:
            todo += [((*path, name), sub) for name, sub in action.choices.items()]


def _same(shown: str, value, parse=None) -> bool:
    if isinstance(value, tuple) and parse is not None:  # --nnodes 1 parses to (1, 1)
        return parse(shown) == value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(shown) == float(value)
        except ValueError:
            return False
    return shown == str(value)


#: `tfdp train`'s options whose default is the model's (resolved when the options are made).
_MODELS_OWN = {"mean", "std"}


def test_every_help_default_is_the_parsed_default(tmp_path, monkeypatch):
    """What `--help` says an option defaults to is what a command parsed without it holds."""
    import argparse

    from tfdp.cli.train import train_request
    from tfdp.recipe.config import RUN_NAME_PATTERN, TrainConfig, default_run_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    checked = 0
    commands = dict(_commands())
    assert set(commands) == set(_MINIMAL_ARGS)
    for path, parser in commands.items():
        args = parser.parse_args(_MINIMAL_ARGS[path])
        effective = vars(args)
        if path == ("train",):  # the flags default to None: the job's options fill them in
            effective = {**effective, **train_request(args)[0].to_dict()}
        shown_help = "".join(parser.format_help().split())  # wrapping may split a word at "-"
        formatter = parser._get_formatter()
        for action in parser._actions:
            if (
                not action.option_strings
                or action.required
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
            ):
                continue
            text = " ".join(formatter._expand_help(action).split())
            assert "".join(text.split()) in shown_help, (path, action.dest)  # what --help prints
            assert text.count("(default") <= 1, (path, action.dest, text)
            stated = _STATED_DEFAULT.search(text)
            value = effective[action.dest]
            where = (*path, action.option_strings[0], text)
            if value is None or (path == ("train",) and action.dest in _MODELS_OWN):
                # computed at run time (or from --model when the options are made, as
                # --mean / --std): said in words, never as a value
                none_is_a_choice = "None" in (action.metavar or "")  # --mixed-precision
                assert stated is None or (stated.group(1) == "None") == none_is_a_choice, where
                continue
            if value is False and action.nargs == 0 and stated is None:
                continue  # an on/off flag, off unless given
            assert stated is not None, where
            assert _same(stated.group(1), value, action.type), (*where, value)
            checked += 1
    assert checked > 30
    # The computed defaults of the run directory say what a run is called.
    train = commands[("train",)]
    helps = {a.dest: " ".join(a.help.split()) for a in train._actions if a.help}
    assert f"(default: {RUN_NAME_PATTERN})" in train._get_formatter()._expand_help(
        next(a for a in train._actions if a.dest == "name")
    )
    run_dir = default_run_dir(TrainConfig())
    name = re.escape(RUN_NAME_PATTERN)
    for placeholder, value in (("data", "digits"), ("model", "cnn"), ("date", r"\d{8}"),
                               ("time", r"\d{6}")):  # fmt: skip
        name = name.replace(re.escape(f"<{placeholder}>"), value)
    assert re.fullmatch(f"runs/{name}", run_dir), (run_dir, name)
    assert "run directory" in helps["run_dir"]
    assert " ".join(
        train._get_formatter()
        ._expand_help(next(a for a in train._actions if a.dest == "run_dir"))
        .split()
    ).endswith("(default: runs/<name>)")


def test_sampler_picture_counts_epochs_from_1_as_the_console():
    from tfdp.cli.sampler import layout_figure

    samplers = [tfdp.DistributedSampler(8, 2, r) for r in range(2)]
    for s in samplers:
        s.set_epoch(0)  # the first epoch, as set_epoch and metrics.jsonl count it
    title = layout_figure(samplers, 1).axes[0].get_title()
    assert title.endswith("epoch 1"), title
