"""Stack equivalence classes, as LLNL's STAT builds them: ranks that share frames share a branch.

A prefix tree over the main threads' frames (outermost first) with the ranks at every
node; printed compactly with rank ranges ("ranks 0-511,513-1023").
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hangdoc.model import Bundle, Frame, Role


@dataclass(frozen=True)
class StackClass:
    ranks: tuple[int, ...]
    frames: tuple[Frame, ...]     # innermost first, from the class's lowest rank


@dataclass
class Node:
    label: str
    ranks: list[int] = field(default_factory=list)
    children: dict[str, "Node"] = field(default_factory=dict)


def rank_ranges(ranks) -> str:
    """[0,1,2,3,5,7,8] -> "0-3,5,7-8"."""
    ordered = sorted(set(ranks))
    parts, i = [], 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def _key(frames: tuple[Frame, ...]) -> tuple:
    # Function and file, not line: a rank looping in one function stays in one class.
    return tuple((f.name, f.short_filename) for f in frames)


def stack_classes(bundle: Bundle) -> list[StackClass]:
    """Ranks grouped by identical main-thread stacks in the last sample, biggest class first."""
    groups: dict[tuple, list[tuple[int, tuple[Frame, ...]]]] = {}
    for rank in bundle.job.by_role(Role.RANK):
        sample = bundle.last.sample_of(rank.pid)
        main = sample.stack.main if sample and sample.stack else None
        frames = main.frames if main else ()
        groups.setdefault(_key(frames), []).append((rank.rank if rank.rank is not None else -1, frames))
    classes = [StackClass(tuple(sorted(r for r, _ in members)), min(members, key=lambda m: m[0])[1])
               for members in groups.values()]
    return sorted(classes, key=lambda c: (-len(c.ranks), c.ranks))


def prefix_tree(classes: list[StackClass]) -> Node:
    root = Node("<all ranks>")
    for cls in classes:
        root.ranks.extend(cls.ranks)
        node = root
        for frame in reversed(cls.frames):   # outermost first
            label = f"{frame.name} ({frame.short_filename})"
            node = node.children.setdefault(label, Node(label))
            node.ranks.extend(cls.ranks)
    return root


def tree_lines(node: Node, indent: str = "") -> list[str]:
    """The tree with single-child chains folded: each line says which ranks took that branch."""
    lines = []
    for child in node.children.values():
        chain = [child]
        while len(chain[-1].children) == 1 and sorted(next(iter(chain[-1].children.values())).ranks) == sorted(chain[-1].ranks):
            chain.append(next(iter(chain[-1].children.values())))
        shown = chain[-1]
        skipped = f" ... ({len(chain) - 1} frames above)" if len(chain) > 1 else ""
        lines.append(f"{indent}[ranks {rank_ranges(shown.ranks)}] {shown.label}{skipped}")
        lines.extend(tree_lines(shown, indent + "  "))
    return lines
