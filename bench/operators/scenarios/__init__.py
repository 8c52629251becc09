"""The scenarios, one module each (a report module beside the larger ones).

Each module exports one object satisfying ``bench.operators.scenario.Scenario``; the
registry (``bench.operators.registry``) lists them.
"""
