"""Synthetic probes of method §10.4, generated offline and deterministically.

The paper publishes the formats but not every detail. Where it is silent these generators follow the
authors' public evaluation-bundle scripts (github.com/kschwethelm/looped-lm-scaling, ``dev/eval_bundles``),
making the same sequence of ``random.Random`` calls, so with the same seeds they produce the same items:

Induction head (1,000 items, 0-shot, seed 1337; reasoning primitives):
  8 lines ``key -> val``; keys are 4 lowercase letters, values 3 lowercase letters, each drawn with
  ``rng.choices`` (keys first, then values, then the queried line with ``rng.randrange(8)``). The item
  ends with a query line ``key ->``; the continuation delimiter " " makes it ``key -> val``. The spec
  asks for distinct keys: the draw does not enforce it, but with seed 1337 all 1,000 items have 8
  distinct keys (the tests check this), so the authors' items and the rule of method §10.4 coincide.

VarAssign (1,000 items per variant, 5-shot, seed 42; reasoning primitives):
  variables are single lowercase letters; values are integers in [1, 25].
  depth 0: 5 direct assignments (``rng.sample`` of 5 letters, ``rng.randint`` per value), query one of them.
  depth 1: 10 distinct letters; the first 5 get direct values, the last 5 are aliases mapped 1-to-1 onto a
  shuffled copy of the first 5; direct assignments are listed first, then aliases; the query is an alias.
  math: "The following is a set of simple mathematical equations." / blank line / ``n=22`` lines /
  "What is the numerical value of n?" / "Answer:".
  code: "The following is a very short Python program. Use the program to resolve the value of the
  variable in the question." / "Program:" / ``n = 22`` lines / blank line / "Question:" /
  "What is the value of n?" / "Answer:".
  One RNG seeded 42 generates the four variants in the order d0-math, d0-code, d1-math, d1-code
  (1,000 items each), as the authors' script does; the math and code variants are therefore different
  programs.

Dyck languages (BIG-bench format, generated here when no data file is given; compositional symbolic):
  the paper uses BIG-bench's items from the CORE bundle; this generator is loopscale's own stand-in
  (seed 1337): a random prefix of 6–24 steps over ``() [] {} <>`` (at each step close the innermost open
  bracket with probability 1/2 if one is open, else open one of the four types; if every bracket ended
  closed, one more is opened), rendered with BIG-bench's instruction; the continuation is the closing
  sequence, space separated.
"""

from __future__ import annotations

import random
import string

from loopscale.eval.tasks import Example

INDUCTION_SEED = 1337
INDUCTION_PAIRS = 8
INDUCTION_KEY_LETTERS = 4
INDUCTION_VALUE_LETTERS = 3

VARASSIGN_SEED = 42
VARASSIGN_VARIABLES = 5
VARASSIGN_VALUES = (1, 25)  # inclusive
VARASSIGN_FORMATS = ("math", "code")
VARASSIGN_DEPTHS = (0, 1)
_MATH_HEADER = "The following is a set of simple mathematical equations."
_CODE_HEADER = (
    "The following is a very short Python program. Use the program to resolve the value of the variable "
    "in the question."
)

DYCK_SEED = 1337
DYCK_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"), ("<", ">"))
DYCK_PREFIX_TOKENS = (6, 24)  # inclusive
DYCK_INSTRUCTION = "Complete the rest of the sequence, making sure that the parentheses are closed properly."

DEFAULT_ITEMS = 1000


def induction_head_examples(n: int = DEFAULT_ITEMS, seed: int = INDUCTION_SEED) -> list[Example]:
    """In-context key → value lookup: 8 ``key -> val`` lines, then ``key ->`` for one of the keys."""
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        keys = ["".join(rng.choices(string.ascii_lowercase, k=INDUCTION_KEY_LETTERS))
                for _ in range(INDUCTION_PAIRS)]
        values = ["".join(rng.choices(string.ascii_lowercase, k=INDUCTION_VALUE_LETTERS))
                  for _ in range(INDUCTION_PAIRS)]
        query = rng.randrange(INDUCTION_PAIRS)
        lines = [f"{key} -> {value}" for key, value in zip(keys, values)]
        examples.append(Example(context="\n".join(lines) + f"\n{keys[query]} ->", continuation=values[query]))
    return examples


def varassign_examples(
    depth: int, fmt: str, n: int = DEFAULT_ITEMS, seed: int = VARASSIGN_SEED
) -> list[Example]:
    """VarAssign items of one variant (depth 0 or 1, format "math" or "code"); see the module docstring."""
    if depth not in VARASSIGN_DEPTHS or fmt not in VARASSIGN_FORMATS:
        raise ValueError(f"VarAssign variant must be depth in {VARASSIGN_DEPTHS} and format in "
                         f"{VARASSIGN_FORMATS}, got depth={depth}, fmt={fmt!r}")
    rng = random.Random(seed)
    # The variants share one RNG stream in this order; draw (and discard) the ones before ours.
    for variant in [(d, f) for d in VARASSIGN_DEPTHS for f in VARASSIGN_FORMATS]:
        programs = [_varassign_program(rng, variant[0]) for _ in range(n)]
        if variant == (depth, fmt):
            return [_render_varassign(*program, fmt) for program in programs]
    raise AssertionError("unreachable: every valid variant is in the loop")


def _varassign_program(rng: random.Random, depth: int) -> tuple[list[tuple[str, str]], str, str]:
    """(assignments as (name, value-or-name), queried name, integer answer as text)."""
    lo, hi = VARASSIGN_VALUES
    k = VARASSIGN_VARIABLES
    names = rng.sample(string.ascii_lowercase, k * (depth + 1))
    direct = names[:k]
    values = {name: str(rng.randint(lo, hi)) for name in direct}
    assignments = [(name, values[name]) for name in direct]
    if depth == 0:
        query = rng.choice(direct)
        return assignments, query, values[query]
    aliases = names[k:]
    targets = direct[:]
    rng.shuffle(targets)
    alias_of = dict(zip(aliases, targets))
    query = rng.choice(aliases)
    assignments += [(alias, alias_of[alias]) for alias in aliases]
    return assignments, query, values[alias_of[query]]


def _render_varassign(assignments: list[tuple[str, str]], query: str, answer: str, fmt: str) -> Example:
    if fmt == "math":
        body = "\n".join(f"{name}={value}" for name, value in assignments)
        context = f"{_MATH_HEADER}\n\n{body}\nWhat is the numerical value of {query}?\nAnswer:"
    else:
        body = "\n".join(f"{name} = {value}" for name, value in assignments)
        context = f"{_CODE_HEADER}\nProgram:\n{body}\n\nQuestion:\nWhat is the value of {query}?\nAnswer:"
    return Example(context=context, continuation=answer)


def dyck_examples(n: int = DEFAULT_ITEMS, seed: int = DYCK_SEED) -> list[Example]:
    """Dyck-language completion in BIG-bench's format: an unbalanced prefix → its closing sequence."""
    rng = random.Random(seed)
    closer = dict(DYCK_PAIRS)
    examples = []
    for _ in range(n):
        length = rng.randint(*DYCK_PREFIX_TOKENS)
        prefix: list[str] = []
        stack: list[str] = []
        for _ in range(length):
            if stack and rng.random() < 0.5:
                prefix.append(closer[stack.pop()])
            else:
                opener = rng.choice(DYCK_PAIRS)[0]
                prefix.append(opener)
                stack.append(opener)
        if not stack:
            opener = rng.choice(DYCK_PAIRS)[0]
            prefix.append(opener)
            stack.append(opener)
        completion = [closer[b] for b in reversed(stack)]
        examples.append(Example(context=f"{DYCK_INSTRUCTION} Input: {' '.join(prefix)}",
                                continuation=" ".join(completion)))
    return examples
