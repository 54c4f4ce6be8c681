"""Who may import whom among the package and the folders beside it: the
package none of them; the test bed none of the tools that use it; bin/bench's
sections their shared support, never the harness that runs them."""

import ast

import pytest

from tests.helpers import ROOT

FOLDERS = ("motir_supervisor", "testbed", "benchmarks", "examples", "tests")


def imports_of(folder: str) -> dict[str, set[str]]:
    """{module: the modules it imports (``from a import b`` counts as a and a.b)}."""
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
        found[module] = names
    return found


def reaching(imports: dict[str, set[str]], folders: tuple[str, ...]) -> dict[str, list[str]]:
    """{module: what it imports from ``folders``}, for those that import any."""
    return {module: sorted(name for name in names if name.split(".")[0] in folders)
            for module, names in imports.items()
            if any(name.split(".")[0] in folders for name in names)}


@pytest.mark.parametrize("folder, forbidden", [
    ("motir_supervisor", ("testbed", "benchmarks", "examples", "tests")),
    ("testbed", ("benchmarks", "examples", "tests")),
    ("examples", ("benchmarks", "tests")),
    ("benchmarks", ("examples", "tests")),
])
def test_a_folder_imports_nothing_it_must_not(folder, forbidden):
    assert reaching(imports_of(folder), forbidden) == {}


def test_nothing_imports_the_bench_harness():
    imports = {module: names for folder in FOLDERS
               for module, names in imports_of(folder).items()}
    assert {module for module, names in imports.items()
            if "benchmarks.bench" in names} == set()
