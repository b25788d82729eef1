"""Planted bugs of the 4.9.8 client-driven admin reset (``spec/admin_reset.py``, R3.10a)."""

from __future__ import annotations

from rmqspec.spec.state import State
from rmqspec.spec.variants import Variant, planted


@planted("client_reset_off_by_one", breaks=("R3.10a",), refuted_by=("INV-8r",))
class ClientResetOffByOne(Variant):
    """MQClientInstance.resetOffset applies the reset offset minus one (at least 0)."""

    def _reset_value(self, offset: int) -> int:
        return max(offset - 1, 0)


@planted("client_reset_skips_update", breaks=("R3.10a",), refuted_by=("INV-18",))
class ClientResetSkipsUpdate(Variant):
    """MQClientInstance.resetOffset skips updateOffset and persists the old memory offset."""

    def _reset_update_offset(self, s: State, i: int, q: int, value: int) -> State:
        return s
