"""An import-linter contract of our own: ``public_names``.

The CLI, the metrics and the test helpers are entry points for people, so they use the
library as a user would: through its public modules (``acmecerts``, ``acmecerts.client``,
``acmecerts.storage.keys``...), never through a private one (``acmecerts._time``,
``acmecerts.solvers._listener``). A module is private when a part of its name after
``acmecerts`` starts with an underscore (``__main__``-style names are not private). A
source package may import its own private modules.

import-linter's own ``private_modules`` contract checks every importer of the whole
package; this one checks only the listed entry points, which is what docs/contributing.md's
layer table asks. Configured in pyproject.toml (``[tool.importlinter]``, ``contract_types``)
and run by tests/project/test_layers.py and by ``lint-imports`` from the project root.
"""

from __future__ import annotations

from importlinter import Contract, ContractCheck, fields, output
from importlinter.application import contract_utils
from importlinter.domain import helpers

__all__ = ["PublicNamesContract"]


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


class PublicNamesContract(Contract):
    """The source packages import no private module of the root package but their own.

    Options: ``source_modules`` (packages or modules, wildcards allowed),
    ``ignore_imports`` (``importer -> imported`` expressions, as in the built-in contracts;
    an ignore that matches nothing is an error, so a fixed import cannot leave a stale one).
    """

    type_name = "public_names"

    source_modules = fields.SetField(subfield=fields.ModuleExpressionField())
    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)

    def check(self, graph: object, verbose: bool) -> ContractCheck:
        import grimp

        assert isinstance(graph, grimp.ImportGraph)
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=graph,
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]
            unmatched_alerting=contract_utils.AlertLevel.ERROR,
        )
        roots = [str(root) for root in self.session_options["root_packages"]]
        sources = helpers.module_expressions_to_modules(
            graph,
            self.source_modules,  # type: ignore[arg-type]
        )
        broken: list[tuple[str, str, tuple[int, ...]]] = []
        for source in sorted(module.name for module in sources):
            own = (source, *graph.find_descendants(source))
            for importer in sorted(own):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    root, _, rest = imported.partition(".")
                    if root not in roots or imported == source or imported.startswith(source + "."):
                        continue
                    if any(_is_private(part) for part in rest.split(".") if rest):
                        lines = tuple(
                            detail["line_number"]
                            for detail in graph.get_import_details(
                                importer=importer, imported=imported
                            )
                        )
                        broken.append((importer, imported, lines))
        return ContractCheck(
            kept=not broken,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"broken": broken},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Private modules imported where only public names may be:", bold=False)
        output.new_line()
        for importer, imported, lines in check.metadata["broken"]:
            where = ", ".join(f"l.{line}" for line in lines)
            output.print_error(f"- {importer} -> {imported} ({where})", bold=False)
        output.new_line()
