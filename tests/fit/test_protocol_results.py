"""fit.json as records (issue 42): the published documents, written when fit.json held sentences, read
through ``fit.protocol.read_protocol``; ``present.identification`` says what their sentences said, and the
records round-trip through JSON without a sentence left in them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopscale.fit.protocol import read_protocol
from loopscale.fit.protocol_results import ProtocolNote, ProtocolResult
from loopscale.fit.results import RecordError
from loopscale.present.fit_text import minimum_miss_text, protocol_note_text
from loopscale.present.identification import (
    disagreement_text,
    identification_reasons,
    identification_verdict,
    objective_note,
    profile_method,
)

RESULTS = Path(__file__).resolve().parents[2] / "results"
PUBLISHED = ["cpu", "laptop", "laptop-factorial", "laptop-hyperconnections", "laptop-truncated-bptt"]


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_fit_json_says_what_its_sentences_said(name):
    doc = json.loads((RESULTS / name / "fit.json").read_text())
    assert "schema" not in doc  # written before fit.protocol_results
    result = read_protocol(doc)
    old = doc["diagnostics"]
    assert identification_verdict(result.diagnostics) == old["verdict"]
    assert identification_reasons(result.diagnostics) == old["reasons"]
    assert objective_note(result.diagnostics.ranking) == old["objective_note"]
    assert result.phi_identified is old["phi_identified"]
    said = [m.get("reason") for m in doc["cell_minima"]]
    assert [m.reason and minimum_miss_text(m.reason) for m in result.cell_minima] == said
    assert [protocol_note_text(note) for note in result.notes] == doc["notes"]
    if doc["profile"] is not None:
        assert profile_method() == doc["profile"]["method"]
        said = doc["profile"]["disagreement"]
        written = result.profile.disagreement
        assert (said is None and written is None) or disagreement_text(written) == said


@pytest.mark.parametrize("name", PUBLISHED)
def test_the_records_round_trip_through_json_without_a_sentence(name):
    result = read_protocol(json.loads((RESULTS / name / "fit.json").read_text()))
    doc = json.loads(json.dumps(result.to_dict()))
    assert read_protocol(doc) == result == ProtocolResult.from_dict(doc)
    assert {"reasons", "objective_note"}.isdisjoint(doc["diagnostics"])
    assert doc["diagnostics"]["verdict"] in ("identified", "not_identified", "identified_given_shape")
    if doc["profile"] is not None:
        assert {"method", "objective_kind"}.isdisjoint(doc["profile"])
    assert "method" not in doc["random_effects_bootstrap"]
    assert all(isinstance(note, dict) for note in doc["notes"])


@pytest.mark.parametrize(
    "note",
    [
        ProtocolNote("no_per_r_fit", r=4, error="too few runs: 2"),
        ProtocolNote("no_budget_halves", budgets=3),
        ProtocolNote("no_half_refit", half="low", error="too few runs: 2"),
        ProtocolNote("no_profile"),
        ProtocolNote("fit_at_bound", at_bound=("E", "phi")),
        ProtocolNote("no_law_check"),
        ProtocolNote("no_budget_column"),
        ProtocolNote("no_width_column"),
        ProtocolNote("template_mismatch", template="the sweep's template (sweep.yaml)", error="a: N = 1"),
        ProtocolNote("no_frontier", error="r = 9 does not fit this template"),
    ],
)
def test_a_note_sentence_written_before_the_records_reads_back_as_its_record(note):
    """fit.json's notes were sentences: each reads back as the record whose sentence it is."""
    laptop = json.loads((RESULTS / "laptop" / "fit.json").read_text())
    assert read_protocol({**laptop, "notes": [protocol_note_text(note)]}).notes == (note,)


def test_a_fit_json_key_the_records_do_not_know_is_refused():
    doc = read_protocol(json.loads((RESULTS / "laptop" / "fit.json").read_text())).to_dict()
    doc["diagnostics"] = {**doc["diagnostics"], "verdict_text": "φ is identified"}
    with pytest.raises(RecordError, match="unknown key.*verdict_text"):
        read_protocol(doc)
