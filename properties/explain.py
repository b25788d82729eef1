"""Which steps of a shortest counterexample are unavoidable: the actions every path to the violation takes,
and the dominators of the violating state in the state graph (on networkx).

A breadth-first counterexample is one shortest path among many; some of its steps could be left out,
replaced by others or taken in another order (a persist a moment earlier, a heartbeat in between). Two
questions separate the essential steps from the incidental ones:

* **Necessary actions.** An action of the path is necessary when every path from the initial state to the
  violating state takes it (that exact action, at some point): with every transition labelled with it
  removed, the violating state is unreachable. One breadth-first search per distinct action of the path,
  over the graph held in compact arrays.
* **Dominators.** A state dominates the violating state when every path to it passes through that state
  (``networkx.immediate_dominators``). A dominator lies on every path, so on the shortest one too: the step
  entering it is where all the behaviours that break the property meet. Because the state holds the whole
  configuration, interleavings rarely meet before the end: most counterexamples have few dominators, and
  the necessary actions say more.

``unavoidable_steps`` explores the configuration again, to the end and keeping every transition
(``check(stop_at_first=False, keep_edges=True)``), and hands networkx the graph of at most ``max_states``
states. For a state invariant the violating state is the counterexample's last; for an action property it is
the state the breaking step leaves, whose dominators are then followed by that step. The result is exact for
the constrained model when that search is exhausted; otherwise none is given (a path through an unexplored
state could avoid a "dominator").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rmqspec.properties.canonical import CanonicalKeys
from rmqspec.properties.exhaustive import Bounds, Found, Search, check
from rmqspec.spec.config import Config

# networkx holds about a kilobyte per edge; a one-message search of 100,000 states has 465,000 transitions
MAX_STATES = 200_000


@dataclass
class Unavoidable:
    """The unavoidable steps of one counterexample: ``steps`` are 1-based indices into ``found.actions``."""

    found: Found
    steps: list[int]  # steps whose action every path to the violating state takes
    dominator_steps: list[int]  # steps entering a state every path to the violating state passes through
    graph_states: int

    def describe(self) -> str:
        listed = ", ".join(str(k) for k in self.steps) or "none"
        meets = ", ".join(str(k) for k in self.dominator_steps) or "none"
        return (
            f"of the {len(self.found.actions)} steps, every path to this violating state (of all "
            f"{self.graph_states:,} states) takes the actions of steps {listed} (marked *) and passes through "
            f"the states after steps {meets}; the other steps are one way among others"
        )


def explored_graph(config: Config, bounds: Bounds, max_states: int = MAX_STATES) -> Search | None:
    """The whole constrained state graph of ``config``, or None when it has more than ``max_states`` states
    (or a search limit of ``bounds`` cut it)."""
    search = check(
        config, replace(bounds, max_states=max_states + 1, max_seconds=None), stop_at_first=False, keep_edges=True
    )
    return search if search.result.exhausted else None


def unavoidable_steps(search: Search, found: Found) -> Unavoidable:
    """The steps of ``found``'s path (a shortest counterexample of ``search``'s configuration) that enter a
    dominator of its violation in ``search``'s graph (module docstring)."""
    import networkx as nx

    model, graph, config = search.model, search.graph, search.result.config
    bounds = search.result.bounds
    keys = CanonicalKeys(config, bounds.time_is_relative(config), bounds.clamp_ms)
    # the state index after each step of the path
    s = model.initial()
    indices = [search.visited[keys.fingerprint(s)]]
    for a in found.actions:
        s = model.step(s, a)
        indices.append(search.visited.get(keys.fingerprint(s), -1))
    # an action property is broken by the last step; its state is where the breaking step starts
    target_step = len(found.actions) if found.action == "state" or found.action == "initial" else len(found.actions) - 1
    target = indices[target_step]
    g = nx.DiGraph()
    g.add_nodes_from(range(len(graph.parent)))
    g.add_edges_from((a, b) for a, b in zip(graph.src, graph.dst, strict=True) if b >= 0)
    idom = nx.immediate_dominators(g, 0)
    dominators = set()
    node = target
    while node != 0:
        dominators.add(node)
        node = idom[node]
    dominator_steps = [k for k in range(1, target_step + 1) if indices[k] in dominators]
    # necessary actions: is the target still reachable without any transition labelled with the action?
    adjacency: list[list[tuple[int, int]]] = [[] for _ in range(len(graph.parent))]
    for source, dest, label in zip(graph.src, graph.dst, graph.act, strict=True):
        if dest >= 0:
            adjacency[source].append((dest, label))
    necessary = {
        label: not _reachable(adjacency, target, without=label)
        for label in {graph.actions[action] for action in found.actions[:target_step]}
    }
    steps = [k for k in range(1, target_step + 1) if necessary[graph.actions[found.actions[k - 1]]]]
    if target_step < len(found.actions):  # the breaking step itself
        steps.append(len(found.actions))
        dominator_steps.append(len(found.actions))
    return Unavoidable(found, steps, dominator_steps, len(graph.parent))


def _reachable(adjacency: list[list[tuple[int, int]]], target: int, without: int) -> bool:
    """Whether ``target`` is reachable from state 0 over transitions not labelled ``without``."""
    seen = bytearray(len(adjacency))
    seen[0] = 1
    stack = [0]
    while stack:
        for b, label in adjacency[stack.pop()]:
            if label != without and not seen[b]:
                if b == target:
                    return True
                seen[b] = 1
                stack.append(b)
    return target == 0
