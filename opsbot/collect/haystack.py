"""The text of a recall prompt: haystack lines of a filler kind, a needle, near-miss distractors, a question.

RULER's multi-key needle-in-a-haystack (niah_multikey): every needle is a random key with a random
value, so no answer can be memorised, and the distractors are keys that differ from the needle's
by one character or one word, so a model that only roughly locates "a magic number" answers with
a wrong value. Pure: text from a seeded random generator; lengths are fitted in ``opsbot.collect.recall``.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

WORDS = (
    "amber anchor apple arrow aspen atlas autumn badge bamboo basin beacon birch bison blossom breeze brook "
    "cactus candle canyon cargo cedar chalk cherry cinder cliff clover cobalt comet copper coral cotton crane "
    "crystal dawn delta desert dune eagle ember falcon fern fjord flint forest fossil garnet glacier granite "
    "harbor hazel heron hollow indigo iris island ivory jasper juniper kestrel lagoon lantern lark laurel "
    "lemon linen lotus maple marble meadow mesa willow mirror moss nectar nickel oasis ocean olive onyx orchid "
    "otter pebble pepper pine plume prairie quartz quill raven reef ridge river robin saffron sage sand "
    "shadow silver slate sparrow spruce stone summit swan thistle thunder timber topaz tundra valley velvet "
    "violet walnut wheat willow winter wren yarrow zephyr"
).split()
VERBS = "carries follows holds keeps marks meets moves passes reaches shapes shows turns watches".split()
HEADER = (
    "Below is a long document. Some of its lines state the special magic number for a key. "
    "Read it all; a question about one key follows.\n\n"
)
QUESTION = "\n\nWhat is the special magic number for {key}? Answer with the number only.\nAnswer:"
NEEDLE = "The special magic number for {key} is: {value}."


@dataclass(frozen=True)
class Needle:
    key: str
    value: str

    @property
    def line(self) -> str:
        return NEEDLE.format(key=self.key, value=self.value)


def _value(rng: random.Random) -> str:
    return str(rng.randrange(10**6, 10**7))


def needle(rng: random.Random) -> Needle:
    key = f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{rng.randrange(1000, 10000)}"
    return Needle(key, _value(rng))


def near_misses(target: Needle, n: int, rng: random.Random) -> list[Needle]:
    """``n`` keys one edit away from the needle's (a digit, a letter or a word), each with its own value."""
    first, second, number = target.key.split("-")
    out: dict[str, Needle] = {}
    while len(out) < n:
        kind = rng.randrange(3)
        if kind == 0:
            i = rng.randrange(len(number))
            digits = [d for d in string.digits if d != number[i] and (i or d != "0")]
            key = f"{first}-{second}-{number[:i]}{rng.choice(digits)}{number[i + 1:]}"
        elif kind == 1:
            key = f"{rng.choice([w for w in WORDS if w != first])}-{second}-{number}"
        else:
            i = rng.randrange(len(second))
            letter = rng.choice([c for c in string.ascii_lowercase if c != second[i]])
            key = f"{first}-{second[:i]}{letter}{second[i + 1:]}-{number}"
        if key != target.key and key not in out:
            value = _value(rng)
            out[key] = Needle(key, value if value != target.value else str(int(value) + 1))
    return list(out.values())


def _prose(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randrange(7, 14))]
    words.insert(2, rng.choice(VERBS))
    return " ".join(words).capitalize() + "."


def _code(rng: random.Random) -> str:
    a, b = rng.choice(WORDS), rng.choice(WORDS)
    return rng.choice((
        f"def {a}_{b}(x, y):\n    return x * {rng.randrange(2, 99)} + y",
        f"{a}_total = {b}_count + {rng.randrange(1, 999)}",
        f"if {a}.ready and not {b}.closed:\n    {a}.send({b}, retries={rng.randrange(1, 9)})",
        f"for item in {a}_items:\n    {b}.append(item.{rng.choice(WORDS)})",
    ))


def _config(rng: random.Random) -> str:
    a, b = rng.choice(WORDS), rng.choice(WORDS)
    return rng.choice((
        f"{a}.{b}.size: {rng.randrange(1, 4096)}",
        f"{a}:\n  {b}: {rng.choice(('true', 'false'))}\n  retries: {rng.randrange(1, 9)}",
        f"[{a}]\n{b}_timeout_s = {rng.randrange(1, 600)}",
        f"{a}_{b}_path: /var/lib/{a}/{b}",
    ))


LINES = {"prose": _prose, "code": _code, "config": _config}


def filler(kind: str, n: int, rng: random.Random) -> list[str]:
    """``n`` haystack lines of a kind: ``prose``, ``code`` or ``config``."""
    make = LINES[kind]
    return [make(rng) for _ in range(n)]


def pad_words(n: int, rng: random.Random) -> str:
    """``n`` plain words, for fitting a prompt to its exact length (nearly one token each)."""
    return " ".join(rng.choice(WORDS) for _ in range(n))


def compose(lines: list[str], at: float, target: Needle, distractors: list[tuple[float, Needle]],
            pad: str = "", pad_at: float = 1 / 3) -> str:
    """The prompt: header, the lines with the needle at depth ``at`` (0 = first line, 1 = last) and each
    distractor at its own depth, ``pad`` words appended to the line at ``pad_at``, then the question."""
    body = list(lines)
    if pad and body:
        i = min(int(pad_at * len(body)), len(body) - 1)
        body[i] = f"{body[i]} {pad}"
    for depth, d in sorted(distractors, key=lambda x: x[0], reverse=True):
        body.insert(round(depth * len(body)), d.line)
    body.insert(round(at * len(body)), target.line)
    return HEADER + "\n".join(body) + QUESTION.format(key=target.key)
