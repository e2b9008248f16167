"""Stack equivalence classes, as LLNL's STAT builds them: ranks that share frames share a branch.

A prefix tree over the main threads' frames (outermost first) with the ranks at every
node; printed compactly with rank ranges ("ranks 0-511,513-1023").
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hangdoc.analyze.classify import per_stack
from hangdoc.model import Bundle, Frame, Role
from hangdoc.base.words import rank_set


@dataclass(frozen=True)
class StackClass:
    ranks: tuple[int, ...]
    frames: tuple[Frame, ...]     # innermost first, from the class's lowest rank


@dataclass
class Node:
    label: str
    parts: list[tuple[int, ...]] = field(default_factory=list)   # the ranks of each class through it
    children: dict[str, "Node"] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(map(len, self.parts))

    @property
    def ranks(self) -> list[int]:
        return [r for part in self.parts for r in part]


@per_stack
def _key(frames: tuple[Frame, ...]) -> tuple:
    # Function and file, not line: a rank looping in one function stays in one class.
    return tuple((f.symbol, f.short_filename) for f in frames)


def stack_classes(bundle: Bundle, members: Mapping[int, Sequence[int]] | None = None) -> list[StackClass]:
    """Ranks grouped by identical main-thread stacks in the last sample, biggest class first.

    `members`: for a job diagnosed by class, the ranks each loaded rank stands for (rank ->
    ranks); the bundle's other ranks are then left out, as their classes hold them."""
    groups: dict[tuple, tuple[list[int], list]] = {}      # key -> (ranks, [lowest rank, its frames])
    for rank in bundle.job.by_role(Role.RANK):
        number = rank.rank if rank.rank is not None else -1
        if members is not None and number not in members:
            continue
        ranks = members[number] if members is not None else (number,)
        if not ranks:
            continue
        sample = bundle.last.sample_of(rank.pid)
        main = sample.stack.main if sample and sample.stack else None
        frames = main.frames if main else ()
        group, lowest = groups.setdefault(_key(frames), ([], [None, ()]))   # keyed once a loaded rank
        group.extend(ranks)
        if lowest[0] is None or min(ranks) < lowest[0]:
            lowest[:] = [min(ranks), frames]
    classes = [StackClass(tuple(sorted(group)), lowest[1]) for group, lowest in groups.values()]
    return sorted(classes, key=lambda c: (-len(c.ranks), c.ranks))


def prefix_tree(classes: list[StackClass]) -> Node:
    """The classes' frames as a tree, outermost first. A node holds the rank tuple of each class
    through it, not a list of its ranks: a class of a million ranks is not copied at each frame."""
    root = Node("<all ranks>")
    for cls in classes:
        root.parts.append(cls.ranks)
        node = root
        for frame in reversed(cls.frames):   # outermost first
            label = f"{frame.symbol} ({frame.short_filename})"
            node = node.children.setdefault(label, Node(label))
            node.parts.append(cls.ranks)
    return root


def _chain_label(chain: list[Node]) -> str:
    labels = [node.label for node in chain]
    if len(labels) > 5:
        labels = labels[:2] + [f"... {len(labels) - 4} frames ..."] + labels[-2:]
    return " > ".join(labels)


def tree_lines(node: Node, indent: str = "") -> list[str]:
    """The tree, outermost frame first, one line per branch: single-child chains fold into one line.

    Each line says which ranks took the branch; where ranks stop while others go deeper, a
    line says so. Thousands of ranks in a few classes print as a few lines.
    """
    lines = []
    children = sorted(node.children.values(), key=lambda c: (-c.count, min((min(p) for p in c.parts if p), default=0)))
    for child in children:
        chain = [child]
        while len(chain[-1].children) == 1:
            only = next(iter(chain[-1].children.values()))
            if only.count != chain[-1].count:   # a child's ranks are a subset of its parent's
                break
            chain.append(only)
        lines.append(f"{indent}[{rank_set(child.ranks)}] {_chain_label(chain)}")
        lines.extend(tree_lines(chain[-1], indent + "  "))
    if children:
        # The classes whose frames end here (a class is one tuple all the way down), less any rank
        # that also goes deeper: the ranks of the children are gathered only when a class ends here.
        deeper = {id(p) for c in children for p in c.parts}
        here = [r for p in node.parts if id(p) not in deeper for r in p]
        if here:
            deeper = {r for c in children for p in c.parts for r in p}
            here = [r for r in here if r not in deeper]
        if here:
            lines.append(f"{indent}[{rank_set(here)}] (innermost frame above)")
    return lines


def stack_tree(bundle: Bundle, members: Mapping[int, Sequence[int]] | None = None) -> list[str]:
    """The main-thread stacks of every rank in the last sample as a folded prefix tree."""
    classes = stack_classes(bundle, members)
    if not classes:
        return []
    lines = tree_lines(prefix_tree(classes))
    bare = [r for c in classes if not c.frames for r in c.ranks]
    if bare:
        lines.append(f"[{rank_set(bare)}] (no stack)")
    return lines
