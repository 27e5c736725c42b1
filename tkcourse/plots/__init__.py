"""Pictures: each function returns a matplotlib Figure (and widgets drive some of them).

Convention: a function that creates its figure closes it before returning it, so pyplot does not
show it a second time; end a notebook cell with the figure (or the call) to display it once.
"""
