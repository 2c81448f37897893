"""Plot of the precision study: recall@k of the fp32 top-k against context length, per key precision."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

VARIANTS = ("bf16", "bf16-logits", "q16k8", "q8k8", "fp4")


def plot(json_path: str, png_path: str) -> None:
    rows = json.load(open(json_path))["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, cm in zip(axes, (0.0, 3.0)):
        for k, style in ((2048, "-"), (512, ":")):
            for v in VARIANTS:
                by_l = defaultdict(list)
                for r in rows:
                    if r["cm"] == cm:
                        by_l[r["L"]].append(100 * r[f"recall@{k}/{v}"])
                ls = sorted(by_l)
                ax.plot(ls, [statistics.mean(by_l[x]) for x in ls], style, marker="o", ms=3, label=f"{v} k={k}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length L (tokens)")
        ax.set_title(f"shared key component cm={cm:g}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("recall of the fp32 top-k (%)")
    axes[1].legend(fontsize=7, ncol=2)
    fig.suptitle("DSA indexer key precision vs recall (H200, synthetic scores, 3 seeds x 32 queries)")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
