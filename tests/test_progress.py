"""Progress bars (loopscale.progress): one bar per phase on stderr, one line per redraw when stderr is not a
terminal, nothing with LOOPSCALE_PROGRESS=0 or inside another bar; and the phases that use them."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from loopscale import progress as progress_module
from loopscale.data.prepare import prepare_text_folder
from loopscale.progress import progress, progress_bar
from loopscale.sweep import relay
from loopscale.sweep.plan import PlannedRun


class Stderr:
    """What the code under test wrote to stderr, which pytest captures (not a terminal, as in a log)."""

    def __init__(self, capsys) -> None:
        self.capsys, self.text = capsys, ""

    def getvalue(self) -> str:
        self.text += self.capsys.readouterr().err
        return self.text


@pytest.fixture()
def stderr(capsys, monkeypatch) -> Stderr:
    """Bars on (tests/conftest.py turns them off elsewhere) and drawn from the start of a phase."""
    monkeypatch.delenv(progress_module.ENV_VAR, raising=False)
    monkeypatch.setattr(progress_module, "FIRST_DRAW_S", 0.0)
    return Stderr(capsys)


def lines(stream: Stderr) -> list[str]:
    return stream.getvalue().splitlines()


def last_lines(stream: Stderr) -> dict[str, str]:
    """Each bar's last line, by its description."""
    return {line.split(":")[0]: line for line in lines(stream)}


def test_a_log_gets_whole_lines_ending_at_the_total(stderr):
    assert list(progress(range(3), "phase", "item")) == [0, 1, 2]
    out = lines(stderr)
    assert "\r" not in stderr.getvalue()
    assert all(line.startswith("phase: ") for line in out)
    assert "3/3" in out[-1] and "100%" in out[-1]
    assert len(out) == len(set(out))  # the closing redraw repeats nothing


def test_a_short_phase_and_an_error_as_a_phase_starts_draw_nothing(stderr, monkeypatch):
    monkeypatch.setattr(progress_module, "FIRST_DRAW_S", 30.0)
    assert list(progress(range(3), "short")) == [0, 1, 2]
    with pytest.raises(ValueError), progress_bar(3, "refused"):
        raise ValueError("bad input: one line, nothing before it")
    assert stderr.getvalue() == ""


@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_environment_variable_turns_bars_off(stderr, monkeypatch, value):
    monkeypatch.setenv(progress_module.ENV_VAR, value)
    with progress_bar(2, "phase") as advance:
        advance(2)
    assert stderr.getvalue() == ""


def test_a_config_turns_its_bar_off(stderr):
    assert list(progress(range(2), "phase", enable=False)) == [0, 1]
    assert stderr.getvalue() == ""


def test_nested_phases_draw_nothing(stderr):
    with progress_bar(2, "outer") as advance:
        for _ in range(2):
            assert list(progress(range(4), "inner")) == [0, 1, 2, 3]
            advance(1)
    assert lines(stderr) and all(line.startswith("outer: ") for line in lines(stderr))
    assert list(progress(range(1), "after")) == [0]  # the outer bar is closed: bars draw again
    assert lines(stderr)[-1].startswith("after: ")


def test_a_phase_left_by_an_error_leaves_no_final_line(stderr):
    with pytest.raises(ValueError), progress_bar(3, "phase") as advance:
        advance(1)
        raise ValueError
    assert not any("1/3" in line for line in lines(stderr))
    assert list(progress(range(1), "next")) == [0]  # and the failed phase no longer counts as open


def test_an_upper_bound_ends_at_100_percent_and_a_total_shows_where_it_stopped(stderr):
    list(progress(iter(range(2)), "bound", total=5, upper_bound=True))
    list(progress(iter(range(2)), "total", total=5))
    final = last_lines(stderr)
    assert "2/2" in final["bound"] and "100%" in final["bound"]
    assert "2/5" in final["total"]


def test_a_phase_that_outgrows_its_total_never_reads_past_100_percent(stderr):
    with progress_bar(2, "grown", "refit") as advance:
        for _ in range(5):
            advance(1)
    final = last_lines(stderr)["grown"]
    assert "5/5" in final and "100%" in final


def test_a_slow_unit_still_shows_the_time(stderr, monkeypatch):
    monkeypatch.setattr(progress_module, "LOG_INTERVAL_S", 0.1)
    with progress_bar(1, "slow") as advance:
        for _ in range(200):  # wait for the heartbeat's redraw (at most 20 s, never reached when it works)
            if len(lines(stderr)) >= 2:
                break
            time.sleep(0.1)
        drawn = len(lines(stderr))
        advance(1)
    assert drawn >= 2  # the first draw, then the heartbeat's while no unit finished


def test_data_prepare_shows_corpus_tokenizer_and_packing(stderr, tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    words = "the river stone light house water night word hand city land fire sea king queen old".split()
    texts = [" ".join(words[(i + k) % len(words)] for k in range(40 + 30 * (i % 5))) for i in range(24)]
    (folder / "docs.jsonl").write_text("".join(json.dumps({"text": f"doc {i}: {t}"}) + "\n" for i, t in
                                               enumerate(texts)))
    prepare_text_folder(folder, tmp_path / "data", vocab_size=300, seq_len=16, val_fraction=0.3)
    final = last_lines(stderr)
    assert set(final) == {"corpus", "BPE tokenizer (300 tokens)", "packing train rows", "packing val rows"}
    assert "24document" in final["corpus"].replace(" ", "")
    assert all("100%" in final[name] for name in final if name != "corpus")


def test_the_first_run_of_a_sweep_is_relayed_from_its_metrics(stderr, tmp_path, monkeypatch):
    monkeypatch.setattr(relay, "RELAY_INTERVAL_S", 0.05)
    monkeypatch.setattr(progress_module, "LOG_INTERVAL_S", 0.05)
    folder = relay.run_dir(tmp_path, "main_d16_r1")
    folder.mkdir(parents=True)
    run = PlannedRun(
        name="main_d16_r1", group="main", budget=1.0, width=16, r=1, seed=0, n=1, n_once=1, n_rec=0,
        flops_per_token=1, steps=10, tokens=10, model=None,
    )
    half_done, finish = threading.Event(), threading.Event()

    def train() -> str:
        with open(folder / relay.METRICS_FILE, "w") as fh:
            for step in range(1, 6):
                fh.write(json.dumps({"step": step, "loss": 5.0}) + "\n")
            fh.write('{"step": 6, "lo')  # a line being written is not read
            fh.flush()
            half_done.set()
            finish.wait(20)
        return "ok"

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(train)
        half_done.wait(20)
        threading.Timer(0.5, finish.set).start()
        assert relay.wait_for_next_run(tmp_path, {future: run}, relay=True) == {future}
    assert relay.latest_step(folder) == 5
    out = lines(stderr)
    assert out[0].startswith("first run (main_d16_r1): ") and "0/10" in out[0]
    assert "5/10" in out[-1]  # where the run stood when it finished: no false 100%
