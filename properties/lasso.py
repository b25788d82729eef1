"""Liveness as fair cycles of the explored state graph: a lasso is a shortest path from the initial state into a
strongly connected set of states that a weakly fair schedule can stay in forever, with perturbations over,
while a liveness check (LIV-1..LIV-5) fails in every one of its states.

The liveness checks are those of the quiescence procedure (``properties/liveness.py``): every queue owned,
every owned queue's offset on the broker and flushed, every pq pulling, every message consumed and committed.
There they are checked once, at the end of a fair schedule run for a bounded logical time; here they are
checked against every infinite behaviour of a finite configuration:

* **Perturbations are over**: a cycle takes no budgeted fault, no ``Produce``, no ``CoolQueueHead`` and no
  failing listener answer (``liveness.allowed``, with consumers restarted).
* **Weak fairness**: every action the quiescence schedule may take is obliged. A strongly connected component
  of the states where a check fails, restricted to those actions, holds a fair cycle exactly when every
  obliged action enabled in all of its states is also taken by one of its internal transitions (a cycle
  through every state and edge of the component is then fair; if some obliged action is enabled throughout
  and never taken inside, every cycle in it is unfair). An action whose successor a constraint pruned is
  enabled but leaves the component.
* The component must be a cycle: more than one state, or a state with a transition to itself.

The graph comes from ``exhaustive.check(..., keep_edges=True)``: compact arrays of transitions and a bitmask
per state of the checks that fail in it. networkx is handed only the transitions between failing states
(``liveness_graph``), one check at a time; its strongly connected components and its shortest paths give
the cycle, and the exploration's parent pointers give the shortest prefix.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import networkx as nx

from rmqspec.properties.liveness import _failures, allowed
from rmqspec.spec.actions import Action

if TYPE_CHECKING:
    from rmqspec.properties.exhaustive import Search, _Graph
    from rmqspec.spec.model import Model
    from rmqspec.spec.state import State

# The liveness checks, in the order of their bits in a state's bitmask.
LIVENESS_IDS: tuple[str, ...] = ("LIV-1", "LIV-2", "LIV-3/4", "LIV-5")


def liveness_bits(model: Model, state: State) -> int:
    """The liveness checks failing in ``state`` (consumers restarted), as a bitmask over ``LIVENESS_IDS``.
    A shortfall that a listener's own choice explains (an orderly autoCommit=false listener holding what it
    took) is not a failure, as at quiescence."""
    bits = 0
    for v in _failures(model, state, True):
        bits |= 1 << LIVENESS_IDS.index(v.id)
    return bits


@dataclass
class Lasso:
    """A liveness violation: the check, its detail in the cycle's first state, the shortest path into the
    cycle and the cycle's actions (which return to the cycle's first state)."""

    id: str
    detail: str
    prefix: list[Action]
    cycle: list[Action]
    states_in_component: int

    def describe(self) -> str:
        lines = [f"{self.id}: {self.detail}", f"after {len(self.prefix)} steps:"]
        lines += [f"  {k:3d}. {a!r}" for k, a in enumerate(self.prefix, 1)]
        lines.append(f"then forever (a fair cycle of {len(self.cycle)} steps in {self.states_in_component} states):")
        lines += [f"  {k:3d}. {a!r}" for k, a in enumerate(self.cycle, 1)]
        return "\n".join(lines)


def liveness_graph(search: Search, bit: int) -> nx.MultiDiGraph:
    """The transitions a fair, unperturbed schedule may take between states where check ``bit`` fails,
    labelled with their interned action id."""
    g = search.graph
    ok = [allowed(a, True) for a in g.action_list]
    bad = g.bad
    mask = 1 << bit
    out = nx.MultiDiGraph()
    out.add_nodes_from(k for k in range(len(bad)) if bad[k] & mask)
    out.add_edges_from(
        (u, v, {"act": k})
        for u, v, k in zip(g.src, g.dst, g.act, strict=True)
        if v >= 0 and ok[k] and bad[u] & mask and bad[v] & mask
    )
    return out


def find_lassos(search: Search) -> list[Lasso]:
    """One lasso per failing liveness check, with the shortest prefix among its fair components."""
    from rmqspec.properties.exhaustive import replay

    g = search.graph
    if not g.keep_edges:
        raise ValueError("find_lassos needs a search with keep_edges=True")
    ok = [allowed(a, True) for a in g.action_list]
    # per state, the obliged actions enabled in it (pruned successors included)
    enabled: dict[int, set[int]] = {}
    for u, k in zip(g.src, g.act, strict=True):
        if ok[k]:
            enabled.setdefault(u, set()).add(k)
    found = []
    for bit, liv in enumerate(LIVENESS_IDS):
        sub = liveness_graph(search, bit)
        best: tuple[int, int, list[int]] | None = None  # (prefix length, entry state, component)
        for comp in nx.strongly_connected_components(sub):
            if len(comp) == 1:
                (u,) = comp
                if not sub.has_edge(u, u):
                    continue
            inner = {d["act"] for u, v, d in sub.subgraph(comp).edges(data=True)}
            always = set.intersection(*(enabled.get(u, set()) for u in comp))
            if not always <= inner:
                continue  # an obliged action enabled throughout and never taken inside: no fair cycle here
            entry = min(comp, key=lambda u: (g.depth[u], u))
            if best is None or g.depth[entry] < best[0]:
                best = (g.depth[entry], entry, sorted(comp))
        if best is None:
            continue
        _, entry, comp = best
        prefix, state = replay(search.model, g.path(entry))
        always = set.intersection(*(enabled.get(u, set()) for u in comp))
        cycle = _cycle_through(sub.subgraph(comp), entry, always, g)
        model = search.model
        detail = next((v.detail for v in _failures(model, state, True) if v.id == liv), "")
        found.append(Lasso(liv, detail, prefix, cycle, len(comp)))
    return found


def _cycle_through(comp: nx.MultiDiGraph, entry: int, obliged: set[int], g: _Graph) -> list[Action]:
    """A fair cycle from ``entry`` back to itself inside the component: it takes every obliged action that is
    enabled throughout the component (``obliged``) at least once, going by shortest paths from one such
    transition to the next."""
    edges_by_act: dict[int, list[tuple[int, int]]] = {}
    for u, v, k in comp.edges(data="act"):
        edges_by_act.setdefault(k, []).append((u, v))
    route: list[tuple[int, int, int]] = []  # (source, target, action id)
    here = entry

    def walk_to(target: int) -> None:
        nonlocal here
        path = nx.shortest_path(comp, here, target)
        for u, v in itertools.pairwise(path):
            route.append((u, v, next(iter(comp.get_edge_data(u, v).values()))["act"]))
        here = target

    for k in sorted(obliged):
        u, v = min(edges_by_act[k], key=lambda e: nx.shortest_path_length(comp, here, e[0]))
        walk_to(u)
        route.append((u, v, k))
        here = v
    if here != entry or not route:
        if here == entry:  # nothing obliged: any cycle back to the entry
            succ = next(s for s in comp.successors(entry))
            route.append((entry, succ, next(iter(comp.get_edge_data(entry, succ).values()))["act"]))
            here = succ
        walk_to(entry) if here != entry else None
    return [g.action_list[k] for _, _, k in route]
