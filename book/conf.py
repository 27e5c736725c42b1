"""Sphinx settings for the course's static site (README, "Read it online"); book/build.py runs it.

The pages are the lessons as executed by book/build.py (or by the test suite): myst-nb renders them
with their outputs and figures and never executes anything itself.
"""

project = "Fast GPU kernels with Triton"
author = "the course's authors"
copyright = "the course's authors, MIT license"

extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# The notebooks were run beforehand (book/build.py, or the suite's notebook test): rendering only, here.
nb_execution_mode = "off"
nb_merge_streams = True          # a cell's prints read as one block, as in JupyterLab
myst_enable_extensions = ["dollarmath", "amsmath"]  # the lessons write math as $...$ and $$...$$
myst_heading_anchors = 3         # headings get anchors, so links to a section stay stable
suppress_warnings = ["myst.header"]  # a lesson may skip a heading level; the page renders the same

html_theme = "sphinx_book_theme"
html_title = project
html_static_path = ["_static"]
html_css_files = ["course.css"]  # wide code: the lessons' lines run to 120 columns
html_last_updated_fmt = None
html_copy_source = False          # the notebooks are in the repository: no second copy in the site
html_show_sourcelink = False
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,  # the notebooks come from the repository, with their exercises
    "use_fullscreen_button": False,
}
