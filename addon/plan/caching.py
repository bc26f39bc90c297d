"""What the plan decides for the upstream's prompt cache: which breakpoints reach it
(``cache_policy``), OpenAI's ``prompt_cache_key`` (``with_cache_key``), and the seeds of the
values the bridge derives per conversation (``Seeds``; docs/caching.md)."""

from __future__ import annotations

import dataclasses

from addon.dialects import Dialect
from addon.model import CachePolicy, Notes, Request
from addon.plan.flow_plan import FlowPlan
from addon.stores.reasoning import StoreError, StoreView
from addon.transforms.conversation import PROCESS_SECRET, derive


@dataclasses.dataclass(frozen=True, slots=True)
class Seeds:
    """What the values the bridge derives for one conversation are made from
    (``addon.transforms.conversation``)."""

    secret: bytes
    conversation: str

    def derive(self, purpose: str) -> bytes:
        return derive(self.secret, self.conversation, purpose)


def secret_of(store: StoreView | None) -> bytes:
    """The store's secret (shared by the workers on one store), else the process's."""
    if store is None:
        return PROCESS_SECRET
    try:
        return store.secret
    except StoreError:  # the store's own failures are logged where it is used
        return PROCESS_SECRET


def cache_policy(policy: CachePolicy | None, origin: str, upstream: Dialect) -> CachePolicy:
    """The route's ``cache_control``, else the upstream dialect's default: ``keep`` for a
    client of the upstream's own dialect unless the default is ``auto``; ``drop`` where the
    upstream's requests carry no breakpoints."""
    marks = upstream.cache_marks
    if policy is not None:
        return policy
    if marks is None:
        return "drop"
    if marks.default == "auto":
        return "auto"
    return "keep" if origin == upstream.name else marks.default


OPENAI_API_HOST = "api.openai.com"


def with_cache_key(req: Request, plan: FlowPlan, seeds: Seeds, notes: Notes) -> Request:
    """OpenAI's ``prompt_cache_key`` where the route sends one (by default to OpenAI's own
    API): the client's, else one derived from its conversation; a client's own key reaches
    another dialect's upstream only then."""
    if not plan.upstream.cache_key:
        return req
    on = plan.route.prompt_cache_key
    if on is None:
        on = plan.host.lower() == OPENAI_API_HOST
    key = req.params.cache_key
    if on and not key:
        notes["prompt_cache_key derived from the conversation"] += 1
        key = "cb-" + seeds.derive("prompt_cache_key").hex()[:32]
    elif not on and key and req.origin != plan.upstream.name:
        notes["prompt_cache_key not sent (route: prompt_cache_key = false)"] += 1
        key = None
    if key == req.params.cache_key:
        return req
    return dataclasses.replace(req, params=dataclasses.replace(req.params, cache_key=key))
