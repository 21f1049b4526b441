"""``rtamt models``: list the models, their outputs and parameters.

The list is read from the model modules' source with Python's :mod:`ast` (class
docstring, ``outputs``, the ``__init__`` parameters, ``CONFIGS``), without importing
them: importing a model loads numba, scipy and every kernel module (1-2 s), which a
listing does not need.  Where the source does not give a literal answer (a parameter
default that is an expression, an inherited ``__init__``, an install without source
files), the models are imported and inspected instead; both give the same text
(tests/apps/test_cli.py checks that).
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path


def add_arguments(p):
    pass


class _NotLiteral(Exception):
    """The source does not answer literally: fall back to importing."""


def _literal(node, consts=None):
    """The value of a literal ``node``, or of a name bound to one in ``consts``."""
    if isinstance(node, ast.Name) and consts and node.id in consts:
        return consts[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError) as e:
        raise _NotLiteral from e


def _constants(tree: ast.Module) -> dict:
    """Module-level ``NAME = literal`` bindings (e.g. a parameter's default)."""
    out = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(
                n.targets[0], ast.Name):
            try:
                out[n.targets[0].id] = ast.literal_eval(n.value)
            except ValueError:
                pass
    return out


def _class_entry(tree: ast.Module, cls_name: str) -> list[str]:
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 and any(a.name == "annotations" for a in n.names) for n in tree.body)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name),
               None)
    if cls is None:
        raise _NotLiteral(cls_name)
    attrs = {t.id: n.value for n in cls.body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name)}
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef)
                 and n.name == "__init__"), None)
    if init is None or "outputs" not in attrs or init.args.vararg or init.args.kwarg:
        raise _NotLiteral(cls_name)
    consts = _constants(tree)
    a = init.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    params, config_default = [], None
    for arg, dflt in list(zip(pos, defaults))[1:] + list(zip(a.kwonlyargs, a.kw_defaults)):
        text = arg.arg
        if arg.annotation is not None:
            ann = ast.unparse(arg.annotation)
            text += f": {ann!r}" if future else f": {ann}"
        if dflt is not None:
            value = _literal(dflt, consts)
            text += f" = {value!r}" if arg.annotation is not None else f"={value!r}"
            if arg.arg == "config":
                config_default = value
        params.append(text)
    lines = [f"  outputs: {', '.join(_literal(attrs['outputs']))}",
             f"  parameters: {', '.join(params)}"]
    configs = next((n.value for n in tree.body if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "CONFIGS" for t in n.targets)),
                   None)
    if configs is not None:
        if not isinstance(configs, ast.Dict):
            raise _NotLiteral("CONFIGS")
        keys = [_literal(k) for k in configs.keys]
        if keys:
            lines.append(f"  configs: {', '.join(keys)} (default {config_default})")
    doc = (ast.get_docstring(cls, clean=False) or "").strip().splitlines()[0]
    return [f"{{name}}: {doc}"] + lines


def describe_from_source() -> list[str]:
    """The listing, read from the sources of :mod:`rtamt.models` (nothing imported but
    the package's location).  Raises ``_NotLiteral`` / ``OSError`` where it cannot."""
    spec = importlib.util.find_spec("rtamt")
    if spec is None or not spec.submodule_search_locations:
        raise _NotLiteral("rtamt")
    folder = Path(list(spec.submodule_search_locations)[0]) / "models"
    init = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
    where = {a.asname or a.name: n.module for n in init.body
             if isinstance(n, ast.ImportFrom) and n.level == 1 for a in n.names}
    table = next((n.value for n in init.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "MODELS" for t in n.targets)),
                 None)
    if not isinstance(table, ast.Dict):
        raise _NotLiteral("MODELS")
    out, trees = [], {}
    for key, value in sorted(zip((_literal(k) for k in table.keys), table.values)):
        if not isinstance(value, ast.Name) or value.id not in where:
            raise _NotLiteral(key)
        mod = where[value.id]
        if mod not in trees:
            trees[mod] = ast.parse((folder / f"{mod}.py").read_text(encoding="utf-8"))
        out += [ln.replace("{name}", key, 1) if i == 0 else ln
                for i, ln in enumerate(_class_entry(trees[mod], value.id))]
    return out


def describe_imported() -> list[str]:
    """The listing, from the imported model classes (:mod:`inspect`)."""
    from rtamt.models import MODELS

    out = []
    for name, cls in sorted(MODELS.items()):
        out.append(f"{name}: {(cls.__doc__ or '').strip().splitlines()[0]}")
        out.append(f"  outputs: {', '.join(cls.outputs)}")
        sig = inspect.signature(cls.__init__)
        params = [str(p) for p in list(sig.parameters.values())[1:]]
        out.append(f"  parameters: {', '.join(params)}")
        configs = getattr(__import__(cls.__module__, fromlist=["CONFIGS"]), "CONFIGS", None)
        if configs:
            out.append(f"  configs: {', '.join(configs)} "
                       f"(default {sig.parameters['config'].default})")
    return out


def run(args) -> int:
    try:
        lines = describe_from_source()
    except (_NotLiteral, OSError, SyntaxError, StopIteration, IndexError):
        lines = describe_imported()
    print("\n".join(lines))
    return 0
