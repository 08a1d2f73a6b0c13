"""``loopscale export``: a run's weights as a self-contained Hugging Face folder (docs/export.md).

The folder holds ``config.json`` (``auto_map`` to the two code files, ``model_type`` ``loopscale_looped``,
every architecture field, the loop count ``r``), ``configuration_loopscale.py`` and
``modeling_loopscale.py`` (copied from this package; they import only torch and transformers),
``model.safetensors`` (fp32; loopscale's parameter names under ``model.``, ``lm_head.weight`` as it is),
the run's tokenizer (``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``: a
``PreTrainedTokenizerFast`` that prepends BOS, with BOS as eos and pad), ``generation_config.json`` and a
model card ``README.md``. Writing needs no transformers: the files are written as JSON.

The folder is written into a temporary sibling and renamed into place at the end, so a failure leaves
nothing behind. ``check_export`` refuses bad input before torch is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopscale.errors import UserError
from loopscale.io import shown

MODEL_TYPE = "loopscale_looped"
# The injection modes modeling_loopscale.py implements (its configuration's INJECTIONS, which import
# transformers); a model with another (Parcae's) is refused rather than exported into code that cannot run it.
EXPORTED_INJECTIONS = ("linear", "additive", "none", "hyperconnect")
CODE_FILES = ("configuration_loopscale.py", "modeling_loopscale.py")
CONFIG_CLASS = "configuration_loopscale.LoopscaleConfig"
MODEL_CLASS = "modeling_loopscale.LoopscaleForCausalLM"
WEIGHTS = "model.safetensors"


@dataclass
class Source:
    """Where the exported weights come from: the run folder and either its final weights or a checkpoint."""

    run: Path  # run folder (or checkpoint folder)
    weights: Path  # the model.safetensors read
    step: int | None  # checkpoint step; None for a finished run's final weights


def check_export(run: str | os.PathLike, out: str | os.PathLike) -> Source:
    """Refuse bad input with a one-line UserError, before torch loads: RUN must be a run folder
    (config.yaml) or checkpoint folder (state.json) with weights; ``out`` a new or empty folder in a
    writable place."""
    run, out = Path(run), Path(out)
    if not run.exists():
        raise UserError(f"run folder not found: {shown(run)}")
    if not run.is_dir():
        raise UserError(f"run folder {shown(run)} is a file; give a run folder")
    source = _source(run)
    check_out(out)
    if out.resolve() == run.resolve() or out.resolve().is_relative_to(run.resolve()):
        raise UserError(f"--out {shown(out)}: lies inside the run folder; give a folder outside it")
    return source


def _source(run: Path) -> Source:
    if (run / "state.json").is_file():  # a checkpoint folder
        weights = run / WEIGHTS
        if not weights.is_file():
            raise UserError(f"checkpoint folder {shown(run)} has no {WEIGHTS}")
        return Source(run, weights, _checkpoint_step(run))
    if not (run / "config.yaml").is_file():
        raise UserError(f"{shown(run)} is not a loopscale run folder (no config.yaml) nor a checkpoint "
                        "folder (no state.json)")
    if (run / WEIGHTS).is_file():
        return Source(run, run / WEIGHTS, None)
    pointer = run / "checkpoints" / "latest"
    if pointer.is_file():
        folder = pointer.parent / pointer.read_text().strip()
        if (folder / WEIGHTS).is_file():
            return Source(run, folder / WEIGHTS, _checkpoint_step(folder))
    raise UserError(f"run {shown(run)} has no weights yet (neither {WEIGHTS} nor a checkpoint); train it "
                    "first or wait for its first checkpoint")


def _checkpoint_step(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / "state.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_out(out: Path) -> None:
    """``out`` must be a new or empty folder whose nearest existing ancestor is writable."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {shown(out)}: exists and is not a folder; give a new or empty folder")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"--out {shown(out)}: folder exists and is not empty; give a new or empty folder")
    parent = next(p for p in out.absolute().parents if p.exists())
    if not parent.is_dir():
        raise UserError(f"--out {shown(out)}: {shown(parent)} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--out {shown(out)}: cannot write into {shown(parent)} (permission denied)")


def export_run(run: str | os.PathLike, out: str | os.PathLike, tokenizer: str | os.PathLike | None = None,
               ) -> dict[str, Any]:
    """Write the Hugging Face folder of ``run`` into ``out`` (new or empty); the config.json written.

    ``tokenizer`` overrides the run's (its training data set's ``tokenizer.json``)."""
    source = check_export(run, out)
    out = Path(out)
    from loopscale.train import load_checkpoint_model

    model, train_cfg = load_checkpoint_model(source.run)
    if model.layout.injection not in EXPORTED_INJECTIONS:
        raise UserError(f"{shown(source.run)}: export does not implement {model.layout.injection} injection "
                        f"(only {', '.join(EXPORTED_INJECTIONS)}); use the run folder with loopscale itself")
    if train_cfg.model.loop_hook is not None:
        raise UserError(f"{shown(source.run)}: export does not implement a plugin's loop hook "
                        f"({train_cfg.model.loop_hook}); use the run folder with loopscale itself")
    tok_file, bos_id = _tokenizer(source.run, train_cfg, tokenizer)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_file))
    if tok.get_vocab_size() > train_cfg.model.vocab_size:
        raise UserError(f"tokenizer {shown(tok_file)} has {tok.get_vocab_size()} tokens, more than the "
                        f"model's vocabulary of {train_cfg.model.vocab_size}: it is not the run's tokenizer")
    config = hf_config(train_cfg.model, bos_id, source)
    from loopscale.export.card import model_card

    card = model_card(source, train_cfg, out)
    created = [p for p in reversed(out.absolute().parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        _write_folder(tmp, model, config, tok, bos_id, card)
        os.replace(tmp, out)  # onto a missing or empty folder: atomic
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return config


def _tokenizer(run: Path, train_cfg, tokenizer: str | os.PathLike | None) -> tuple[Path, int]:
    """(tokenizer.json to export, BOS id): ``tokenizer`` when given, else the run's data set's."""
    from loopscale.data import PackedDataset, find_bos_id, load_tokenizer
    from loopscale.data.tokenizer import tokenizer_file
    from loopscale.eval.suite import resolve_data_path

    dataset = None
    try:
        dataset = PackedDataset(resolve_data_path(train_cfg.data.path, run))
    except UserError:
        pass
    if tokenizer is not None:
        path = tokenizer_file(tokenizer)
        bos_id = find_bos_id(load_tokenizer(path))
        return path, bos_id
    if dataset is None or dataset.tokenizer_path is None or not dataset.tokenizer_path.is_file():
        raise UserError(f"the tokenizer of {shown(run)} is unknown (its data set "
                        f"{shown(train_cfg.data.path)} is not available or has no tokenizer.json); pass "
                        "--tokenizer")
    tok = load_tokenizer(dataset.tokenizer_path)
    bos_id = int(dataset.bos_id) if dataset.bos_id is not None else find_bos_id(tok)
    return dataset.tokenizer_path, bos_id


def hf_config(model_cfg, bos_id: int, source: Source) -> dict[str, Any]:
    """config.json of the exported model: every architecture field of loopscale's ModelConfig with the
    layout resolved (``injection: auto`` becomes the concrete mode, prelude/coda the layout's), ``r`` the
    loop count to run (the trained one) and ``r_train``, plus loopscale's own config verbatim."""
    from loopscale import __version__
    from loopscale.config import to_dict

    lay = model_cfg.layout()
    return {
        "architectures": ["LoopscaleForCausalLM"],
        "auto_map": {"AutoConfig": CONFIG_CLASS, "AutoModelForCausalLM": MODEL_CLASS},
        "model_type": MODEL_TYPE,
        "width": model_cfg.width,
        "depth": model_cfg.depth,
        "r": lay.r,
        "r_train": lay.r,
        "prelude": lay.prelude,
        "coda": lay.coda,
        "rec_layers": lay.rec_layers,
        "head_dim": model_cfg.head_dim,
        "injection": lay.injection,
        "loop_init": model_cfg.loop_init,  # always auto (h(0) as the injection defines it): Parcae is refused
        "hc_lanes": model_cfg.hc_lanes,
        "bptt_k": model_cfg.bptt_k,
        "vocab_size": model_cfg.vocab_size,
        "padded_vocab_size": model_cfg.padded_vocab,
        "seq_len": model_cfg.seq_len,
        "softcap": model_cfg.softcap,
        "norm_eps": model_cfg.norm_eps,
        "rope_theta": model_cfg.rope_theta,
        "loop_hook": None,  # export refuses a plugin's hook (loopscale.plugins)
        "bos_token_id": bos_id,
        "eos_token_id": bos_id,
        "tie_word_embeddings": False,
        "dtype": "float32",
        "loopscale": {
            "version": __version__,
            "model_config": to_dict(model_cfg),
            "run": source.run.name,
            "weights": "final" if source.step is None else f"checkpoint at step {source.step}",
        },
    }


def _write_folder(folder: Path, model, config: dict, tok, bos_id: int, card: str) -> None:
    """Every file of the exported folder into ``folder``."""
    from safetensors.torch import save_file
    from tokenizers import processors

    here = Path(__file__).parent
    for name in CODE_FILES:
        shutil.copyfile(here / name, folder / name)
    _write_json(folder / "config.json", config)
    tensors = {(key if key == "lm_head.weight" else f"model.{key}"): value.detach().to("cpu").contiguous()
               for key, value in model.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS), metadata={"format": "pt"})
    bos = tok.id_to_token(bos_id)
    # every encoding starts with BOS, as every training document did (transformers rebuilds the same
    # template from add_bos_token; the tokenizers library reads it from here)
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B:1",
                                                       special_tokens=[(bos, bos_id)])
    tok.save(str(folder / "tokenizer.json"))
    special = {"bos_token": bos, "eos_token": bos, "pad_token": bos}
    _write_json(folder / "tokenizer_config.json", {
        # transformers 5 would write its backend's name, TokenizersBackend; older readers need this one
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": config["seq_len"],
        "clean_up_tokenization_spaces": False,
    })
    _write_json(folder / "special_tokens_map.json", special)
    _write_json(folder / "generation_config.json", {
        # no pad_token_id: BOS is the only special token, and generate() would take a BOS in the prompt for
        # padding (and mask it) whenever pad and eos differ; generate() pads with eos when it must
        "bos_token_id": bos_id, "eos_token_id": bos_id, "do_sample": False, "use_cache": True,
    })
    (folder / "README.md").write_text(card, encoding="utf-8")
    for path in folder.iterdir():  # on disk before the rename makes the folder visible
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(path, 0o666 & ~_umask())
    os.chmod(folder, 0o777 & ~_umask())  # mkdtemp made it 0700: give it the mode mkdir would


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def _umask() -> int:
    from loopscale.io import _umask as umask

    return umask()
