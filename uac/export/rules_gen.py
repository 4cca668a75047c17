"""Generating ``constraints/``: the rules' own source, vendored, over a tiny runtime.

The source of every module a rule is defined in is copied (``inspect``), and
so is every ``uac`` module those import (helpers), transitively. Imports of
the few names uac's core provides (``UserState``, ``Finding``, ``rule`` ...)
are pointed at ``constraints/_runtime.py``, a copy of :mod:`uac.export.runtime`;
any other kind of ``uac`` import makes the export fail rather than produce a
project that needs uac.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType

from uac.errors import ExportError
from uac.executor.rules import Rule
from uac.export import runtime
from uac.export.render import literal

RUNTIME = "_runtime"
RUNTIME_MODULES = frozenset({"uac.checkpointer.state", "uac.executor.rules", "uac.domains.facts"})
"""uac modules whose names the runtime re-implements."""
_FROM = re.compile(r"^from\s+([.\w]+)\s+import\b")


@dataclass(slots=True)
class _Vendor:
    """Modules to copy (by uac name) and the file name each gets."""

    files: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


def _module(name: str) -> ModuleType:
    module = sys.modules.get(name) or importlib.import_module(name)
    if hasattr(module, "__path__"):
        raise ExportError(f"rules import the package {name}; only modules can be vendored")
    return module


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    if node.level == 0:
        return node.module
    if not node.module:
        return None
    return importlib.util.resolve_name("." * node.level + node.module, package)


def _is_uac(module: str) -> bool:
    return module == "uac" or module.startswith("uac.")


def _uac_imports(name: str, tree: ast.AST) -> list[tuple[ast.ImportFrom, str]]:
    """The ``from uac...`` imports of a module (relative ones resolved); refuses other forms."""
    package = name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(_is_uac(a.name) for a in node.names):
                raise ExportError(f"{name} uses `import uac...`; an export can only vendor "
                                  "`from uac... import name` imports")
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(node, package)
            if target is None:
                raise ExportError(f"{name} imports modules with `from . import`; not vendorable")
            if _is_uac(target):
                found.append((node, target))
    return found


def _collect(names: Sequence[str]) -> _Vendor:
    vendor = _Vendor()
    queue = list(names)
    while queue:
        name = queue.pop(0)
        if name in vendor.files:
            continue
        file = name.rpartition(".")[2]
        if file in (RUNTIME, "__init__") or file in vendor.files.values():
            raise ExportError(f"cannot vendor {name}: another module is already named {file}")
        try:
            source = inspect.getsource(_module(name))
        except (OSError, TypeError) as exc:
            raise ExportError(f"the source of rule module {name} is not available: {exc}") from None
        vendor.files[name], vendor.sources[name] = file, source
        for node, target in _uac_imports(name, ast.parse(source)):
            if target in RUNTIME_MODULES:
                missing = [a.name for a in node.names if a.name not in runtime.__all__]
                if missing:
                    raise ExportError(f"{name} imports {missing} from {target}, which an "
                                      "exported project's runtime does not provide")
            elif target not in vendor.files:
                queue.append(target)
    return vendor


def _rewrite(name: str, source: str, vendor: _Vendor) -> str:
    lines = source.split("\n")  # ast counts lines by "\n" only
    for node, target in _uac_imports(name, ast.parse(source)):
        new = "." + (RUNTIME if target in RUNTIME_MODULES else vendor.files[target])
        raw = lines[node.lineno - 1].encode()
        head, rest = raw[:node.col_offset], raw[node.col_offset:].decode()
        match = _FROM.match(rest)
        if match is None:
            raise ExportError(f"cannot rewrite an import at {name}:{node.lineno}")
        lines[node.lineno - 1] = (head.decode() + rest[:match.start(1)] + new
                                  + rest[match.end(1):])
    rewritten = "\n".join(lines)
    if any(isinstance(n, ast.ImportFrom) and n.level == 0 and _is_uac(n.module or "")
           for n in ast.walk(ast.parse(rewritten))):
        raise ExportError(f"{name} still imports uac after rewriting")
    compile(rewritten, f"constraints/{vendor.files[name]}.py", "exec")
    return rewritten


def _rule_name(item: Rule) -> tuple[str, str]:
    """(module, attribute name) under which a rule object is defined."""
    module_name = getattr(item.evaluate, "__module__", None)
    module = sys.modules.get(module_name or "")
    if module is None:
        raise ExportError(f"rule {item.rule_id} has no module to vendor")
    fn_name = getattr(item.evaluate, "__name__", "")
    if getattr(module, fn_name, None) is item:
        return module.__name__, fn_name
    for attr in sorted(vars(module)):
        if getattr(module, attr) is item:
            return module.__name__, attr
    raise ExportError(f"rule {item.rule_id} is not a module-level name of {module.__name__}")


def _init_source(rules: Sequence[Rule], located: list[tuple[str, str]], vendor: _Vendor) -> str:
    by_module: dict[str, list[str]] = {}
    for module, attr in located:
        by_module.setdefault(vendor.files[module], []).append(attr)
    attrs = [attr for _, attr in located]
    if len(set(attrs)) != len(attrs):
        raise ExportError(f"two rules share a name: {sorted(attrs)}")
    imports = "".join(f"from .{m} import {', '.join(sorted(a))}\n"
                      for m, a in sorted(by_module.items()))
    listed = "".join(f"    {attr},  # {literal(item.rule_id)}\n"
                     for item, (_, attr) in zip(rules, located, strict=True))
    return _INIT.format(imports=imports, rules=listed)


def constraint_files(rules: Sequence[Rule]) -> dict[str, str]:
    """``constraints/*.py`` (relative path -> source): runtime, vendored modules, index."""
    located = [_rule_name(r) for r in rules]
    vendor = _collect(sorted({m for m, _ in located}))
    files = {f"constraints/{RUNTIME}.py": inspect.getsource(runtime)}
    for name in sorted(vendor.files):
        header = (f"# Vendored from {name} by `uac export`; its uac imports point at "
                  f"{RUNTIME}.py.\n")
        files[f"constraints/{vendor.files[name]}.py"] = header + _rewrite(
            name, vendor.sources[name], vendor)
    files["constraints/__init__.py"] = _init_source(rules, located, vendor)
    return files


_INIT = '''"""The rules over this user's state: uac's rules, vendored, over a tiny runtime.

``evaluate()`` runs every rule at the export's event time with the store's
settings; ``load_state()`` and ``context()`` are its parts.
"""

from __future__ import annotations

import datetime

from ._runtime import Finding, Outcome, Rule, RuleContext, Severity, State, rule, run_rules
{imports}
RULES: tuple[Rule, ...] = (
{rules})
"""Every rule, in uac's order."""


def load_state() -> State:
    """The user's state from ``domains/``, as the rules read it."""
    import domains
    import manifest

    return State.from_domains(manifest.USER_ID, domains.STATE, domains.PROVENANCE, domains.EXTRA)


def context(now: datetime.datetime | None = None) -> RuleContext:
    """A rule context at ``now`` (default: ``manifest.EXPORTED_AT``) with the store's settings."""
    import manifest

    settings = manifest.RULE_SETTINGS
    return RuleContext(now or manifest.EXPORTED_AT, settings["days_ahead"],
                       settings["lapse_days_ahead"])


def evaluate(now: datetime.datetime | None = None) -> Outcome:
    """Run every rule over the state; findings sorted by (subject, rule id)."""
    return run_rules(RULES, load_state(), context(now))


__all__ = ["RULES", "Finding", "Outcome", "Rule", "RuleContext", "Severity", "State",
           "context", "evaluate", "load_state", "rule", "run_rules"]
'''
