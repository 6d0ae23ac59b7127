"""No import circle inside app/: a reader follows every module top to bottom.

The graph is grimp's (what import-linter checks), with the imports under ``TYPE_CHECKING``
counted: a circle hidden from the interpreter is still one for a reader.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import grimp


def circles(imports: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), and any
    module that imports itself."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in order:
            continue
        work = [(root, iter(sorted(imports.get(root, ()))))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports.get(target, ())))))
                elif target in on_stack:
                    low[module] = min(low[module], order[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == order[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1 or module in imports.get(module, ()):
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_circle_and_a_chain_apart() -> None:
    assert circles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert circles({"a": ["b"], "b": ["c"], "c": []}) == []
    assert circles({"a": ["a"]}) == [["a"]]


def test_no_module_of_app_imports_its_way_back_to_itself() -> None:
    graph = grimp.build_graph("app", exclude_type_checking_imports=False)
    imports = {module: graph.find_modules_directly_imported_by(module)
               for module in graph.modules if module.startswith("app")}
    assert circles(imports) == [], "modules that import each other, directly or round about"
