"""config.py: typed loader (unknown keys, coercion), ModelConfig validation, iso-depth layout (§2.1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from loopscale.config import (
    Layout,
    ModelConfig,
    dump_yaml,
    from_dict,
    load_yaml,
    replace,
    to_dict,
)
from loopscale.errors import UserError


def one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message
    return message


# ---------------------------------------------------------------------------------------------------------
# from_dict


@dataclass
class Inner:
    lr: float = 0.1
    name: str = "x"


@dataclass
class Outer:
    steps: int  # required
    inner: Inner = field(default_factory=Inner)
    flag: bool = False
    sizes: tuple[int, ...] = (1,)
    widths: list[int] = field(default_factory=list)
    budget: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def test_unknown_keys_are_named_with_the_allowed_ones():
    with pytest.raises(UserError) as exc:
        from_dict(ModelConfig, {"widht": 64, "r": 2}, "model")
    msg = one_line_error(exc)
    assert "'widht'" in msg and "width" in msg and msg.startswith("model:")
    with pytest.raises(UserError, match=r"outer\.inner: unknown key\(s\) 'lrr'"):
        from_dict(Outer, {"steps": 1, "inner": {"lrr": 1}}, "outer")


def test_nested_and_coerced_values():
    data = {"steps": "1e3", "inner": {"lr": "3e-4", "name": 5}, "flag": True, "sizes": [2, 3.0],
            "widths": [64], "budget": "1e18", "extra": {"a": 1}}
    obj = from_dict(Outer, data)
    assert obj == Outer(steps=1000, inner=Inner(lr=3e-4, name="5"), flag=True, sizes=(2, 3), widths=[64],
                        budget=1e18, extra={"a": 1})
    assert from_dict(Outer, {"steps": 2, "budget": None}).budget is None
    assert from_dict(Outer, {"steps": 2.0}).steps == 2


@pytest.mark.parametrize("data,match", [
    ({"steps": 1.5}, "expected an integer"),
    ({"steps": True}, "expected an integer"),
    ({"steps": "ten"}, "expected an integer"),
    ({"steps": 1, "flag": "yes"}, "expected true/false"),
    ({"steps": 1, "budget": "inf"}, "finite"),
    ({"steps": 1, "budget": "lots"}, "expected a number"),
    ({"steps": 1, "sizes": 3}, "expected a list"),
    ({"steps": 1, "extra": [1]}, "expected a mapping"),
    ({"steps": 1, "inner": [1]}, "expected a mapping"),
    ({"steps": 1, "inner": {"name": [1]}}, "expected a string"),
    ({}, "steps"),  # required field missing
])
def test_bad_values_are_one_line_user_errors(data, match):
    with pytest.raises(UserError, match=match) as exc:
        from_dict(Outer, data, "outer")
    one_line_error(exc)


def test_non_mapping_is_refused():
    with pytest.raises(UserError, match="expected a mapping"):
        from_dict(ModelConfig, [1, 2], "model")
    assert from_dict(ModelConfig, None) == ModelConfig()


# ---------------------------------------------------------------------------------------------------------
# ModelConfig and the iso-depth layout


@pytest.mark.parametrize("r,prelude,rec,coda,injection", [
    (1, 0, 20, 0, "none"),
    (2, 2, 8, 2, "linear"),
    (4, 2, 4, 2, "linear"),
    (8, 2, 2, 2, "linear"),
    (16, 2, 1, 2, "linear"),  # the largest r the template allows
])
def test_paper_layouts_2_1(r, prelude, rec, coda, injection):
    lay = ModelConfig(r=r).layout()
    assert lay == Layout(prelude=prelude, rec_layers=rec, coda=coda, r=r, injection=injection)
    assert lay.effective_depth == 20 and lay.unique_layers == prelude + rec + coda


def test_explicit_injection_keeps_prelude_and_coda_at_r1():
    assert ModelConfig(r=1, injection="linear").layout() == Layout(2, 16, 2, 1, "linear")
    assert ModelConfig(r=1, injection="none").layout() == Layout(2, 16, 2, 1, "none")


@pytest.mark.parametrize("kw,match", [
    (dict(width=640, head_dim=96), "not divisible by head_dim 96"),
    (dict(width=0), "must be positive"),
    (dict(width=66, head_dim=33), "must be even"),
    (dict(injection="concat"), "injection must be one of"),
    (dict(r=0), "r must be >= 1"),
    (dict(r=3), "r=3 does not divide the recurrent depth 16"),
    (dict(r=32), "fewer than r=32"),
    (dict(r=2, prelude=-1), "must be >= 0"),
    (dict(vocab_size=1), "vocab_size"),
    (dict(seq_len=0), "seq_len"),
    (dict(hc_lanes=0), "hc_lanes"),
    (dict(r=4, bptt_k=5), "bptt_k must be in 1..r=4"),
    (dict(r=4, bptt_k=0), "bptt_k must be in 1..r=4"),
    (dict(r=4, injection="hyperconnect", bptt_k=2), "not supported with hyperconnections"),
    (dict(r=1, injection="parcae"), "injection parcae needs r >= 2"),
    (dict(r=1, injection="parcae-diag"), "injection parcae-diag needs r >= 2"),
])
def test_impossible_model_configs_are_refused(kw, match):
    with pytest.raises(UserError, match=match) as exc:
        from_dict(ModelConfig, kw, "model")
    one_line_error(exc)


def test_valid_edge_configs():
    assert ModelConfig(r=4, injection="hyperconnect", bptt_k=4).effective_bptt_k == 4  # full BPTT is fine
    assert ModelConfig(r=4, bptt_k=2).effective_bptt_k == 2
    assert ModelConfig(r=4).effective_bptt_k == 4
    assert ModelConfig(width=384).n_head == 3
    assert ModelConfig(r=2, injection="parcae").layout() == Layout(2, 8, 2, 2, "parcae")
    assert ModelConfig(r=8, injection="parcae-diag", bptt_k=4).effective_bptt_k == 4


def test_replace_revalidates():
    cfg = ModelConfig(r=2)
    assert replace(cfg, r=4).layout().rec_layers == 4
    with pytest.raises(UserError, match="does not divide"):
        replace(cfg, r=3)


@given(prelude=st.integers(0, 3), coda=st.integers(0, 3), rec=st.integers(1, 4), r=st.integers(1, 8),
       injection=st.sampled_from(["auto", "linear", "additive", "none", "hyperconnect"]))
def test_layout_is_iso_depth(prelude, coda, rec, r, injection):
    cfg = ModelConfig(depth=prelude + coda + r * rec, prelude=prelude, coda=coda, r=r, injection=injection)
    cfg.validate()
    lay = cfg.layout()
    assert lay.effective_depth == cfg.depth
    if injection == "auto" and r == 1:
        assert (lay.prelude, lay.coda, lay.injection) == (0, 0, "none")
    else:
        assert (lay.prelude, lay.rec_layers, lay.coda) == (prelude, rec, coda)
        assert lay.injection == ("linear" if injection == "auto" else injection)


@given(vocab=st.integers(2, 200_000))
def test_padded_vocab(vocab):
    padded = ModelConfig(vocab_size=vocab).padded_vocab
    assert padded % 64 == 0 and vocab <= padded < vocab + 64


def test_paper_vocab_pads_to_32064():
    assert ModelConfig(vocab_size=32_008).padded_vocab == 32_064
    assert ModelConfig(vocab_size=32_001).padded_vocab == 32_064
    assert ModelConfig().vocab_size == 32_001  # the default is the true vocabulary of the authors' tokenizer


# ---------------------------------------------------------------------------------------------------------
# YAML


@given(width_heads=st.integers(1, 8), r=st.sampled_from([1, 2, 4]), bptt=st.booleans(),
       injection=st.sampled_from(["auto", "linear", "additive", "none"]), seq_len=st.integers(1, 4096))
def test_yaml_round_trip(width_heads, r, bptt, injection, seq_len):
    cfg = ModelConfig(width=128 * width_heads, r=r, bptt_k=1 if bptt else None, injection=injection,
                      seq_len=seq_len, depth=16, prelude=0, coda=0)
    text = dump_yaml(cfg)
    assert from_dict(ModelConfig, yaml.safe_load(text)) == cfg
    assert to_dict(cfg) == yaml.safe_load(text)


def test_load_yaml_errors(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("width: 64\nr: [1, 2\n")
    with pytest.raises(UserError, match=r"malformed YAML \(line \d+, column \d+\)") as exc:
        load_yaml(bad)
    one_line_error(exc)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="top level must be a mapping"):
        load_yaml(listing)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_yaml(empty) == {}
    good = tmp_path / "model.yaml"
    good.write_text("width: 384\nr: 4\n")
    assert from_dict(ModelConfig, load_yaml(good)).layout().rec_layers == 4
