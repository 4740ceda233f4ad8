"""No module outside the family registry (engine/inference/families/) keeps its own list of
model families: a second list is how a new family ends up half-supported.

Checked on the source, with the names the registry itself holds (every HF model_type, GGUF
architecture and tool-call format), so a family added there is covered here unchanged.
Flagged, outside the registry, in engine/ and desktop/:
- a tuple, list, set or dict literal holding two or more of those names;
- a comparison of something named for a model type or architecture (`model_type`, `arch`,
  `architecture`, a config's "model_type") against one of those names, or a prefix test
  (`.startswith("mistral")`) against one;
- a module-level assignment to a name the old lists had (SUPPORTED_MODEL_TYPES,
  ARCHITECTURES, PERMUTED_ARCHS, FAMILIES).
Each finding names the file, the line and what was found.
"""

from __future__ import annotations

import ast
from pathlib import Path

from wren.engine.inference import families

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("engine", "desktop")
REGISTRY = "engine/inference/families"
LIST_NAMES = frozenset({"SUPPORTED_MODEL_TYPES", "ARCHITECTURES", "PERMUTED_ARCHS", "FAMILIES"})
_TYPE_WORDS = ("model_type", "arch")


def family_names() -> frozenset[str]:
    names = set(families.TOOL_FORMATS)
    for family in families.FAMILIES:
        names.update(family.model_types, family.gguf_architectures)
    return frozenset(names)


def _strings(node: ast.AST, names: frozenset[str]) -> list[str]:
    """The family names among a literal's string elements (dict: its keys)."""
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]


def _named_for_type(node: ast.AST) -> bool:
    """Whether an expression is named for a model type or architecture."""
    if isinstance(node, ast.Name):
        text = node.id
    elif isinstance(node, ast.Attribute):
        text = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        text = str(node.slice.value)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "lower"):
        return _named_for_type(node.func.value) or any(
            isinstance(a, ast.Constant) and _named_for_type(ast.Name(str(a.value))) for a in node.args)
    else:
        return False
    return any(word in text.lower() for word in _TYPE_WORDS)


def _mentions(node: ast.AST, names: frozenset[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in names
    return bool(_strings(node, names)) if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else False


def violations(source: str, where: str, names: frozenset[str]) -> list[str]:
    """Every model-family list or family test in `source` (a module's text)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            hits = _strings(node, names)
            if len(hits) >= 2:
                found.append(f"{line}: a list of model families {sorted(set(hits))}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_named_for_type(s) for s in sides) and any(_mentions(s, names) for s in sides):
                found.append(f"{line}: a model type tested by name ({ast.unparse(node)})")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and any(_mentions(a, names) for a in node.args)):
            found.append(f"{line}: a model type tested by prefix ({ast.unparse(node)})")
    for stmt in ast.parse(source).body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in LIST_NAMES:
                found.append(f"{where}:{stmt.lineno}: {target.id} belongs in the family registry")
    return found


def _modules():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(REGISTRY + "/") and "__pycache__" not in rel:
                yield rel, path.read_text(encoding="utf-8")


def test_no_module_outside_the_registry_lists_model_families():
    names = family_names()
    scanned = 0
    found = []
    for rel, source in _modules():
        scanned += 1
        found += violations(source, rel, names)
    assert scanned > 100, f"only {scanned} modules scanned: the walk lost the tree"
    assert not found, "model families listed outside engine/inference/families:\n" + "\n".join(found)


# -- the checker itself, fed what the old lists looked like ----------------------------------

OLD_LISTS = {
    'SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")': "a list of model families",
    'KNOWN = frozenset({"llama", "qwen2"})': "a list of model families",
    'ARCHS = {"llama": ("llama", "LlamaForCausalLM"), "qwen3": ("qwen3", "Qwen3ForCausalLM")}':
        "a list of model families",
    'FORMATS = ("hermes", "llama3", "mistral")': "a list of model families",
    'ok = model_type == "qwen2"': "tested by name",
    'ok = config.get("model_type") != "qwen3"': "tested by name",
    'ok = arch in ("qwen2",)': "tested by name",
    'ok = self.arch == "qwen3"': "tested by name",
    'ok = mt.startswith("mistral")': "tested by prefix",
    "PERMUTED_ARCHS = frozenset()": "belongs in the family registry",
    "FAMILIES: tuple = ()": "belongs in the family registry",
}


def test_the_checker_finds_each_kind_of_list():
    names = family_names()
    for source, kind in OLD_LISTS.items():
        found = violations(source, "m.py", names)
        assert found and any(kind in f for f in found), (source, found)


def test_the_checker_leaves_other_strings_alone():
    names = family_names()
    clean = [
        'TOKENIZERS = ("gpt2", "llama")',  # one family name among other things is no list
        'ok = kind == "llama"',  # a tokenizer model, not named for a model type
        'ok = self.family == "mistral"',  # a tool-call format's own code
        "family = families.by_model_type(config.get('model_type'))",
        'ROPE = ("default", "linear", "llama3")',
    ]
    for source in clean:
        assert violations(source, "m.py", names) == [], source


def test_the_checker_finds_the_lists_this_registry_replaced():
    """The modules as they were before the registry (their lists restored) are refused."""
    names = family_names()
    before = {
        "engine/modelhub/gguf_import.py": 'PERMUTED_ARCHS = frozenset({"llama", "mistral"})\n'
                                          'if model_type == "qwen2":\n    pass\n',
        "engine/tools/parse.py": 'FAMILIES = ("hermes", "llama3", "mistral")\n'
                                 'if mt.startswith("mistral") or mt.startswith("mixtral"):\n    pass\n',
    }
    for rel, restored in before.items():
        current = (ROOT / rel).read_text(encoding="utf-8")
        assert violations(current, rel, names) == []
        assert len(violations(current + "\n" + restored, rel, names)) >= 3, rel
