"""Scaling curves (``make bench CASES="scale_commit ..."``): how a cost grows with tasks,
partitions, record size and distinct keys, ours beside Spark's own where Spark has one.

Each case measures one ``Curve`` (a few series of (x, y) points), prints one ``CURVE``
line per point, writes ``bench/results/<case>.json`` and draws ``<case>.png`` beside it;
``python -m bench.scaling.curves --out docs/assets/bench`` redraws the committed charts
from the results. A curve has no single ratio, so it is kept apart from the ``BENCH``
cases' ratio chart.
"""
