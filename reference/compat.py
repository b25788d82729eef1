"""Switches that make the reference behave like the model where the model departs from RocketMQ 4.9.8.

The refinement check compares two independent formulations: the model (``rmqspec.spec``) and this
RocketMQ-shaped reference. Where reading RocketMQ 4.9.8 (and the rules of docs/rules.md) gave a different answer
from the model, the reference implements RocketMQ and names the difference here. Each switch, when
True (the default, used by the lockstep test), makes the reference take the model's branch instead;
:meth:`SpecCompat.faithful` turns them all off. Tests show that each switch is load-bearing: with it
off, the lockstep check finds a divergence.

Where the model was brought in line with 4.9.8, the switch went and the reference does what RocketMQ
does, unconditionally: a null consumer list keeps the pqs (R9.3), a pull of a group nobody registered
is rejected before its commit (R5.4, postSubscriptionWhenPull=false), a changed allocation bumps
subVersion and heartbeats (R9.6), FOUND for a dropped pq still submits (R5.7), FOUND and
PULL_RETRY_IMMEDIATELY are answered at once and only PULL_NOT_FOUND is held (R5.4/R5.5), unregister
notifies whenever the group exists (R9.7), a pull returns at most 32 messages (R5.5), a pq not pulled
for 120 s is dropped and re-created by the next rebalance (R9.4, R6.6).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class SpecCompat:
    # R10.3: ConsumeQueue#getOffsetInQueueByTime returns the binary-search hit among equal store times;
    # the model returns the first message stored at that time.
    search_offset_first_equal: bool = True
    # R5.4 with R9.6: a pull carries the consumer's subVersion (set at start and by every changed
    # allocation) and the broker answers SUBSCRIPTION_NOT_LATEST, before the piggy-backed commit, when
    # the group's subscription (the highest version heartbeated since the group appeared) is older:
    # e.g. after a broker restart, a member started later pulls before its own heartbeat while an
    # earlier member has already re-registered. The model rejects a pull only when nobody is
    # registered.
    pull_ignores_sub_version: bool = True

    @classmethod
    def faithful(cls) -> SpecCompat:
        """Every switch off: the reference does what RocketMQ 4.9.8 does."""
        return cls(**{f.name: False for f in fields(cls)})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
