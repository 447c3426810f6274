"""Print every make target with the first sentence of the comment above it (`make help`).

The list is generated from Makefile and mk/*.mk, so a new target shows up without editing a help
text. Targets with no comment above them are listed too, marked "(no description)".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RULE = re.compile(r"^([A-Za-z][A-Za-z0-9_.% -]*?)\s*:(?![=:])")


def first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + ("." if dot else "")


def targets(paths: list[Path]) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for path in paths:
        comment: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                comment.append(line.lstrip("# ").rstrip())
                continue
            match = RULE.match(line)
            if match and not line.startswith((".", "\t")):
                for name in match.group(1).split():
                    if "%" in name or name.startswith("$"):
                        continue
                    found.setdefault(name, first_sentence(" ".join(comment)))
            comment = []
    return sorted(found.items())


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    paths = [root / "Makefile", *sorted((root / "mk").glob("*.mk"))]
    rows = [(name, text) for name, text in targets(paths) if not name.startswith("_")]
    width = max(len(name) for name, _ in rows)
    for name, text in rows:
        print(f"make {name:<{width}}  {text or '(no description)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
