"""`loopscale eval` / `eval-sweep` on a real (tiny, 3-step) training run; r_eval ≠ r_train; bad input."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopscale.cli import main
from loopscale.data import train_bpe


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_prints_tables_and_writes_json(trained_run, tmp_path, capsys):
    out_json = tmp_path / "e.json"
    code, out, _ = run_cli(capsys, "eval", str(trained_run), "--axes", "reasoning_primitives",
                           "parametric_knowledge", "--limit", "12", "--task-dir", str(tmp_path),
                           "--json", str(out_json), "--device", "cpu")
    assert code == 0
    assert "VarAssign d1 (code)" in out and "TriviaQA" in out and "missing: no task file" in out
    assert "reasoning_primitives" in out and "0/3, missing triviaqa, nq_open, webquestions" in out
    report = json.loads(out_json.read_text())
    assert report["r"] == report["r_train"] == 2
    axis = report["axes"]["reasoning_primitives"]
    assert axis["complete"] and len(axis["tasks"]) == 5
    losses = [report["tasks"][name]["loss"] for name in axis["tasks"]]
    assert axis["loss"] == pytest.approx(sum(losses) / 5)
    assert all(report["tasks"][name]["n_examples"] == 12 for name in axis["tasks"])
    assert report["axes"]["parametric_knowledge"]["loss"] is None
    assert report["macro_loss"] == pytest.approx(axis["loss"])
    assert {m["name"] for m in report["missing"]} == {"triviaqa", "nq_open", "webquestions"}


def test_eval_at_other_r_works_and_changes_the_result(trained_run, tmp_path, capsys):
    losses = {}
    for r in ("1", "2", "4"):
        out_json = tmp_path / f"r{r}.json"
        code, out, _ = run_cli(capsys, "eval", str(trained_run), "--tasks", "induction_head",
                               "varassign_d0_math", "--limit", "16", "--r", r, "--json", str(out_json),
                               "--device", "cpu")
        assert code == 0 and f"r_eval={r} (trained r=2)" in out
        report = json.loads(out_json.read_text())
        assert report["r"] == int(r)
        losses[r] = report["macro_loss"]
    assert len(set(losses.values())) == 3


def _other_tokenizer(tmp_path, vocab):
    path = tmp_path / f"other{vocab}.json"
    texts = [f"zebra{i} quartz{i % 7} fjord{i % 13} glyph sphinx {i * 31}" for i in range(300)]
    train_bpe(texts, vocab, path)
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "/nonexistent/run"], "checkpoint not found"),
        (["eval", "{run}", "--tasks", "{bad}"], "malformed JSON"),
        (["eval", "{run}", "--tasks", "{empty}"], "no examples"),
        (["eval", "{run}", "--tasks", "no_such_task"], "unknown task"),
        (["eval", "{run}", "--axes", "nope"], "unknown axis"),
        (["eval", "{run}", "--tasks", "triviaqa", "--task-dir", "{tmp}"], "none of the selected tasks"),
        (["eval", "{run}", "--r", "0", "--tasks", "induction_head"], "r must be >= 1"),
        (["eval", "{run}", "--limit", "0"], "--limit"),
        (["eval", "{run}", "--tokenizer", "{tok320}", "--tasks", "induction_head"],
         "trained with the tokenizer"),
        (["eval-sweep", "{tmp}"], "not a sweep folder"),
        (["eval", "{run}", "--tasks", "induction_head", "--device", "tpu0"], "unknown device"),
        (["eval", "{run}", "--tasks", "induction_head", "--threads", "0"], "--threads must be >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(trained_run, tmp_path, capsys, args, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"context": "a", "continuation": "b"}\n{"context": "a", \n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"task": {"name": "empty"}}\n')
    fill = {"run": str(trained_run), "bad": str(bad), "empty": str(empty), "tmp": str(tmp_path)}
    if any("{tok320}" in a for a in args):
        fill["tok320"] = str(_other_tokenizer(tmp_path, 320))
    argv = [a.format(**fill) for a in args]
    code, out, err = run_cli(capsys, *argv, *([] if "--device" in argv else ["--device", "cpu"]))
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("loopscale eval")


def test_checkpoint_from_another_tokenizer(trained_run, tmp_path, capsys):
    # The run's data set carries another tokenizer than the one the model was trained with.
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    data = tmp_path / "data"
    src = Path(json.loads((trained_run / "result.json").read_text())["config"]["data"]["path"])
    shutil.copytree(src, data)
    shutil.copy(_other_tokenizer(tmp_path, 300), data / "tokenizer.json")
    config = (run / "config.yaml").read_text().replace(str(src), str(data))
    (run / "config.yaml").write_text(config)
    code, _, err = run_cli(capsys, "eval", str(run), "--tasks", "induction_head", "--device", "cpu")
    assert code == 2 and "another tokenizer" in err and err.count("\n") == 1


def test_eval_sweep_is_resumable_and_skips_unfinished_runs(trained_run, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for name in ("a_ok", "b_ok"):
        shutil.copytree(trained_run, sweep / "runs" / name)
    failed = sweep / "runs" / "c_failed"
    shutil.copytree(trained_run, failed)
    result = json.loads((failed / "result.json").read_text())
    result.update(status="failed", reason="non-finite loss")
    (failed / "result.json").write_text(json.dumps(result))
    (sweep / "runs" / "d_pending").mkdir()
    args = ["eval-sweep", str(sweep), "--tasks", "induction_head", "--limit", "8", "--device", "cpu"]
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "2 evaluated, 0 already done, 2 not finished or failed" in out
    first = json.loads((sweep / "runs" / "a_ok" / "eval.json").read_text())
    axis_loss = first["axes"]["reasoning_primitives"]["loss"]
    assert axis_loss == pytest.approx(first["tasks"]["induction_head"]["loss"])
    assert not (failed / "eval.json").exists() and not (sweep / "runs" / "d_pending" / "eval.json").exists()
    # rerun: nothing to do; an interrupted evaluation (b has no eval.json) resumes with b only
    code, out, _ = run_cli(capsys, *args)
    assert "0 evaluated, 2 already done" in out
    (sweep / "runs" / "b_ok" / "eval.json").unlink()
    code, out, _ = run_cli(capsys, *args)
    assert "1 evaluated, 1 already done" in out
    # other settings (another r) are a different evaluation: redone
    code, out, _ = run_cli(capsys, *args, "--r", "1")
    assert "2 evaluated, 0 already done" in out
    assert json.loads((sweep / "runs" / "a_ok" / "eval.json").read_text())["r"] == 1
    assert not list((sweep / "runs" / "a_ok").glob(".eval.json.*"))  # atomic write left no temp file


def test_eval_sweep_needs_runs_only_and_writes_only_into_loopscale_run_folders(trained_run, tmp_path, capsys):
    # a sweep folder without sweep.yaml is evaluated (eval-sweep needs runs/ only), but a folder under runs/
    # that loopscale did not create is refused before anything is written
    sweep = tmp_path / "sweep"
    shutil.copytree(trained_run, sweep / "runs" / "a_ok")
    foreign = sweep / "runs" / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("the user's own file\n")
    args = ["eval-sweep", str(sweep), "--tasks", "induction_head", "--limit", "8", "--device", "cpu"]
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1 and "was not created by loopscale" in err and "notes" in err
    assert not (sweep / "runs" / "a_ok" / "eval.json").exists()
    (foreign / "mine.txt").unlink()
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "1 evaluated" in out and (sweep / "runs" / "a_ok" / "eval.json").is_file()


def test_eval_sweep_resume_is_keyed_by_task_set_and_content(trained_run, tmp_path, capsys):
    sweep, tasks = tmp_path / "sweep", tmp_path / "tasks"
    shutil.copytree(trained_run, sweep / "runs" / "a_ok")
    tasks.mkdir()
    args = ["eval-sweep", str(sweep), "--tasks", "induction_head", "nq_open", "--task-dir", str(tasks),
            "--limit", "6", "--device", "cpu"]
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "1 evaluated" in out and "1 task(s) scored, 0 kept" in out
    eval_json = sweep / "runs" / "a_ok" / "eval.json"
    first = json.loads(eval_json.read_text())
    assert [m["name"] for m in first["missing"]] == ["nq_open"]
    # a task file appears (e.g. `loopscale eval prepare`): only that task is scored, the other is kept
    rows = [{"context": f"Question: q{i}?\nAnswer: ", "continuation": f"a{i}"} for i in range(8)]
    (tasks / "nq_open.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = run_cli(capsys, *args)
    assert "1 evaluated" in out and "1 task(s) scored, 1 kept" in out
    second = json.loads(eval_json.read_text())
    assert second["tasks"]["induction_head"] == first["tasks"]["induction_head"] and not second["missing"]
    assert set(second["settings"]["task_set"]) == {"induction_head", "nq_open"}
    code, out, _ = run_cli(capsys, *args)
    assert "0 evaluated, 1 already done" in out
    # the file's content changes: that task is scored again
    rows[0]["continuation"] = "changed"
    (tasks / "nq_open.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = run_cli(capsys, *args)
    assert "1 evaluated" in out and "1 task(s) scored, 1 kept" in out
    third = json.loads(eval_json.read_text())
    assert third["tasks"]["nq_open"]["digest"] != second["tasks"]["nq_open"]["digest"]


def test_relative_data_path_resolves_against_the_run_and_sweep_folders(trained_run, tmp_path, capsys):
    # The data set lives next to the sweep; the run's config names it relative to the sweep root.
    sweep = tmp_path / "sweep"
    run = sweep / "runs" / "r"
    shutil.copytree(trained_run, run)
    src = Path(json.loads((trained_run / "result.json").read_text())["config"]["data"]["path"])
    shutil.copytree(src, sweep / "data" / "set")
    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace(str(src), "data/set"))
    code, out, err = run_cli(capsys, "eval", str(run), "--tasks", "induction_head", "--limit", "4",
                             "--device", "cpu")
    assert code == 0, err
    assert "Induction head" in out


def _sweep_of_copies(trained_run, root: Path, n: int) -> Path:
    for i in range(n):
        shutil.copytree(trained_run, root / "runs" / f"run{i}")
    return root


def test_eval_sweep_workers_give_the_results_of_one_process(trained_run, tmp_path, capsys):
    """Two worker processes write the eval.json one process writes (same threads per evaluation)."""
    sweep = _sweep_of_copies(trained_run, tmp_path / "sweep", 3)
    args = ["eval-sweep", str(sweep), "--tasks", "induction_head", "varassign_d0_math", "--limit", "8",
            "--device", "cpu", "--threads", "1"]
    code, out, _ = run_cli(capsys, *args, "--workers", "1")
    assert code == 0 and "3 evaluated" in out
    alone = {p.parent.name: json.loads(p.read_text())["tasks"] for p in sweep.glob("runs/*/eval.json")}
    code, out, _ = run_cli(capsys, *args, "--workers", "2", "--force")
    assert code == 0 and "3 evaluated" in out
    pooled = {p.parent.name: json.loads(p.read_text())["tasks"] for p in sweep.glob("runs/*/eval.json")}
    assert pooled == alone and len(pooled) == 3


def _live_members(group: int) -> list[str]:
    """Command lines of the processes of process group ``group`` that still run; a process that has
    exited (a zombie, or the spawn resource tracker on its way out) has an empty /proc cmdline."""
    live = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[2]) == group and cmdline:
            live.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return live


def test_interrupted_parallel_eval_sweep_loses_nothing_and_resumes(trained_run, tmp_path):
    """Ctrl-C (SIGINT to the process group) while two workers are each half-way through writing an
    eval.json: exit 130, one line, no worker left behind, no eval.json and no temporary file but the one
    finished run's; the rerun evaluates only what is missing. A test hook (crash_hooks/sitecustomize.py,
    eval-hold) lets exactly one run finish and holds every other mid-write, so the moment of the
    interrupt does not depend on the machine's speed."""
    n = 4
    sweep, markers = _sweep_of_copies(trained_run, tmp_path / "sweep", n), tmp_path / "markers"
    markers.mkdir()
    cmd = [sys.executable, "-m", "loopscale", "eval-sweep", str(sweep), "--tasks", "induction_head",
           "--limit", "8", "--device", "cpu", "--workers", "2"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    hooks = Path(__file__).parents[1] / "sweep" / "crash_hooks"
    held = {**env, "PYTHONPATH": os.pathsep.join([str(hooks), env.get("PYTHONPATH", "")]),
            "LOOPSCALE_TEST_PAUSE": "eval-hold", "LOOPSCALE_TEST_MARKERS": str(markers)}
    # a shell starts background jobs (e.g. a CI runner's) with SIGINT ignored, and Python keeps an ignored
    # SIGINT ignored: give the sweep the default, as an interactive user's has
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=held,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while len(list(markers.glob("hold-*"))) < 2:  # both workers are stuck mid-write
        assert proc.poll() is None, proc.communicate()  # the sweep must not end before that
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate()
    finished = list(sweep.glob("runs/*/eval.json"))
    assert proc.returncode == 130, (out, err)
    resume = shlex.join(["loopscale", *cmd[3:]])  # the same command resumes it
    assert err.strip().splitlines() == [f"loopscale eval-sweep: interrupted; resume with `{resume}`"]
    assert _live_members(proc.pid) == []  # no orphaned worker computing on
    assert len(finished) == 1 and "macro loss" in out
    assert json.loads(finished[0].read_text())["tasks"]["induction_head"]["n_examples"] == 8
    assert not list(sweep.glob("runs/*/.eval.json.*"))  # the held workers' half-written files are gone
    rerun = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert rerun.returncode == 0
    assert f"{n - 1} evaluated, 1 already done" in rerun.stdout


def test_multiple_choice_task_through_the_cli_matches_unpacked_scoring(trained_run, tmp_path, capsys):
    """`loopscale eval` packs an MC item's options after one prompt; the gold options' loss equals
    scoring every option as its own sequence."""
    from loopscale.eval.axes import load_tasks
    from loopscale.eval.continuation import fit_shots, model_logits_fn, score_sequences
    from loopscale.eval.suite import load_eval_model

    rows = [{"context": f"Question: which is {w}?\nAnswer:", "choices": [" 4", " Paris", " val", " loop"],
             "gold": i % 4} for i, w in enumerate(["a cat", "the capital", "key", "the model", "n", "m"] * 2)]
    (tmp_path / "arc_easy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_json = tmp_path / "e.json"
    code, out, _ = run_cli(capsys, "eval", str(trained_run), "--tasks", "arc_easy", "--task-dir",
                           str(tmp_path), "--json", str(out_json), "--device", "cpu")
    assert code == 0 and "ARC-Easy" in out
    got = json.loads(out_json.read_text())["tasks"]["arc_easy"]
    loaded = load_eval_model(trained_run, device="cpu")
    (task,), _ = load_tasks(["arc_easy"], tmp_path)
    _, owners, sequences = fit_shots(task, loaded.tokenizer, loaded.bos_id, loaded.seq_len)
    alone = score_sequences(sequences, model_logits_fn(loaded.model))
    assert got["n_examples"] == 12 and got["n_sequences"] == 48
    per_item = {}
    for owner, score in zip(owners, alone):
        per_item.setdefault(owner, []).append(score)
    total = sum(per_item[i][ex.gold].loss_sum for i, ex in enumerate(task.scored))
    tokens = sum(per_item[i][ex.gold].n_tokens for i, ex in enumerate(task.scored))
    assert got["loss"] == pytest.approx(total / tokens, rel=1e-5)


def test_compiled_scoring_gives_the_eager_scores(trained_run, tmp_path, capsys):
    """--compile (torch.compile of the scoring pass, packed MC rows included) changes speed, not scores."""
    words = ["a cat", "the capital", "key", "the model", "n", "m"] * 2
    rows = [{"context": f"Question: which is {w}?\nAnswer:", "choices": [" 4", " Paris", " val"],
             "gold": i % 3} for i, w in enumerate(words)]
    (tmp_path / "arc_easy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    reports = {}
    for flag in ([], ["--compile"]):
        out_json = tmp_path / f"e{len(flag)}.json"
        code, _, _ = run_cli(capsys, "eval", str(trained_run), "--tasks", "arc_easy", "induction_head",
                             "--limit", "12", "--task-dir", str(tmp_path), "--json", str(out_json),
                             "--device", "cpu", *flag)
        assert code == 0
        reports[bool(flag)] = json.loads(out_json.read_text())["tasks"]
    for name, eager in reports[False].items():
        assert reports[True][name]["loss"] == pytest.approx(eager["loss"], rel=1e-5)
        assert reports[True][name]["accuracy"] == eager["accuracy"]


def test_eval_at_several_r_is_one_row_per_r(trained_run, tmp_path, capsys):
    """`eval RUN --r 1 2 4`: the test-time loop curve of one checkpoint in one command; each r scores as a
    separate `--r R` evaluation does."""
    args = ["eval", str(trained_run), "--tasks", "induction_head", "varassign_d0_math", "--limit", "8",
            "--device", "cpu"]
    out_json = tmp_path / "curve.json"
    code, out, err = run_cli(capsys, *args, "--r", "1", "2", "4", "--json", str(out_json))
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line[:4].strip() in ("1", "2", "4")]
    assert [row[0] for row in rows] == ["1", "2", "4"] and "trained r=2" in out
    reports = json.loads(out_json.read_text())["reports"]
    assert [rep["r"] for rep in reports] == [1, 2, 4] and all(rep["r_train"] == 2 for rep in reports)
    assert [f"{rep['macro_loss']:.4f}" for rep in reports] == [row[1] for row in rows]
    assert "r=4 induction_head" in err  # progress names the loop count
    code, _, _ = run_cli(capsys, *args, "--r", "4", "--json", str(tmp_path / "r4.json"))
    assert code == 0
    assert json.loads((tmp_path / "r4.json").read_text())["tasks"] == reports[2]["tasks"]
    code, _, err = run_cli(capsys, *args, "--r", "2", "4", "2")
    assert code == 2 and "--r lists 2 more than once" in err and err.count("\n") == 1


def test_eval_sweep_at_several_r_writes_one_file_per_r(trained_run, tmp_path, capsys):
    sweep = _sweep_of_copies(trained_run, tmp_path / "sweep", 1)
    args = ["eval-sweep", str(sweep), "--tasks", "induction_head", "--limit", "8", "--device", "cpu",
            "--r", "1", "3"]
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "2 evaluated, 0 already done (run x r)" in out
    assert "run0: r=1 macro loss" in out and "run0: r=3 macro loss" in out
    run = sweep / "runs" / "run0"
    assert not (run / "eval.json").exists()  # collect reads eval.json: a single-r evaluation
    assert [json.loads((run / f"eval_r{r}.json").read_text())["r"] for r in (1, 3)] == [1, 3]
    code, out, _ = run_cli(capsys, *args)
    assert "0 evaluated, 2 already done" in out


@pytest.fixture(scope="module")
def hyperconnect_run(trained_run, tmp_path_factory) -> Path:
    """The trained run's recipe with hyperconnections (r = 2), 2 steps."""
    import dataclasses

    from loopscale.config import from_dict, load_yaml
    from loopscale.train import TrainConfig, train

    cfg = from_dict(TrainConfig, load_yaml(trained_run / "config.yaml"), "train")
    cfg = dataclasses.replace(cfg, steps=2, model=dataclasses.replace(cfg.model, injection="hyperconnect"))
    run = tmp_path_factory.mktemp("hc") / "run"
    assert train(cfg, run)["status"] == "ok"
    return run


def test_hyperconnection_loop_counts_beyond_the_trained_r_are_refused(hyperconnect_run, tmp_path, capsys):
    args = ["--tasks", "induction_head", "--limit", "4", "--device", "cpu"]
    code, out, err = run_cli(capsys, "eval", str(hyperconnect_run), "--r", "1", "4", *args)
    assert code == 2 and err.count("\n") == 1 and out == ""  # refused before any r is evaluated
    assert "hyperconnection model trained with r=2" in err and "cannot run r=4" in err
    code, out, _ = run_cli(capsys, "eval", str(hyperconnect_run), "--r", "1", "2", *args)
    assert code == 0
    sweep = tmp_path / "sweep"
    shutil.copytree(hyperconnect_run, sweep / "runs" / "hc")
    code, _, err = run_cli(capsys, "eval-sweep", str(sweep), "--r", "2", "3", *args)
    assert code == 2 and err.count("\n") == 1 and "cannot run r=3" in err
    assert not list((sweep / "runs" / "hc").glob("eval*.json"))
