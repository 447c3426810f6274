"""Print every make target with one short line about it (`make help`), grouped by the file that defines it.

The list is generated from Makefile and mk/*.mk, so a new target shows up without editing a help text.
A target's line is the first sentence of the comment above its rule; a sentence longer than WIDTH is cut
at its last clause boundary (": ", "; ", ", ", " (") that fits, so every line stays one short line: write
the first sentence short and the details after it. Each file is a group, headed by its first comment
line up to the first ":" (the Makefile's group is "Top level"). Targets with no comment above them are
listed too, marked "(no description)".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RULE = re.compile(r"^([A-Za-z][A-Za-z0-9_.% -]*?)\s*:(?![=:])")
WIDTH = 72  # the description's width; with "  make <target>  " before it a line stays under 110
BOUNDARIES = (": ", "; ", ", ", " (")


def first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + ("." if dot else "")


def short(text: str, width: int = WIDTH) -> str:
    """`text` if it fits in `width`, else cut at the last clause boundary that fits (or at a word)."""
    if len(text) <= width:
        return text
    room = text[: width - 1]
    cut = max(room.rfind(mark) for mark in BOUNDARIES)
    if cut <= width // 3:
        cut = room.rfind(" ")
    return text[:cut].rstrip(" ,;:(") + "…"


def heading(path: Path) -> str:
    if path.name == "Makefile":
        return "Top level (Makefile)"
    first = path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
    title = re.split(r":| \(", first, maxsplit=1)[0].rstrip(".")
    return f"{title} ({path.parent.name}/{path.name})"


def targets(path: Path) -> list[tuple[str, str]]:
    """(target, first sentence of its comment) in the order `path` defines them."""
    found: dict[str, str] = {}
    comment: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            comment.append(line.lstrip("# ").rstrip())
            continue
        match = RULE.match(line)
        if match and not line.startswith((".", "\t")):
            for name in match.group(1).split():
                if "%" in name or name.startswith(("$", "_")):
                    continue
                found.setdefault(name, first_sentence(" ".join(comment)))
        comment = []
    return list(found.items())


def groups(root: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """(heading, [(target, its line)]) per file: the Makefile, then mk/*.mk by name."""
    out = []
    seen: set[str] = set()
    for path in [root / "Makefile", *sorted((root / "mk").glob("*.mk"))]:
        rows = [(name, short(text) if text else "(no description)") for name, text in targets(path)]
        rows = [(name, text) for name, text in rows if name not in seen]
        seen.update(name for name, _ in rows)
        if rows:
            out.append((heading(path), rows))
    return out


def main() -> int:
    found = groups(Path(__file__).resolve().parents[1])
    width = max(len(name) for _, rows in found for name, _ in rows)
    for number, (title, rows) in enumerate(found):
        print(("\n" if number else "") + title)
        for name, text in rows:
            print(f"  make {name:<{width}}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
