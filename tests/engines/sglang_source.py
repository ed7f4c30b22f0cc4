"""Read SGLang's source with `ast`, without importing it: flags, routes, classes, strings.

`root` is the folder that holds the `sglang` package (a `pip install --target` folder).
"""

from __future__ import annotations

import ast
import functools
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRT = Path("sglang", "srt")


@functools.cache
def _parse(path: Path) -> ast.Module:
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    # Kept for the session, each tree's objects by the hundred thousand out of the collector's
    # passes (once it has collected what was garbage): the module 35 -> 26 CPU s.
    gc.collect()
    gc.freeze()
    return tree


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


# --- SGLang's model classes: the modules and weights they build, the config keys they read ---

# Classes of SGLang's layers (and torch's) that hold one `weight` parameter (no bias: SGLang's
# Llama layers are built with bias=False, and the EAGLE-3 fc with config.bias, which perfgate's
# exports do not set).
WEIGHT_MODULES = frozenset(
    {
        "QKVParallelLinear",
        "MergedColumnParallelLinear",
        "RowParallelLinear",
        "ColumnParallelLinear",
        "ReplicatedLinear",
        "RMSNorm",
        "VocabParallelEmbedding",
        "ParallelLMHead",
        "Linear",
        "Embedding",
    }
)
# Classes that hold no parameter of their own: attention kernels, activations, the logits
# processor, and wrappers of modules registered under another name already.
PARAMETERLESS_MODULES = frozenset(
    {
        "RadixAttention",
        "SiluAndMul",
        "LogitsProcessor",
        "Pooler",
        "PPMissingLayer",
        "DualGemm",
        "DenseSiluAndMulQuant",
    }
)


@functools.cache
def _imported_from(root: Path, module: str) -> dict[str, str]:
    """Names `from X import Name` binds in the module -> X."""
    tree = _parse(module_path(root, module))
    return {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def _class_node(
    root: Path, module: str, name: str, *, skip_local: bool = False
) -> tuple[str, ast.ClassDef] | None:
    """The class `name` as `module` sees it: its own, else the one it imports (skip_local: a
    base class of the same name, which Python resolves before the subclass is bound)."""
    path = module_path(root, module)
    if not path.is_file():
        return None
    if not skip_local:
        for node in _parse(path).body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
    source = _imported_from(root, module).get(name)
    return None if source is None else _class_node(root, source, name)


def _callee(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _called(node)
    return ""


def _self_path(target: ast.expr) -> tuple[str, ...] | None:
    """`self.a.b` -> ("a", "b"); None for anything else."""
    parts: list[str] = []
    while isinstance(target, ast.Attribute):
        parts.insert(0, target.attr)
        target = target.value
    return tuple(parts) if isinstance(target, ast.Name) and target.id == "self" and parts else None


def _init(node: ast.ClassDef) -> ast.FunctionDef | None:
    return next(
        (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )


def _calls_super_init(init: ast.FunctionDef) -> bool:
    for node in ast.walk(init):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if (
                node.func.attr == "__init__"
                and isinstance(owner, ast.Call)
                and _called(owner) == "super"
            ):
                return True
    return False


Assigned = tuple[str, str]  # (what, the module whose code assigns it)


def module_attributes(root: Path, module: str, name: str) -> dict[tuple[str, ...], list[Assigned]]:
    """What `__init__` assigns to each `self.path` of class `name` (its bases' too, when it
    calls `super().__init__`), with the module whose code does it: the class it may build
    there ("list:X" for an `nn.ModuleList` of X), "None", "alias" (another attribute of
    self) or "value"."""
    found = _class_node(root, module, name)
    if found is None:
        raise LookupError(f"no class {name} in {module}")
    where, node = found
    init = _init(node)
    attributes: dict[tuple[str, ...], list[Assigned]] = {}
    if init is not None and _calls_super_init(init):
        for base in node.bases:
            base_name = getattr(base, "id", getattr(base, "attr", ""))
            if base_name in ("Module", "object"):
                continue
            parent = _class_node(root, where, base_name, skip_local=base_name == name)
            if parent is not None:
                attributes |= module_attributes(root, parent[0], base_name)
    own: dict[tuple[str, ...], list[Assigned]] = {}
    for statement in ast.walk(init) if init is not None else ():
        if isinstance(statement, ast.Assign) and statement.value is not None:
            for target in statement.targets:
                path = _self_path(target)
                if path is not None:
                    own.setdefault(path, []).append((_assigned(statement.value), where))
    # The class's own assignments (every branch of them) replace its base's.
    return attributes | own


def _assigned(value: ast.expr) -> str:
    if isinstance(value, ast.Constant) and value.value is None:
        return "None"
    if _self_path(value) is not None:
        return "alias"
    name = _callee(value)
    if name == "ModuleList" and isinstance(value, ast.Call) and value.args:
        items = value.args[0]
        element = (
            items.elt
            if isinstance(items, ast.ListComp)
            else (items.elts[0] if isinstance(items, ast.List) and items.elts else None)
        )
        return f"list:{_callee(element) if element is not None else ''}"
    return name if name[:1].isupper() else "value"


def parameter_names(
    root: Path, module: str, name: str, prefix: str = ""
) -> tuple[set[str], list[str]]:
    """The parameters class `name` of `module` builds, as `named_parameters` names them (one
    element of each module list: index 0), and the attributes the reader could not classify.

    An attribute that may be None (`self.fc_norm = ... if ... else None`) is left out; one
    that may be another attribute (`lm_head`, tied to the embedding) counts as its own module
    (the untied case). `self.a.b = X` in a subclass replaces `b` of the base's `a`: the same
    dotted name, so the names are a union.
    """
    names: set[str] = set()
    unknown: list[str] = []
    for path, kinds in module_attributes(root, module, name).items():
        if any(kind == "None" for kind, _ in kinds):
            continue
        dotted = prefix + ".".join(path)
        for kind, where in dict.fromkeys(kinds):
            element = kind.removeprefix("list:")
            here = f"{dotted}.0" if kind.startswith("list:") else dotted
            if kind in ("value", "alias") or element in PARAMETERLESS_MODULES:
                continue
            if element in WEIGHT_MODULES:
                names.add(f"{here}.weight")
                continue
            found = _class_node(root, where, element)
            if found is None:
                unknown.append(f"{here}: {element}")
                continue
            inner, missing = parameter_names(root, found[0], element, here + ".")
            names |= inner
            unknown += missing
    return names, unknown


@dataclass(frozen=True)
class LoadRules:
    """How a model's `load_weights` renames a checkpoint's names, read from its source."""

    legacy: dict[str, str]  # `legacy_name_map`: substring -> replacement (0.5.12 on)
    stacked: list[tuple[str, str, object]]  # `stacked_params_mapping`: (param, shard name, id)
    special: tuple[str, ...]  # substrings handled apart (`if "d2t" in name: ... continue`)


def load_rules(root: Path, module: str, name: str) -> LoadRules:
    """The renaming rules of `load_weights` of class `name` in `module`."""
    found = _class_node(root, module, name)
    assert found is not None, f"no class {name} in {module}"
    function = next(
        n for n in found[1].body if isinstance(n, ast.FunctionDef) and n.name == "load_weights"
    )
    legacy: dict[str, str] = {}
    stacked: list[tuple[str, str, object]] = []
    special: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
            if target == "legacy_name_map" and isinstance(value, ast.Dict):
                legacy = {
                    ast.literal_eval(k): ast.literal_eval(v)
                    for k, v in zip(value.keys, value.values, strict=True)
                    if k is not None
                }
            elif target == "stacked_params_mapping" and isinstance(value, ast.List):
                stacked = [tuple(ast.literal_eval(e)) for e in value.elts]  # type: ignore[misc]
        elif (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Constant)
            and isinstance(node.test.ops[0], ast.In)
            and isinstance(node.body[-1], ast.Continue)
        ):
            special.append(str(node.test.left.value))
    return LoadRules(legacy, stacked, tuple(special))


def loaded_parameter(
    name: str, rules: LoadRules, parameters: set[str]
) -> tuple[str, object] | None:
    """The parameter (and shard id, None for a whole one) that SGLang's `load_weights`
    writes a checkpoint tensor `name` into; None where it drops it without a word.

    As the release's code: legacy substrings replaced, special names set apart, the first
    stacked mapping whose shard name occurs applied, then the name itself or `model.` + it.
    """
    for legacy, new in rules.legacy.items():
        if legacy in name:
            name = name.replace(legacy, new)
    if any(word in name for word in rules.special):
        return None
    shard: object = None
    for param, weight, shard_id in rules.stacked:
        if weight in name:
            name, shard = name.replace(weight, param), shard_id
            break
    for candidate in (name, f"model.{name}"):
        if candidate in parameters:
            return candidate, shard
    return None


def config_reads(
    root: Path, module: str, classes: tuple[str, ...] | None = None
) -> tuple[set[str], set[str]]:
    """The config keys the code reads: (`config.key` / `self.config.key` without a guard,
    `getattr(config, "key", ...)` or `hasattr(config, "key")`), in the named classes of
    `module` or in all of it."""
    tree = _parse(module_path(root, module))
    scopes: list[ast.AST] = (
        [tree]
        if classes is None
        else [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in classes]
    )
    plain: set[str] = set()
    guarded: set[str] = set()
    for scope in scopes:
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and _is_config(node.value)
            ):
                plain.add(node.attr)
            elif (
                isinstance(node, ast.Call)
                and _called(node) in ("getattr", "hasattr")
                and len(node.args) >= 2
                and _is_config(node.args[0])
                and isinstance(node.args[1], ast.Constant)
            ):
                guarded.add(str(node.args[1].value))
    return plain - guarded, guarded


def _is_config(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "config"
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "config"
        and _self_path(node) == ("config",)
    )


def capture_sites(root: Path) -> list[str]:
    """Where `srt/models/llama.py`'s LlamaModel.forward tests `... in self.layers_to_capture`:
    "layer loop" for a test inside `for i in range(self.start_layer, self.end_layer)` on the
    loop's own index, else the source of the test."""
    module = "sglang.srt.models.llama"
    found = _class_node(root, module, "LlamaModel")
    assert found is not None
    forward = next(
        n for n in found[1].body if isinstance(n, ast.FunctionDef) and n.name == "forward"
    )
    sites: list[str] = []
    inside: set[int] = set()
    for loop in ast.walk(forward):
        if isinstance(loop, ast.For) and _is_layer_loop(loop):
            index = loop.target.id  # type: ignore[attr-defined]
            for node in ast.walk(loop):
                if _tests_capture(node) and getattr(node.left, "id", None) == index:  # type: ignore[attr-defined]
                    inside.add(id(node))
    for node in ast.walk(forward):
        if _tests_capture(node):
            sites.append("layer loop" if id(node) in inside else ast.unparse(node))
    return sites


def _is_layer_loop(loop: ast.For) -> bool:
    it = loop.iter
    return (
        isinstance(loop.target, ast.Name)
        and isinstance(it, ast.Call)
        and _called(it) == "range"
        and [ast.unparse(a) for a in it.args] == ["self.start_layer", "self.end_layer"]
    )


def _tests_capture(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Compare)
        and isinstance(node.ops[0], ast.In)
        and ast.unparse(node.comparators[0]) == "self.layers_to_capture"
    )


def capture_offsets(root: Path) -> list[str]:
    """The expressions `LlamaForCausalLM.set_eagle3_layers_to_capture` turns given layer ids
    into (`[val + 1 for val in layer_ids]`: "val + 1")."""
    found = _class_node(root, "sglang.srt.models.llama", "LlamaForCausalLM")
    assert found is not None
    method = next(
        n
        for n in found[1].body
        if isinstance(n, ast.FunctionDef) and n.name == "set_eagle3_layers_to_capture"
    )
    return [
        ast.unparse(node.elt)
        for node in ast.walk(method)
        if isinstance(node, ast.ListComp) and ast.unparse(node.generators[0].iter) == "layer_ids"
    ]
