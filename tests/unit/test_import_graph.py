"""No import cycles anywhere in servectl (DESIGN §8).

import-linter's layers keep the big packages one-way; this finds any cycle between two
modules, inside a package too (e.g. two modelserver modules importing each other, even
through a third), with grimp, import-linter's own import graph.
"""

from __future__ import annotations

import grimp


def test_the_tree_has_no_import_cycles() -> None:
    graph = grimp.build_graph("servectl")
    cycles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported == importer or not imported.startswith("servectl"):
                continue
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                cycles.append(" -> ".join((importer, *back)))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
