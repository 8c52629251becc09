"""FakeKube and FakeWatch implement the client's protocols themselves.

A fake that inherited :class:`cbop.kube.KubeClient` would inherit every method added to
the client later: mypy would accept it, and the first test to call one would send a
real request from a client with no transport. So each member of the protocols
(:class:`cbop.kube.KubeInterface`, :class:`cbop.kube.WatchInterface`) must be defined by
the fake's own class, and the fakes inherit from neither real class. mypy checks the
signatures (``make lint``).
"""

from __future__ import annotations

import inspect

import pytest

from cbop.kube import KubeClient, KubeInterface, WatchInterface, WatchStream
from cbop_testing.fakekube import FakeKube, FakeWatch


def _members(protocol: type) -> set[str]:
    return {
        name
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) or isinstance(value, property)
    } - {"__init__", "__subclasshook__"}


@pytest.mark.parametrize(
    ("fake", "protocol", "real"),
    [(FakeKube, KubeInterface, KubeClient), (FakeWatch, WatchInterface, WatchStream)],
    ids=["client", "watch"],
)
def test_every_member_of_the_protocol_is_the_fakes_own(
    fake: type, protocol: type, real: type
) -> None:
    members = _members(protocol)
    assert len(members) >= 5
    assert members - set(vars(fake)) == set()
    assert members - {name for name in dir(real)} == set()  # the real one has them all
    assert not issubclass(fake, real)
