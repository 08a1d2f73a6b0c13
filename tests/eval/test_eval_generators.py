"""The synthetic generators reproduce method §10.4's formats exactly (must-show 2)."""

from __future__ import annotations

import re

import pytest

from loopscale.eval.axes import PAPER_TASKS
from loopscale.eval.generators import dyck_examples, induction_head_examples, varassign_examples

INDUCTION_LINE = re.compile(r"^([a-z]{4}) -> ([a-z]{3})$")


def test_induction_head_format():
    examples = induction_head_examples()
    assert len(examples) == 1000
    for ex in examples:
        lines = ex.context.split("\n")
        assert len(lines) == 9  # 8 key -> val lines and the query line
        pairs = [INDUCTION_LINE.match(line).groups() for line in lines[:8]]
        keys = [k for k, _ in pairs]
        assert len(set(keys)) == 8  # distinct keys (spec)
        query = re.fullmatch(r"([a-z]{4}) ->", lines[8]).group(1)
        assert query in keys
        assert ex.continuation == dict(pairs)[query]
        assert re.fullmatch(r"[a-z]{3}", ex.continuation)
    # the queried position is spread over all eight lines
    positions = {[k for k, _ in (INDUCTION_LINE.match(x).groups() for x in ex.context.split("\n")[:8])]
                 .index(ex.context.split("\n")[8][:4]) for ex in examples}
    assert positions == set(range(8))


def test_induction_head_first_item_is_pinned():
    # Seed 1337 and the authors' draw order (keys, values, query): a regression guard for the stream.
    first = induction_head_examples(n=1)[0]
    assert first.context == ("qnjp -> lgf\nevju -> bnq\nxhzf -> pbk\nrxcv -> qqr\nkbsj -> qfh\nkuur -> lxu\n"
                             "vply -> iup\nuirx -> luo\nkbsj ->")
    assert first.continuation == "qfh"


def _program(ex, fmt):
    sep = "=" if fmt == "math" else " = "
    pattern = re.compile(rf"^([a-z]){re.escape(sep)}(\d+|[a-z])$")
    lines = ex.context.split("\n")
    body = [pattern.match(line).groups() for line in lines if pattern.match(line)]
    return lines, body


@pytest.mark.parametrize("depth", [0, 1])
@pytest.mark.parametrize("fmt", ["math", "code"])
def test_varassign_format(depth, fmt):
    examples = varassign_examples(depth, fmt)
    assert len(examples) == 1000
    n_assign = 5 * (depth + 1)
    for ex in examples:
        lines, body = _program(ex, fmt)
        assert len(body) == n_assign
        # exact scaffolding: header lines + program + question lines
        expected_lines = (2 + n_assign + 2) if fmt == "math" else (2 + n_assign + 4)
        assert len(lines) == expected_lines
        assert lines[-1] == "Answer:"
        direct = {name: int(value) for name, value in body[:5]}
        assert all(value.isdigit() for _, value in body[:5])
        assert all(1 <= v <= 25 for v in direct.values())
        assert len({name for name, _ in body}) == n_assign  # distinct variable names
        query = re.search(r"value of ([a-z])\?", lines[-2]).group(1)
        if depth == 0:
            assert query in direct
            assert ex.continuation == str(direct[query])
        else:
            aliases = dict(body[5:])
            assert all(target in direct for target in aliases.values())
            assert sorted(aliases.values()) == sorted(direct)  # 1-to-1 onto the direct variables
            assert query in aliases
            assert ex.continuation == str(direct[aliases[query]])
        if fmt == "math":
            assert lines[0] == "The following is a set of simple mathematical equations." and lines[1] == ""
            assert lines[-2] == f"What is the numerical value of {query}?"
        else:
            assert lines[0].startswith("The following is a very short Python program.")
            assert lines[1] == "Program:" and lines[-4] == "" and lines[-3] == "Question:"
            assert lines[-2] == f"What is the value of {query}?"
    # answers cover the value range
    assert {int(ex.continuation) for ex in examples} == set(range(1, 26))


def test_varassign_code_programs_run_in_python():
    for ex in varassign_examples(1, "code", n=50):
        lines, _ = _program(ex, "code")
        program = "\n".join(lines[2:-4])
        scope: dict = {}
        exec(program, {}, scope)  # noqa: S102 - generated arithmetic-free assignments
        query = re.search(r"value of ([a-z])\?", ex.context).group(1)
        assert str(scope[query]) == ex.continuation


def test_varassign_variants_share_one_stream_and_are_seeded():
    d0_math = varassign_examples(0, "math")
    assert d0_math == varassign_examples(0, "math")  # same seed → same items
    assert varassign_examples(0, "math", seed=7) != d0_math
    # math and code variants are different programs (one RNG stream, drawn in sequence)
    assert [_program(e, "math")[1] for e in d0_math[:20]] != [_program(e, "code")[1]
                                                             for e in varassign_examples(0, "code")[:20]]
    with pytest.raises(ValueError):
        varassign_examples(2, "math")


def _balanced(tokens):
    pairs = {")": "(", "]": "[", "}": "{", ">": "<"}
    stack = []
    for t in tokens:
        if t in pairs:
            if not stack or stack.pop() != pairs[t]:
                return False
        else:
            stack.append(t)
    return not stack


def test_dyck_format():
    examples = dyck_examples()
    assert len(examples) == 1000
    prefix_text = ("Complete the rest of the sequence, making sure that the parentheses are closed properly. "
                   "Input: ")
    for ex in examples:
        assert ex.context.startswith(prefix_text)
        prefix = ex.context[len(prefix_text):].split(" ")
        closing = ex.continuation.split(" ")
        assert set(prefix) <= set("()[]{}<>") and set(closing) <= set(")]}>")
        assert 6 <= len(prefix) <= 25 and closing
        assert _balanced(prefix + closing)
        assert not _balanced(prefix)


def test_same_seed_same_examples_different_seed_different():
    assert induction_head_examples(n=50) == induction_head_examples(n=50)
    assert induction_head_examples(n=50, seed=1) != induction_head_examples(n=50)
    assert dyck_examples(n=50) == dyck_examples(n=50)
    assert dyck_examples(n=50, seed=1) != dyck_examples(n=50)


def test_registry_shots_and_counts_match_table_8():
    shots = {name: t.shots for name, t in PAPER_TASKS.items()}
    assert shots["induction_head"] == 0 and shots["varassign_d1_code"] == 5 and shots["coqa"] == 1
    assert shots["bigbench_dyck_languages"] == 10 and PAPER_TASKS["arc_easy"].type == "mc"
    for name in ("induction_head", "varassign_d0_math", "varassign_d0_code", "varassign_d1_math",
                 "varassign_d1_code", "bigbench_dyck_languages"):
        assert len(PAPER_TASKS[name].generate()) == PAPER_TASKS[name].scored == 1000
