"""Draw docs/layout.png, the layers of docs/layout.md, from the table the layering test checks.

    python docs/layout_figure.py          # needs matplotlib (the extras)

Each layer is a band, bottom first; an arrow means "may import". The layers and their one-line jobs are read from
``tests/test_layering.py`` (``LAYERS``), so the picture and the test cannot disagree.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def layers() -> list[tuple[str, str]]:
    """``LAYERS`` of tests/test_layering.py, read without importing the test (the packages, not the re-exports)."""
    tree = ast.parse((REPO / "tests" / "test_layering.py").read_text())
    table = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "LAYERS" for t in node.targets))
    rows = [tuple(ast.literal_eval(item)) for item in table.elts]
    return [(name, job) for name, job in rows if not name.startswith(("rlpar.agent", "rlpar.train", "rlpar.evaluate",
                                                                        "rlpar.plot", "examples"))]


def main(out: Path = REPO / "docs" / "layout.png") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = layers()
    height = 0.8
    fig, ax = plt.subplots(figsize=(9, 0.9 * len(rows) + 0.6))
    for i, (name, job) in enumerate(rows):
        ax.add_patch(plt.Rectangle((0, i), 10, height, facecolor=plt.cm.Blues(0.2 + 0.12 * i), edgecolor="black"))
        ax.text(0.2, i + height / 2, name, va="center", ha="left", fontsize=12, fontweight="bold", family="monospace")
        ax.text(2.6, i + height / 2, job, va="center", ha="left", fontsize=9)
        if i:
            ax.annotate("", xy=(9.5, i - 1 + height), xytext=(9.5, i), arrowprops={"arrowstyle": "->", "lw": 1.5})
    ax.text(10.05, len(rows) / 2 - 0.2, "imports", rotation=90, va="center", fontsize=9)
    ax.set_xlim(0, 10.4)
    ax.set_ylim(-0.2, len(rows))
    ax.axis("off")
    ax.set_title("rlpar's layers: each imports only the ones below it (tests/test_layering.py)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(f"wrote {main()}")
