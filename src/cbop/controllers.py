"""The registry of the controllers cbop runs: one line per controller package.

The command line (its flags), the process (which controllers it installs and sets up
in every scope), the connection pool's size and the RBAC check all read
:data:`CONTROLLERS`, so running a new controller touches neither ``cbop.cli`` nor
``cbop.manager``. Only the one-shot modes of the command name controllers:
``cbop --once`` runs the ConfigBundle reconciler (:mod:`cbop.cli.once`) and its dry
run plans the rollouts (:mod:`cbop.cli.plan`). See docs/writing-a-controller.md.
"""

from __future__ import annotations

from typing import Any, Final

from cbop.clusterbundle.controller import DEFINITION as CLUSTER_BUNDLES
from cbop.configbundle.controller import DEFINITION as CONFIGBUNDLE
from cbop.rollout.controller import DEFINITION as ROLLOUT
from cbop.runtime.definition import ControllerDefinition

__all__ = ["CONTROLLERS"]

#: Every controller package, in the order they are set up in a scope.
CONTROLLERS: Final[tuple[ControllerDefinition[Any], ...]] = (
    CONFIGBUNDLE,
    ROLLOUT,
    CLUSTER_BUNDLES,
)
