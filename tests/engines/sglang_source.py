"""Read SGLang's source with `ast`, without importing it: flags, routes, classes, strings.

`root` is the folder that holds the `sglang` package (a `pip install --target` folder).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

SRT = Path("sglang", "srt")


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text("utf-8"), filename=str(path))


def module_path(root: Path, module: str) -> Path:
    """The file of a dotted module name under `root`."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def class_methods(root: Path, module: str) -> dict[str, set[str]]:
    """Every top-level class of `module` and the methods it defines itself."""
    path = module_path(root, module)
    if not path.is_file():
        return {}
    classes = {}
    for node in _parse(path).body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {
                item.name
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return classes


def _argument_files(root: Path) -> Iterator[Path]:
    yield root / SRT / "server_args.py"
    groups = root / SRT / "arg_groups"
    if groups.is_dir():
        yield from sorted(groups.rglob("*.py"))


def argparse_flags(root: Path) -> set[str]:
    """Every flag SGLang's argument definitions declare, found the two ways SGLang declares them.

    Up to 0.5.1x: `parser.add_argument("--flag", "--alias", ...)` in `srt/server_args.py`.
    Later: annotated fields `name: A[T, "help"]` or `A[T, Arg(aliases=[...], cli_name=...)]`
    (in `ServerArgs` itself from 0.5.17, in `srt/arg_groups/fields/*.py` from 0.5.20), turned into flags by `add_cli_args_from_dataclass`
    (`--` + the field name with dashes), unless `Arg(no_cli=True)`; plus the few
    `add_argument` calls left in `ServerArgs.add_cli_args`.
    """
    flags: set[str] = set()
    for path in _argument_files(root):
        if not path.is_file():
            continue
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Call) and _called(node) == "add_argument":
                flags |= {a.value for a in node.args if _is_flag(a)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                flags |= _field_flags(node.target.id, node.annotation)
    return flags


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_flag(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value[:2] == "--"


def _field_flags(name: str, annotation: ast.expr) -> set[str]:
    # `A[T, meta]` / `Annotated[T, meta]`: meta is a help string or an Arg(...) call.
    if not (isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple)):
        return set()
    if getattr(annotation.value, "id", "") not in ("A", "Annotated"):
        return set()
    # As SGLang's `_unwrap_annotated`: the first metadata item that is a string or an Arg.
    meta = next((m for m in annotation.slice.elts[1:] if _is_help(m) or _is_arg(m)), None)
    if meta is None:
        return set()
    if _is_help(meta):
        return {"--" + name.replace("_", "-")}
    assert isinstance(meta, ast.Call)
    keywords = {k.arg: k.value for k in meta.keywords}
    no_cli = keywords.get("no_cli")
    if isinstance(no_cli, ast.Constant) and no_cli.value is True:
        return set()
    cli_name = keywords.get("cli_name")
    main = cli_name.value if isinstance(cli_name, ast.Constant) else "--" + name.replace("_", "-")
    aliases = keywords.get("aliases")
    extra = (
        {a.value for a in aliases.elts if _is_flag(a)} if isinstance(aliases, ast.List) else set()
    )
    return {main, *extra}


def _is_help(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_arg(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and _called(node) == "Arg"


def http_routes(root: Path) -> set[str]:
    """Paths of the routes `srt/entrypoints/http_server.py` declares (`@app.get("/x")` ...),
    and `/x?name` for each query parameter a route takes (`name: float = Query(...)`)."""
    path = root / SRT / "entrypoints" / "http_server.py"
    routes = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and decorator.args:
                    first = decorator.args[0]
                    if isinstance(first, ast.Constant) and str(first.value).startswith("/"):
                        routes.add(str(first.value))
                        routes |= {f"{first.value}?{name}" for name in _query_parameters(node)}
    return routes


def _query_parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    positional = arguments.args[len(arguments.args) - len(arguments.defaults) :]
    pairs = [
        *zip(positional, arguments.defaults, strict=True),
        *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True),
    ]
    return [
        argument.arg
        for argument, default in pairs
        if isinstance(default, ast.Call) and _called(default) == "Query"
    ]


def annotated_fields(root: Path, *folders: str) -> set[str]:
    """Every field a class under `srt/<folder>` declares with an annotation (`name: T`): the
    dataclass fields of SGLang's batches and results."""
    fields: set[str] = set()
    for folder in folders:
        for path in sorted((root / SRT / folder).rglob("*.py")):
            for node in ast.walk(_parse(path)):
                if isinstance(node, ast.ClassDef):
                    fields |= {
                        item.target.id
                        for item in node.body
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    }
    return fields


def meta_info_keys(root: Path) -> set[str]:
    """Keys assigned as `meta_info["key"] = ...` by `srt/managers/tokenizer_manager.py`."""
    path = root / SRT / "managers" / "tokenizer_manager.py"
    keys = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and getattr(target.value, "id", "") == "meta_info"
                    and isinstance(target.slice, ast.Constant)
                ):
                    keys.add(str(target.slice.value))
    return keys


def environment_variables(root: Path) -> set[str]:
    """Names `srt/environ.py` declares (`SGLANG_X = EnvBool(False)` in its Envs class), and
    `NAME=default` for each whose default is a constant (`SGLANG_X=False`)."""
    path = root / SRT / "environ.py"
    names = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            declared = {t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()}
            names |= declared
            value = node.value
            if (
                isinstance(value, ast.Call)
                and value.args
                and isinstance(value.args[0], ast.Constant)
            ):
                names |= {f"{name}={value.args[0].value!r}" for name in declared}
    return names


def strings_containing(root: Path, text: str) -> list[str]:
    """String constants in `srt/` (f-strings' literal parts too) that contain `text`."""
    found = []
    for path in sorted((root / SRT).rglob("*.py")):
        source = path.read_text("utf-8", errors="replace")
        if text.split("{")[0][:40] not in source:
            continue  # cheap filter before parsing
        for node in ast.walk(_parse(path)):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and text in node.value
            ):
                found.append(node.value)
            elif isinstance(node, ast.JoinedStr) and text in _fstring_template(node):
                found.append(_fstring_template(node))
    return found


def _fstring_template(node: ast.JoinedStr) -> str:
    # f"a {x!r} b" -> "a {} b": the literal wording with placeholders.
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def rule_literals(root: Path, wording: str) -> set[tuple[str, ...]]:
    """The string lists or tuples a rule tests against: in the condition of the `if` that
    raises with `wording`, or assigned (in the same function) to a name that condition reads.
    """
    found: set[tuple[str, ...]] = set()
    for path in sorted((root / SRT).rglob("*.py")):
        if wording[:40] not in path.read_text("utf-8", errors="replace"):
            continue
        for function in ast.walk(_parse(path)):
            if isinstance(function, ast.FunctionDef | ast.Module):
                found |= _literals_of_rule(function, wording)
    return found


def _literals_of_rule(scope: ast.FunctionDef | ast.Module, wording: str) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.If) and any(_mentions(n, wording) for n in node.body):
            found |= {_strings(n) for n in ast.walk(node.test) if _strings(n)}
            names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            for assign in ast.walk(scope):
                if (
                    isinstance(assign, ast.Assign)
                    and _strings(assign.value)
                    and any(getattr(t, "id", None) in names for t in assign.targets)
                ):
                    found.add(_strings(assign.value))
    return found


def _mentions(node: ast.AST, wording: str) -> bool:
    for item in ast.walk(node):
        if isinstance(item, ast.Constant) and isinstance(item.value, str) and wording in item.value:
            return True
        if isinstance(item, ast.JoinedStr) and wording in _fstring_template(item):
            return True
    return False


def _strings(node: ast.AST) -> tuple[str, ...]:
    if not isinstance(node, ast.List | ast.Tuple) or not node.elts:
        return ()
    values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
    if len(values) == len(node.elts) and all(isinstance(v, str) for v in values):
        return tuple(values)
    return ()
