"""Sphinx configuration of nbquant's documentation site.

Build it from the repository root (``pip install -e ".[docs]"`` first)::

    sphinx-build -W -b html docs docs/_build/html        # the site, warnings are errors
    sphinx-build -W -b doctest docs docs/_build/doctest  # run the pages' ``>>>`` examples

The pages are the Markdown files of ``docs/`` (myst-parser). The API reference is generated from
the docstrings (autosummary + numpydoc, validated). The figures are drawn by
``docs/_scripts/figures.py`` when the build starts (the local extension ``docs/_ext/nbquant_docs.py``),
and intersphinx reads a small numpy inventory shipped in ``docs/_data/`` so that the build needs no
network.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# This checkout's nbquant, whatever is installed; and the local extension.
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]

import nbquant  # noqa: E402

project = "nbquant"
author = "the nbquant authors"
copyright = "the nbquant authors"  # noqa: A001 - Sphinx's name
release = nbquant.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "nbquant_docs",
    "nbquant_cli",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_data", "_scripts", "_ext", "_static", "_templates", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# -- Markdown -------------------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # the pages link to `page.md#a-heading` as GitHub renders them

# -- API reference ----------------------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
add_module_names = False

numpydoc_show_class_members = False  # the class template lists the members itself
numpydoc_class_members_toctree = False
# Parameter types link where they name numpy or nbquant objects; other words stay text ("all" below). The Python
# builtins are plain class roles: numpydoc's defaults point them at a Python inventory, which is not shipped.
numpydoc_xref_param_type = True
numpydoc_xref_ignore = "all"
_NUMPY = {name: f"numpy.{name}" for name in ("float16", "float32", "float64", "int8", "uint8", "int32", "dtype")}
numpydoc_xref_aliases = {
    **{name: ":class:`" + name + "`" for name in ("bool", "list", "tuple", "str", "dict", "float", "int")},
    "None": ":obj:`None`", "boolean": ":class:`bool`", "True": ":obj:`True`", "False": ":obj:`False`",
    "string": ":class:`str`", "callable": ":func:`callable`", "iterable": ":class:`~collections.abc.Iterable`",
    "sequence": ":class:`~collections.abc.Sequence`", "contextmanager": ":func:`~contextlib.contextmanager`",
    "namedtuple": ":func:`~collections.namedtuple`", "generator": ":class:`~collections.abc.Generator`",
    "array": "numpy.ndarray", "ndarray": "numpy.ndarray", "numpy.ndarray": "numpy.ndarray",
    "array_like": ":term:`numpy:array_like`", "array-like": ":term:`numpy:array_like`",
    **_NUMPY, **{f"numpy.{k}": v for k, v in _NUMPY.items()},
    **{name: f"nbquant.{name}" for name in ("PackedCodes", "QuantFormat", "BlockQuantized", "NF4Quantized",
                                            "BackendInfo", "MaxCalibrator", "HistogramCalibrator")},
}
# Every check but these, each excluded for a reason:
# - ES01 (extended summary) and SA01 (See Also): one-line functions need neither; the pages link related calls.
# - EX01 (Examples): the examples live on the pages, where the doctest builder runs them.
# - PR08 and RT04 (a description starts with a capital letter): descriptions begin with a dtype or a literal by
#   house style ("float32 per-block scales", "``"auto"``, ...").
numpydoc_validation_checks = {"all", "ES01", "SA01", "EX01", "PR08", "RT04"}
# Objects numpydoc cannot validate, each for a reason:
numpydoc_validation_exclude = {
    # module constants: their docs are `#:` comments, which numpydoc reads as one-line docstrings (GL02, SS01)
    r"\.FORMATS$", r"\.MX_FORMATS$", r"\.TENSOR_TYPES$",
    # an Enum: numpydoc reads EnumType.__call__'s (value, names, module, ...) as its parameters (PR01)
    r"\.ZeroPointDomain$",
    # properties made with property(lambda ...), as modelopt writes them: numpydoc 1.x cannot find their `def` line
    r"\.(Scaled)?QuantDescriptor\.(num_bits|name|fake_quant|axis|block_sizes|amax|learn_amax|scale_amax"
    r"|calib_method|unsigned|narrow_range)$",
}

# -- Cross-references -------------------------------------------------------------------------------------------
# numpy's inventory is read from a small file in the repository (docs/_data/numpy-objects.inv, written by
# docs/_scripts/numpy_inventory.py): the build never touches the network, and links still point at numpy.org.
intersphinx_mapping = {"numpy": ("https://numpy.org/doc/stable/", str(DOCS / "_data" / "numpy-objects.inv"))}
intersphinx_timeout = 5

# -- Doctests of the pages ---------------------------------------------------------------------------------------
# The pages' ``>>>`` blocks (```python fences) are doctests; nbquant_docs marks them for `-b doctest`. Each page
# is one namespace and imports what it uses, as tests/test_docs_pages.py runs them.
import doctest  # noqa: E402

doctest_default_flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.DONT_ACCEPT_TRUE_FOR_1
# Not the docstrings' examples on the generated API pages: they run in their module's namespace, which pytest's
# --doctest-modules gives them (the default test tier); here they would run in an empty one.
doctest_test_doctest_blocks = ""

# -- HTML -------------------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"nbquant {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,  # the five sections of the site, in the header
    # "On this page" on every page but the home page and the tutorials, whose code blocks get its width
    "secondary_sidebar_items": {"**": ["page-toc", "sourcelink"], "index": [], "install": [],
                                "getting_started": [], "tutorial_convert": [], "compile_cache": []},
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# The home page lists the sections in its body: no empty "Section Navigation" beside it. Every other page is in a
# section (tutorials, how-to guides, reference, explanation, project), whose pages the left sidebar lists.
html_sidebars = {"index": []}
html_context = {"default_mode": "auto"}  # the theme's light/dark switch starts from the reader's system setting
html_static_path = ["_static"]
html_css_files = ["nbquant.css"]  # code blocks wrap instead of scrolling sideways
html_favicon = "_static/nbquant.svg"
html_show_sourcelink = True
# Signatures of the generated API wider than this are set one parameter a line.
maximum_signature_line_length = 88
