"""Bearer-token credentials that stay fresh: token files re-read while the client runs.

This module owns :class:`TokenFileRefresher`, the hook that keeps a rotated
service-account or projected token working, and the two places it is installed from: a
kubeconfig user's ``tokenFile`` (:func:`watch_kubeconfig_token_file`) and the in-pod
configuration (:mod:`cbop.kube.config`). The transport calls :func:`reread_token` after a
401 so the next attempt carries the rotated token at once, as client-go's
``transport.NewCachedFileTokenSource`` re-reads its file.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Final

import yaml

from cbop.clock import Clock

__all__ = [
    "TOKEN_REFRESH_PERIOD",
    "TokenFileRefresher",
    "reread_token",
    "watch_kubeconfig_token_file",
]

#: Seconds between re-reads of a token file, as client-go's cached file token source.
TOKEN_REFRESH_PERIOD: Final = 60.0


class TokenFileRefresher:
    """Re-reads a bearer token file at most every ``period`` seconds (rotated SA tokens).

    Installed as the configuration's ``refresh_api_key_hook``, which the generated
    ``Configuration.auth_settings()`` calls on every request (``ApiClient.param_serialize``
    with ``auth_settings=["BearerToken"]``). The stock in-cluster loader does the same
    with a fixed one-minute period on the wall clock; this one uses cbop's clock so the
    rotation can be tested, and keeps the last good token when the file is briefly
    missing or empty during a kubelet rotation.

    Args:
        token_file: path of the file holding the token (surrounding whitespace ignored).
        clock: time source of the period.
        period: seconds between re-reads (60, as client-go).
    """

    def __init__(self, token_file: str, clock: Clock, period: float = TOKEN_REFRESH_PERIOD):
        self._token_file = token_file
        self._clock = clock
        self._period = period
        self._lock = threading.Lock()
        self._next_read = clock.now() + period

    def force(self) -> None:
        """Make the next request re-read the file (after a 401: the token was rotated)."""
        with self._lock:
            self._next_read = float("-inf")

    def __call__(self, configuration: Any) -> None:
        """Set ``configuration.api_key["BearerToken"]`` from the file if a re-read is due.

        Never raises: an unreadable or empty file keeps the previous token.
        """
        now = self._clock.now()
        with self._lock:
            if now < self._next_read:
                return
            self._next_read = now + self._period
            try:
                token = Path(self._token_file).read_text().strip()
            except OSError:
                return
            if token:
                configuration.api_key["BearerToken"] = f"bearer {token}"


def watch_kubeconfig_token_file(
    configuration: Any, path: str, context: str | None, clock: Clock
) -> None:
    """Re-read a kubeconfig user's ``tokenFile`` periodically, as client-go does.

    The client's kubeconfig loader reads ``tokenFile`` once; a projected or rotated
    token would then stop working when it expires. When the user of ``context`` (default:
    the file's current context) names a ``tokenFile`` (relative paths are relative to the
    kubeconfig's directory), read it now and install a :class:`TokenFileRefresher` as
    ``configuration.refresh_api_key_hook``. An unreadable kubeconfig is left alone (the
    loader has already reported it).
    """
    try:
        doc = yaml.safe_load(Path(path).expanduser().read_text()) or {}
    except (OSError, yaml.YAMLError):
        return
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or ()}
    selected = contexts.get(context or doc.get("current-context"), {})
    users = {u.get("name"): u.get("user") or {} for u in doc.get("users") or ()}
    token_file = users.get(selected.get("user"), {}).get("tokenFile")
    if token_file:
        token_path = Path(token_file).expanduser()
        if not token_path.is_absolute():
            token_path = Path(path).expanduser().parent / token_path
        refresher = TokenFileRefresher(str(token_path), clock)
        # Read it now too: the stock loader keeps a trailing newline, which is not a
        # valid header value.
        refresher.force()
        refresher(configuration)
        configuration.refresh_api_key_hook = refresher


def reread_token(configuration: Any) -> bool:
    """After a 401: make a watched token file be re-read on the next request.

    Returns:
        ``True`` when ``configuration`` has a :class:`TokenFileRefresher` (so a retry
        may succeed with the rotated token), ``False`` otherwise.
    """
    hook = getattr(configuration, "refresh_api_key_hook", None)
    if isinstance(hook, TokenFileRefresher):
        hook.force()
        return True
    return False
