"""The registry of the benchmark's scenarios: one line per scenario.

``python -m bench.operators`` reads :data:`SCENARIOS` for what ``--scenarios`` and
``--set`` accept, which scenarios run per implementation and in which order, what the
control plane needs, and the sections of the results file; nothing else names a
scenario. Adding one is a module in ``bench.operators.scenarios`` and a line here.
"""

from __future__ import annotations

from typing import Final

from bench.operators.scenario import Scenario
from bench.operators.scenarios.apf import APF
from bench.operators.scenarios.burst import BURST
from bench.operators.scenarios.clusterbundles import CLUSTER_BUNDLES
from bench.operators.scenarios.heal import HEAL
from bench.operators.scenarios.revisions import REVISIONS
from bench.operators.scenarios.revisions_fanout import FANOUT
from bench.operators.scenarios.scale import SCALE
from bench.operators.scenarios.secret_renewal import SECRET_RENEWAL
from bench.operators.scenarios.sharded import SHARDING
from bench.operators.scenarios.sources import SOURCES

__all__ = ["DEFAULT", "SCENARIOS"]

#: Every scenario, in the order they run: per implementation first (S1 with S4 and S5,
#: S6/S7, S2 with S3), then those run once for the whole run. S12 comes before S11: the
#: audit policy takes the scenarios' rules in this order, and the first rule that
#: matches a request decides its level (S12's log its namespaces' writes in full).
SCENARIOS: Final[tuple[Scenario, ...]] = (
    BURST,
    SCALE,
    HEAL,
    SHARDING,
    CLUSTER_BUNDLES,
    SOURCES,
    SECRET_RENEWAL,
    FANOUT,
    REVISIONS,
    APF,
)
#: What ``--scenarios`` selects by default (about 40-60 minutes on two cores).
DEFAULT: Final = ("s1", "s2", "s3", "s4", "apf")
