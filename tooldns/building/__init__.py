"""From a tool catalog to a tree of zone files: what ``tooldns build`` does.

:mod:`.catalog` (catalog JSON, checked and merged), :mod:`.trees` (the category tree: offline
k-means with BM25 refinement, or a given A2X tree), :mod:`.llmtree` (an LLM designs the tree,
A2X's Algorithm 1), :mod:`.build` (categories to zone files, with summaries, glue and global
statistics) and :mod:`.update` (a built tree changed in place, with what :mod:`.state` remembers).

    >>> from tooldns.building import build
    >>> build(["services.en.json"], "built/").zones
    59
"""

from .build import BuildReport, build, build_zones
from .catalog import Catalog, CatalogTool, load_catalogs, parse_catalog
from .trees import A2XTreeBuilder, AutoTreeBuilder, Category
from .update import UpdateReport, update, update_tree

__all__ = ["A2XTreeBuilder", "AutoTreeBuilder", "BuildReport", "Catalog", "CatalogTool", "Category", "build",
           "build_zones", "load_catalogs", "parse_catalog", "update", "update_tree", "UpdateReport"]
