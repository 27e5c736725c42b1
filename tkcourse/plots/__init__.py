"""Pictures: each function returns a matplotlib Figure (and widgets drive some of them).

Convention: the functions of ``traffic``, ``roofline``, ``bench``, ``blocks`` and ``schedule`` close the figure they
create before returning it, so pyplot does not show it a second time: end a notebook cell with the
figure (or the call) to display it once. ``heatmap``'s functions leave theirs open, so that pyplot
shows every one a loop draws; assign the result (``fig = heatmap(...)``) to show it once.
"""
