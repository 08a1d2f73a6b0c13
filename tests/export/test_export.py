"""`loopscale export` (issue 25): a run as a self-contained Hugging Face folder that transformers loads with
trust_remote_code, computes loopscale's logits and validation loss, runs other loop counts (refused beyond
the trained r for hyperconnections), generates with a per-(loop, layer) KV cache and runs under
lm-evaluation-harness' `hf` backend; bad input is one line and exit 2 with nothing written."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from loopscale.accounting import count_params, flops_per_token
from loopscale.cli import main
from loopscale.config import ModelConfig
from loopscale.data import PackedDataset
from loopscale.fit.results import TrendPower, read_law_check
from loopscale.published import absolute_paths
from loopscale.train import load_checkpoint_model

from .conftest import MODES, SEQ_LEN, VAL_TOKENS, tiny_config

REPO = Path(__file__).resolve().parents[2]

transformers = pytest.importorskip("transformers", reason="the `hf` extra (transformers) is not installed")

LOGIT_TOL = 1e-5  # fp32, max |logit difference|
LOSS_TOL = 1e-4  # nats


def load_hf(folder: Path, **kwargs):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True, **kwargs).eval()


def val_rows(run: Path) -> torch.Tensor:
    """The validation rows a run's val_loss was computed on ([rows, T+1] token ids)."""
    _, cfg = load_checkpoint_model(run)
    ds = PackedDataset(cfg.data.path)
    n_rows = math.ceil(VAL_TOKENS / SEQ_LEN)
    return torch.from_numpy(ds.rows("val", 0, n_rows).astype("int64"))


def val_loss(logits_fn, rows: torch.Tensor, micro_batch: int = 8) -> float:
    """loopscale's validation loss (train.loop.validation_loss) with another model's logits: token-weighted
    mean cross-entropy in nats over the first VAL_TOKENS targets, in the run's micro-batches."""
    total, count = 0.0, 0
    for start in range(0, len(rows), micro_batch):
        block = rows[start:start + micro_batch]
        x, y = block[:, :-1], block[:, 1:].clone()
        index = torch.arange(start, start + len(block)).view(-1, 1) * SEQ_LEN + torch.arange(SEQ_LEN)
        y[index >= VAL_TOKENS] = -1
        with torch.no_grad():
            logits = logits_fn(x)
        losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-1, reduction="none")
        total += float(losses.double().sum())
        count += int((y != -1).sum())
    return total / count


def test_folder_holds_config_code_weights_tokenizer_and_card(runs, exported):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    folder = exported["linear"]
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "configuration_loopscale.py", "modeling_loopscale.py", "model.safetensors",
            "tokenizer.json", "tokenizer_config.json", "generation_config.json", "README.md"} <= names
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "loopscale_looped" and config["model_type"] not in CONFIG_MAPPING_NAMES
    assert config["auto_map"] == {"AutoConfig": "configuration_loopscale.LoopscaleConfig",
                                  "AutoModelForCausalLM": "modeling_loopscale.LoopscaleForCausalLM"}
    _, cfg = load_checkpoint_model(runs["linear"])
    for field in ModelConfig.__dataclass_fields__:  # every architecture field of the run's ModelConfig
        assert field in config, field
    assert (config["r"], config["r_train"], config["width"], config["rec_layers"]) == (2, 2, 32, 2)
    assert config["loopscale"]["model_config"]["width"] == cfg.model.width
    # the code files import only torch and transformers (and the standard library), never loopscale
    for name in ("configuration_loopscale.py", "modeling_loopscale.py"):
        tree = ast.parse((folder / name).read_text())
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        imported = {(n.names[0].name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
                    for n in nodes if not getattr(n, "level", 0)}
        assert imported - set(sys.stdlib_module_names) - {"__future__"} <= {"torch", "transformers"}, imported
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast" and tok_config["eos_token"] == "<|bos|>"


def test_model_card_numbers_and_no_absolute_paths(runs, exported):
    _, cfg = load_checkpoint_model(runs["linear"])
    result = json.loads((runs["linear"] / "result.json").read_text())
    card = (exported["linear"] / "README.md").read_text()
    counts = count_params(cfg.model)
    for value in (counts.n, counts.n_once, counts.n_rec, flops_per_token(cfg.model),
                  flops_per_token(cfg.model, training=False), result["tokens"]):
        assert f"{value:,}" in card
    assert f"{result['val_loss']:.4f} nats/token" in card
    assert card.startswith("---\nlibrary_name: transformers")
    assert absolute_paths(card) == [] and str(runs["linear"].parent) not in card
    assert "## Sweep" not in card  # not a sweep run


@pytest.mark.parametrize("mode", list(MODES))
def test_logits_and_validation_loss_equal_loopscale(runs, exported, mode):
    from transformers import AutoTokenizer

    ours, _ = load_checkpoint_model(runs[mode])
    model = load_hf(exported[mode])
    tok = AutoTokenizer.from_pretrained(str(exported[mode]), trust_remote_code=True)
    assert tok.bos_token_id == tok.eos_token_id == 0 and tok("the river").input_ids[0] == 0
    rows = val_rows(runs[mode])
    with torch.no_grad():
        hf_logits, ls_logits = model(rows[:, :-1]).logits, ours(rows[:, :-1])
    assert hf_logits.dtype == torch.float32 and hf_logits.shape == ls_logits.shape
    diff = (hf_logits - ls_logits).abs().max().item()
    print(f"\n{mode}: max |logit diff| = {diff:.3g} (logits up to {ls_logits.abs().max().item():.3g})")
    assert diff <= LOGIT_TOL
    expected = json.loads((runs[mode] / "result.json").read_text())["val_loss"]
    got = val_loss(lambda x: model(x).logits, rows)
    print(f"{mode}: |val loss - result.json| = {abs(got - expected):.3g} nats ({got:.6f})")
    assert abs(got - expected) <= LOSS_TOL


@pytest.mark.parametrize("mode", ["linear", "additive", "none"])
def test_other_loop_counts_run_and_change_the_loss(runs, exported, mode):
    ours, _ = load_checkpoint_model(runs[mode])
    rows = val_rows(runs[mode])
    r_train = ours.layout.r
    trained = val_loss(lambda x: ours(x), rows)
    model = load_hf(exported[mode], r=8)
    assert model.config.r == 8 and model.config.num_hidden_layers == model.config.prelude + 8 * \
        model.config.rec_layers + model.config.coda
    with torch.no_grad():
        assert (model(rows[:, :-1]).logits - ours(rows[:, :-1], r=8)).abs().max() <= LOGIT_TOL
    at_8 = val_loss(lambda x: model(x).logits, rows)
    print(f"\n{mode}: val loss r={r_train} {trained:.6f}, r=8 {at_8:.6f} (change {at_8 - trained:+.4g} nats)")
    assert abs(at_8 - trained) > 1e-4
    # the loop count is read at every call, not copied at construction
    model.config.r = 4
    with torch.no_grad():
        assert (model(rows[:2, :-1]).logits - ours(rows[:2, :-1], r=4)).abs().max() <= LOGIT_TOL


def test_hyperconnections_refuse_more_loops_than_trained(runs, exported):
    folder = exported["hyperconnect"]
    with pytest.raises(ValueError, match="hyperconnection model has per-iteration parameters for 2 loops"):
        load_hf(folder, r=3)
    ours, _ = load_checkpoint_model(runs["hyperconnect"])
    model = load_hf(folder, r=1)  # fewer loops are defined: the first iterations' parameters
    x = val_rows(runs["hyperconnect"])[:2, :-1]
    with torch.no_grad():
        assert (model(x).logits - ours(x, r=1)).abs().max() <= LOGIT_TOL
        model.config.r = 5  # set after loading: refused at the call, not an IndexError inside the loop
        with pytest.raises(ValueError, match="cannot run r=5"):
            model(x)


def _resave(folder: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.pop("model.norm_final.weight"), "missing"),
        (lambda t: t.update({"model.extra.weight": torch.zeros(3)}), "unexpected"),
        (lambda t: t.update({"model.inject.weight": torch.zeros(32, 32)}), "mismatched"),
    ],
    ids=["missing", "unexpected", "shape"],
)
def test_a_state_dict_that_does_not_match_is_refused(exported, tmp_path, change, message):
    folder = tmp_path / "hf"
    shutil.copytree(exported["linear"], folder)
    _resave(folder, change)
    with pytest.raises((ValueError, RuntimeError), match=message):  # transformers' own for a shape
        load_hf(folder)
    with pytest.raises(ValueError, match=message):  # and ours, when transformers is told to go on
        load_hf(folder, ignore_mismatched_sizes=True)


@pytest.mark.parametrize("mode", list(MODES))
def test_greedy_generate_with_cache_equals_loopscale(runs, exported, mode):
    ours, _ = load_checkpoint_model(runs[mode])
    prompt = val_rows(runs[mode])[:1, :7]
    assert prompt[0, 0] == 0  # the prompt starts with BOS, which is also the eos token
    model = load_hf(exported[mode])
    out = model.generate(prompt, max_new_tokens=12, do_sample=False, return_dict_in_generate=True)
    expected = until_eos(ours.generate(prompt, 12), 7)
    assert torch.equal(out.sequences, expected)
    cache = out["cache"] if "cache" in out else out["past_key_values"]
    lay = ours.layout
    assert len(cache.layers) == lay.prelude + lay.r * lay.rec_layers + lay.coda  # one slot per (loop, layer)
    assert cache.get_seq_length() == expected.size(1) - 1
    # without an eos token generate() runs the whole length (BOS in the prompt is not taken for padding)
    out = model.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None)
    assert torch.equal(out, ours.generate(prompt, 12))
    if mode == "linear":  # at another loop count too
        model.config.r = 4
        out = model.generate(prompt, max_new_tokens=12, do_sample=False)
        assert torch.equal(out, until_eos(ours.generate(prompt, 12, r=4), 7))


def until_eos(ids: torch.Tensor, prompt_len: int, eos: int = 0) -> torch.Tensor:
    """[1, T] generated ids cut after the first eos among the new tokens (where generate() stops)."""
    new = (ids[0, prompt_len:] == eos).nonzero()
    return ids if len(new) == 0 else ids[:, : prompt_len + int(new[0]) + 1]


def test_left_padding_with_attention_mask_gives_the_unpadded_logits(runs, exported):
    model = load_hf(exported["linear"])
    rows = val_rows(runs["linear"])
    a, b = rows[0, :12], rows[1, :7]
    batch = torch.stack([a, torch.cat([torch.zeros(5, dtype=a.dtype), b])])
    mask = torch.tensor([[1] * 12, [0] * 5 + [1] * 7])
    with torch.no_grad():
        padded = model(batch, attention_mask=mask).logits
        assert (padded[0] - model(a[None]).logits[0]).abs().max() <= LOGIT_TOL
        assert (padded[1, 5:] - model(b[None]).logits[0]).abs().max() <= 1e-4  # RoPE: relative positions


def test_lm_eval_hf_backend_scores_equal_a_direct_forward_pass(exported, tmp_path, monkeypatch):
    try:
        import lm_eval.models.huggingface  # noqa: F401
        from lm_eval.__main__ import cli_evaluate
    except ImportError as exc:
        pytest.skip(f"lm-eval's hf backend does not import: {exc}")
    from transformers import AutoTokenizer

    folder = exported["linear"]
    docs = [("the river ran past a", " stone house"), ("an old king kept his", " word to the queen"),
            ("light fell on", " water"), ("the", " queen while light fell on water and fire")]
    monkeypatch.chdir(tmp_path)  # data_files resolve against the current folder
    rows = [json.dumps({"context": c, "continuation": x}) + "\n" for c, x in docs]
    Path("tiny.jsonl").write_text("".join(rows))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny.yaml").write_text(
        "task: loopscale_tiny\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: tiny.jsonl\n"
        "  cache_dir: datasets-cache\n"
        "test_split: test\noutput_type: loglikelihood\ndoc_to_text: '{{context}}'\n"
        "doc_to_target: '{{continuation}}'\nmetric_list:\n  - metric: perplexity\n"
        "    aggregation: perplexity\n    higher_is_better: false\n"
    )
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(sys, "argv", [
        "lm_eval", "run", "--model", "hf", "--model_args", f"pretrained={folder},trust_remote_code=True",
        "--tasks", "loopscale_tiny", "--include_path", "tasks", "--device", "cpu", "--batch_size", "4",
        "--output_path", "out", "--log_samples",
    ])
    _run_restoring_lm_eval_logging(cli_evaluate)
    samples = [json.loads(line) for path in Path("out").rglob("samples_loopscale_tiny_*.jsonl")
               for line in path.read_text().splitlines()]
    assert len(samples) == len(docs)
    # right-padded batches without an attention mask: the scores of a strictly causal model
    tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
    model = load_hf(folder)
    for sample in samples:
        context, continuation = sample["doc"]["context"], sample["doc"]["continuation"]
        whole, n_ctx = tok(context + continuation).input_ids, len(tok(context).input_ids)
        ids = torch.tensor([whole])
        with torch.no_grad():
            logp = model(ids).logits.log_softmax(-1)[0, n_ctx - 1:-1].gather(-1, ids[0, n_ctx:, None]).sum()
        assert float(sample["resps"][0][0][0]) == pytest.approx(float(logp), abs=1e-4)


def _run_restoring_lm_eval_logging(run) -> None:
    """``run()``, then lm-eval's logger as it was: its command line adds a handler bound to the stderr of
    the moment (this test's captured stream), which later tests in this process must not write to."""
    import logging

    import lm_eval.utils

    logger = logging.getLogger("lm_eval")
    saved = (list(logger.handlers), logger.level, logger.propagate, lm_eval.utils._LOGGING_CONFIGURED)
    try:
        run()
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
        lm_eval.utils._LOGGING_CONFIGURED = saved[3]


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def _bad_input(kind: str, runs, tmp: Path) -> list[str]:
    if kind == "missing":
        return [str(tmp / "nope"), "--out", str(tmp / "hf")]
    if kind == "not a run":
        (tmp / "notes").mkdir()
        (tmp / "notes" / "a.txt").write_text("x\n")
        return [str(tmp / "notes"), "--out", str(tmp / "hf")]
    if kind == "no weights":
        (tmp / "run").mkdir()
        shutil.copy(runs["linear"] / "config.yaml", tmp / "run" / "config.yaml")
        return [str(tmp / "run"), "--out", str(tmp / "hf")]
    if kind == "out not empty":
        (tmp / "hf").mkdir()
        (tmp / "hf" / "keep.txt").write_text("mine\n")
        return [str(runs["linear"]), "--out", str(tmp / "hf")]
    if kind == "out is a file":
        (tmp / "hf").write_text("mine\n")
        return [str(runs["linear"]), "--out", str(tmp / "hf")]
    raise AssertionError(kind)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", "run folder not found"),
        ("not a run", "not a loopscale run folder"),
        ("no weights", "has no weights yet"),
        ("out not empty", "folder exists and is not empty"),
        ("out is a file", "exists and is not a folder"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(runs, tmp_path, capsys, kind, message):
    argv = _bad_input(kind, runs, tmp_path)
    before = _snapshot(tmp_path)
    capsys.readouterr()
    assert main(["export", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("loopscale export: error: ") and message in err, err
    assert _snapshot(tmp_path) == before


def test_a_failure_while_writing_leaves_nothing(runs, tmp_path, capsys, monkeypatch):
    from loopscale.export import hf

    def broken(folder, *args):
        (folder / "config.json").write_text("{}")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf, "_write_folder", broken)
    out = tmp_path / "new" / "hf"
    assert main(["export", str(runs["linear"]), "--out", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # neither the folder, nor its temporary sibling, nor new/


def test_exported_into_an_empty_folder(runs, tmp_path):
    (tmp_path / "hf").mkdir()
    assert main(["export", str(runs["additive"]), "--out", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "model.safetensors").is_file() and len(list(tmp_path.iterdir())) == 1


def test_sweep_run_card_has_phi_and_the_law_check(runs, tmp_path):
    sweep = tmp_path / "sweeps" / "tiny"
    run = sweep / "runs" / "main_C1e9_d32_r2"
    shutil.copytree(runs["linear"], run)
    (sweep / "sweep.yaml").write_text("name: tiny\n")
    # the published laptop sweep's law check (rejected), read through its converter
    published = json.loads((REPO / "results" / "laptop-factorial" / "fit.json").read_text())["law_check"]
    check = read_law_check(published)
    fit = {"fit": {"phi": 0.4741, "n_runs": 60}, "ci": {"phi": [0.3487, 0.5955]},
           "ci_method": "random_effects_bootstrap", "law_check": check.to_dict()}  # fmt: skip
    (sweep / "fit.json").write_text(json.dumps(fit))
    out = tmp_path / "export" / "tiny-r2"
    assert main(["export", str(run), "--out", str(out)]) == 0
    card = (out / "README.md").read_text()
    assert "sweep `tiny`" in card and "`../../sweeps/tiny` from this folder" in card
    assert "φ = 0.474, 95% CI [0.349, 0.596] (random effects bootstrap)" in card
    assert "Law check: **rejected** — one constant phi is rejected: phi falls 0.40 per decade" in card
    assert absolute_paths(card) == [] and str(tmp_path) not in card
    # a φ the runs do not identify gets no interval, and a law too weakly tested is no measurement either
    fit["diagnostics"] = {"phi_identified": False}
    power = TrendPower("phi-trend-c", -0.40, check.threshold, 0.12)
    weak = dataclasses.replace(check, verdict="inconclusive", rejected_by=(), power=power)
    fit["law_check"] = weak.to_dict()
    (sweep / "fit.json").write_text(json.dumps(fit))
    assert main(["export", str(run), "--out", str(tmp_path / "export" / "again")]) == 0
    card = (tmp_path / "export" / "again" / "README.md").read_text()
    assert "φ is not identified by the sweep's runs over 60 runs" in card and "95% CI" not in card
    assert "Law check: **inconclusive** — too few to reject one constant phi (none of" in card
    assert "(φ is then no measurement: the runs are too few to test the law)" in card


def test_a_run_with_a_checkpoint_only_is_exported_from_it(runs, tmp_path):
    from loopscale.train import checkpoint as ckpt

    model, cfg = load_checkpoint_model(runs["linear"])
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(runs["linear"] / "config.yaml", run / "config.yaml")
    ckpt.save_checkpoint(run, 3, model, [], {"config": {}})
    out = tmp_path / "hf"
    assert main(["export", str(run), "--out", str(out)]) == 0
    card = (out / "README.md").read_text()
    assert "checkpoint at step 3" in card and "none yet (run not finished)" in card
    assert json.loads((out / "config.json").read_text())["loopscale"]["weights"] == "checkpoint at step 3"
    x = val_rows(runs["linear"])[:2, :-1]
    with torch.no_grad():
        assert (load_hf(out)(x).logits - model(x)).abs().max() <= LOGIT_TOL


@pytest.mark.parametrize("injection", ["parcae", "parcae-diag"])
def test_a_parcae_model_is_refused_not_exported_wrong(dataset, tmp_path, capsys, injection):
    """modeling_loopscale.py has no Parcae injection: an export would write a folder that cannot load it."""
    import dataclasses

    from loopscale.export.configuration_loopscale import INJECTIONS
    from loopscale.export.hf import EXPORTED_INJECTIONS
    from loopscale.train import train

    assert EXPORTED_INJECTIONS == INJECTIONS
    cfg = tiny_config(dataset, "linear", steps=1)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, injection=injection))
    assert train(cfg, tmp_path / "run")["status"] == "ok"
    before = _snapshot(tmp_path)
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"export does not implement {injection} injection" in err, err
    assert _snapshot(tmp_path) == before
