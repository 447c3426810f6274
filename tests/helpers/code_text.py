"""A source file's code without its prose, for the checks that search code for a fact written twice
(tests/repository/test_one_owner.py, tests/roles/test_sglang_window.py): comments, docstrings and a
module's DOCUMENTATION/EXAMPLES/RETURN are prose. Imported by its collection path,
`ansible_collections.kdtree.fleet.tests.helpers.code_text`."""

from __future__ import annotations

import ast
import io
import tokenize

DOC_NAMES = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


def python_code(text: str) -> str:
    """The Python source without comments, docstrings and documentation assignments."""
    tree = ast.parse(text)
    drop: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                drop.update(range(body[0].lineno, body[0].end_lineno + 1))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in DOC_NAMES for t in node.targets
        ):
            drop.update(range(node.lineno, node.end_lineno + 1))
    lines = text.splitlines()
    kept = "\n".join("" if i + 1 in drop else line for i, line in enumerate(lines))
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(kept).readline):
        if tok.type != tokenize.COMMENT:
            out.append(tok)
    return tokenize.untokenize(out)


def other_code(text: str) -> str:
    """A shell, YAML or make file without its comment lines."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
