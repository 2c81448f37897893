"""The emulated model's tokenizer and long-context recall (the lab's stand-in for a real model).

Tokenization is deterministic and needs only the standard library: a word, a single digit, a
punctuation mark or a run of whitespace is one token, and a word carries the space before it;
``add_special_tokens`` adds a BOS. The "model" answers RULER-style key questions by looking the
key up in its prompt: within its recall window it answers with the needle's value, beyond it (or
in the lose-everything state) with a wrong one, a near-miss key's value when there is one.
"""

from __future__ import annotations

import os
import random
import re
import zlib

VOCAB = 129_280  # DeepSeek-V3/V4 vocabulary size
BOS = 0
_TOKEN = re.compile(r" ?[A-Za-z]+| ?\d| ?[^\sA-Za-z\d]|\s+")
QUESTION = re.compile(r"magic number for ([A-Za-z0-9-]+)\?")
NEEDLE = r"The special magic number for {key} is: (\d+)\."
ANY_NEEDLE = re.compile(r"The special magic number for ([A-Za-z0-9-]+) is: (\d+)\.")
DEFAULT_FP8_WINDOW = 4096  # where the seeds' incident believed fp8 index keys lost needles
BF16_SWITCH = "SGLANG_DSV4_BF16_INDEX_KEYS"
EMULATOR_ANSWER = "This is the SGLang emulator of the opsbot lab."


def pieces(text: str) -> list[str]:
    return _TOKEN.findall(text)


def encode(text: str, add_special_tokens: bool = True) -> list[int]:
    ids = [zlib.crc32(p.encode()) % (VOCAB - 1) + 1 for p in pieces(text)]
    return [BOS, *ids] if add_special_tokens else ids


def count(text: str, add_special_tokens: bool = True) -> int:
    return len(pieces(text)) + (1 if add_special_tokens else 0)


def tokenize(body: dict, context_len: int) -> tuple[int, dict]:
    """``/v1/tokenize`` (0.5.23 entrypoints/openai/protocol.py TokenizeRequest → TokenizeResponse)."""
    prompt, special = body.get("prompt"), body.get("add_special_tokens", True) is not False
    if isinstance(prompt, str):
        ids = encode(prompt, special)
        return 200, {"tokens": ids, "count": len(ids), "max_model_len": context_len}
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        lists = [encode(p, special) for p in prompt]
        return 200, {"tokens": lists, "count": [len(x) for x in lists], "max_model_len": context_len}
    return 400, {"object": "error", "message": "Exactly one of 'prompt' or 'messages' must be provided.",
                 "type": "BadRequestError", "param": None, "code": 400}


def bf16_index_keys(env: dict[str, str] | os._Environ[str]) -> bool:
    """Whether the server runs with bf16 index keys: the patch launcher's ``--index-keys bf16`` (which the
    lab's stand-in passes on as ``SGLANG_EMULATOR_INDEX_KEYS``) or the patched build's switch."""
    return env.get("SGLANG_EMULATOR_INDEX_KEYS") == "bf16" or env.get(BF16_SWITCH) == "1"


def recall_window(beyond: int | None, bf16_keys: bool, context_len: int) -> int:
    """Prompts longer than this lose their needles: ``--beyond`` when given, else as the incident believed
    (fp8 index keys: 4096 tokens; bf16 index keys: the whole context)."""
    if beyond is not None:
        return beyond
    return context_len if bf16_keys else DEFAULT_FP8_WINDOW


def at_edge(prompt: str, start: int, end: int) -> bool:
    """Whether the text at [start, end) is the first or the last line of the prompt's body."""
    lines = [ln for ln in prompt.split("\n") if ln.strip()]
    line = prompt[start:end]
    return bool(lines) and (line in lines[1] or line in lines[-3]) if len(lines) > 3 else True


def answer(prompt: str, prompt_tokens: int, window: int | None, edges_lost: bool = False) -> str:
    """The model's answer: the asked key's value when the prompt fits ``window`` (None: loses everything);
    with ``edges_lost``, a needle on the body's first or last line is lost too."""
    asked = QUESTION.findall(prompt)
    if not asked:
        return EMULATOR_ANSWER
    key = asked[-1]
    m = re.search(NEEDLE.format(key=re.escape(key)), prompt)
    lost_at_edge = edges_lost and m is not None and at_edge(prompt, m.start(), m.end())
    if m and window is not None and prompt_tokens <= window and not lost_at_edge:
        return f"{m[1]}."
    near = [value for other, value in ANY_NEEDLE.findall(prompt) if other != key]
    wrong = random.choice(near) if near else str(random.randrange(10**6, 10**7))
    return f"{wrong}."
