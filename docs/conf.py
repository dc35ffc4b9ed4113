"""docs/conf.py: Sphinx configuration for kffi's guides (Markdown, through MyST) and Python API.

scripts/build_docs.sh builds with warnings as errors; the C++ reference is Doxygen's HTML, copied
in as cpp/ (see cpp_api.md).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os

import kffi

project = "kffi"
author = "the kffi authors"
copyright = "the kffi authors"
release = kffi.__version__
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Doxyfile"]
# Colon fences hold the directives (toctree, autodoc), so that ``` blocks are all example code,
# which tests/python/house/test_docs.py runs.
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
# Blocks tagged for the docs runner (```python gpu, ```cpp file=x.cc) highlight as their language.
highlight_language = "none"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"kffi {release}"
# Doxygen's HTML (built first by scripts/build_docs.sh) becomes cpp/ of the site.
_doxygen_html = os.environ.get("KFFI_DOXYGEN_HTML")
html_extra_path = [_doxygen_html] if _doxygen_html else []
