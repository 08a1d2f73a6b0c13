"""``price --against`` (issue 51, item 5): a priced arm's pairs read against another priced arm of the same
base and plan. Checked on copies of two published arms (curriculum and parcae, 21 pairs each at the same
cells and seeds) against an independent computation: each pair is the difference of the two arms' pairs
against the base, its loss change and token part included, and the arms' own prices are left as they were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from loopscale.analysis.price import PriceSettings, read_price
from loopscale.analysis.price_against import against_folder, price_against
from loopscale.cli import main
from loopscale.errors import UserError
from loopscale.recipes import resolve_recipe

RESULTS = Path(__file__).resolve().parents[2] / "results"


@pytest.fixture(scope="module")
def arms(tmp_path_factory) -> Path:
    """Copies of two published priced arms beside a link to their published base (their price.json names
    the base as ../laptop-factorial)."""
    root = tmp_path_factory.mktemp("arms")
    (root / "laptop-factorial").symlink_to(RESULTS / "laptop-factorial")
    for arm in ("laptop-curriculum", "laptop-parcae"):
        shutil.copytree(RESULTS / arm, root / arm, ignore=shutil.ignore_patterns("*.png", "*.svg", "*.html"))
    return root


def _settings(root: Path, **changes) -> PriceSettings:
    values = dict(
        recipe=resolve_recipe("curriculum"),
        base=root / "laptop-factorial",
        out=root / "laptop-curriculum",
        against=root / "laptop-parcae",
        bootstrap=10,  # the law's bootstrap: its SE share, not the pairs, is what these checks leave aside
        sequences=200,
    )
    return PriceSettings(**{**values, **changes})


def _by_cell(result) -> dict:
    return {(p.budget, p.width, p.r, p.seed): p for p in result.effects.pairs}


def test_pairs_against_an_arm_are_the_differences_of_both_arms_pairs_against_the_base(arms):
    before = (arms / "laptop-curriculum" / "price.json").read_bytes()
    result = price_against(_settings(arms), echo=lambda line: None)
    mine = _by_cell(read_price(arms / "laptop-curriculum" / "price.json"))
    theirs = _by_cell(read_price(arms / "laptop-parcae" / "price.json"))
    against = _by_cell(result)
    assert len(against) == len(result.effects.pairs) == 21 and set(against) == set(mine) == set(theirs)
    for cell, pair in against.items():
        assert pair.variant_loss == mine[cell].variant_loss and pair.base_loss == theirs[cell].variant_loss
        assert pair.change == pytest.approx(mine[cell].change - theirs[cell].change, abs=1e-12)
        # the token part is the base law at each arm's own N and D: the two differences' difference
        assert pair.token_part == pytest.approx(mine[cell].token_part - theirs[cell].token_part, abs=1e-9)
    # the arm's own price is left as it was; the new one is written beside it, with relative paths only
    assert (arms / "laptop-curriculum" / "price.json").read_bytes() == before
    out = against_folder(_settings(arms))
    assert out == arms / "laptop-curriculum" / "against-laptop-parcae"
    doc = json.loads((out / "price.json").read_text())
    assert doc["against"] == "../../laptop-parcae" and doc["base"] == "../../laptop-factorial"
    assert str(arms) not in (out / "price.json").read_text() + (out / "report.md").read_text()
    report = (out / "report.md").read_text()
    title = "# Price of curriculum against ../../laptop-parcae (the law: ../../laptop-factorial)"
    assert report.startswith(title)
    assert "**curriculum against laptop-parcae: " in report
    assert [look.pairs for look in result.looks] == list(result.plan.counts)


def test_a_shorter_plan_reads_the_first_pairs_both_arms_hold(arms):
    """A 0.5 h plan's cells are the first of the 1 h plan's: its looks replay over those, at its own
    boundary."""
    result = price_against(_settings(arms, max_hours=0.5), echo=lambda line: None)
    assert result.plan.counts[-1] == result.looks[-1].pairs == len(result.effects.pairs) < 21
    assert result.plan.boundary.critical[-1] > 2.0


def test_a_published_against_folder_is_rewritten_in_a_fresh_checkout_and_a_plain_price_json_keeps_its_keys(
    arms,
):
    """A fresh clone holds no .loopscale markers (gitignored): the published against folder is still known as
    loopscale's report folder, so rerunning its command rewrites it; and a price against its base writes no
    ``against`` key, so its price.json reads and writes back unchanged."""
    from loopscale.io import MARKER, folder_kind

    published = RESULTS / "laptop-parcae-zero" / "against-laptop-parcae"
    copy = arms / "published-against"
    shutil.copytree(published, copy, ignore=shutil.ignore_patterns(MARKER))
    assert folder_kind(copy) == "report"
    doc = json.loads((RESULTS / "laptop-parcae" / "price.json").read_text())
    assert read_price(RESULTS / "laptop-parcae" / "price.json").to_dict() == doc and "against" not in doc


def test_bad_against_arguments_end_in_one_line(arms, capsys):
    with pytest.raises(UserError, match="is --out itself"):
        price_against(_settings(arms, against=arms / "laptop-curriculum"))
    (arms / "empty").mkdir(exist_ok=True)
    with pytest.raises(UserError, match="holds no price.json"):
        price_against(_settings(arms, against=arms / "empty"))
    with pytest.raises(UserError, match="prices recipe curriculum, not parcae"):
        price_against(_settings(arms, recipe=resolve_recipe("parcae")))
    with pytest.raises(UserError, match="do not both hold the first look's 4 pairs of this plan"):
        price_against(_settings(arms, plan="separate"))
    base = ["price", "curriculum", "--reuse", str(arms / "laptop-factorial")]
    code = main([*base, "--against", str(arms / "laptop-parcae"), "--dry-run"])
    said = capsys.readouterr().err
    assert code == 2 and "--against reads two priced arms and trains nothing: drop --dry-run" in said
    assert main([*base, "--against", str(arms / "laptop-parcae")]) == 2
    assert "--against needs --out" in capsys.readouterr().err
