"""Where the workflow page draws each step and each edge: a layered
(Sugiyama) layout computed by grandalf, turned into boxes and polylines in
the page's own coordinates for the template's SVG.

It places what it is given and reads nothing; which steps are drawn, and
how many, is the caller's choice (reads.py caps them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

from grandalf.graphs import Edge, Graph, Vertex
from grandalf.layouts import SugiyamaLayout

#: A box's size: room for a step's name and its state on two lines.
NODE_WIDTH = 168
NODE_HEIGHT = 44
#: Between boxes of one layer, between layers, and around the drawing.
GAP_X = 24
GAP_Y = 36
MARGIN = 12


@dataclass(frozen=True)
class Box:
    key: Hashable
    x: float  # left
    y: float  # top
    width: float = NODE_WIDTH
    height: float = NODE_HEIGHT

    @property
    def cx(self) -> float:
        return self.x + self.width / 2


@dataclass(frozen=True)
class Line:
    parent: Hashable
    child: Hashable
    points: tuple[tuple[float, float], ...]

    @property
    def path(self) -> str:
        """The line as an SVG path's d attribute."""
        return "M " + " L ".join(f"{x:.1f} {y:.1f}" for x, y in self.points)


@dataclass(frozen=True)
class Drawing:
    boxes: dict[Hashable, Box]
    lines: list[Line]
    width: float
    height: float


class _Vertex(Vertex):
    """A vertex hashed by its place in the caller's order: grandalf keeps
    vertices in sets, whose order (and with it the drawing) would otherwise
    follow their addresses in memory and change from process to process."""

    def __init__(self, key: Hashable, place: int) -> None:
        super().__init__(key)
        self.place = place

    def __hash__(self) -> int:
        return self.place


class _Edge(Edge):
    """An edge hashed by its place, as _Vertex."""

    def __init__(self, parent: Vertex, child: Vertex, place: int) -> None:
        super().__init__(parent, child)
        self.place = place

    def __hash__(self) -> int:
        return self.place


class _Size:
    """The view grandalf reads a vertex's size from, and writes its centre to."""

    def __init__(self) -> None:
        self.w, self.h = NODE_WIDTH, NODE_HEIGHT
        self.xy = (0.0, 0.0)


class _Route:
    """The view grandalf writes an edge's points to: its ends' centres, with
    the points of the layers a long edge crosses between them."""

    def __init__(self) -> None:
        self.points: list[tuple[float, float]] = []

    def setpath(self, points: list[tuple[float, float]]) -> None:
        self.points = list(points)


def lay_out(keys: Sequence[Hashable],
            edges: Sequence[tuple[Hashable, Hashable]]) -> Drawing:
    """Place ``keys`` in layers so that every edge (parent, child) points
    down; each connected part of the graph is laid out on its own and the
    parts stand side by side, in the order of their first key. An edge
    naming a key not given is left out."""
    vertices = {key: _Vertex(key, n) for n, key in enumerate(keys)}
    for vertex in vertices.values():
        vertex.view = _Size()
    graph_edges: list[_Edge] = []
    for parent, child in edges:
        if parent in vertices and child in vertices and parent != child:
            edge = _Edge(vertices[parent], vertices[child], len(graph_edges))
            edge.view = _Route()
            graph_edges.append(edge)
    graph = Graph(list(vertices.values()), graph_edges)
    order = {key: n for n, key in enumerate(keys)}
    parts = sorted(graph.C, key=lambda part: min(order[v.data] for v in part.sV))
    boxes: dict[Hashable, Box] = {}
    lines: list[Line] = []
    left = float(MARGIN)
    height = 0.0
    for part in parts:
        layout = SugiyamaLayout(part)
        layout.xspace, layout.yspace = GAP_X, GAP_Y
        layout.init_all()
        layout.draw()
        _spread(layout)
        # A long edge's bends take a box's room in their layers: the part
        # spans them too.
        centres = [v.view.xy for v in part.sV] + [p for e in part.sE for p in e.view.points]
        part_left = min(x for x, _ in centres) - NODE_WIDTH / 2
        part_top = min(y for _, y in centres) - NODE_HEIGHT / 2
        dx, dy = left - part_left, MARGIN - part_top
        for vertex in part.sV:
            x, y = vertex.view.xy
            boxes[vertex.data] = Box(vertex.data, x + dx - NODE_WIDTH / 2,
                                     y + dy - NODE_HEIGHT / 2)
        for edge in part.sE:
            lines.append(_line(edge.v[0].data, edge.v[1].data,
                               [(x + dx, y + dy) for x, y in edge.view.points]))
        right = max(x for x, _ in centres) + dx + NODE_WIDTH / 2
        height = max(height, max(y for _, y in centres) + dy + NODE_HEIGHT / 2)
        left = right + GAP_X * 2
    width = left - GAP_X * 2 + MARGIN if parts else 2.0 * MARGIN
    return Drawing(boxes, lines, width, height + MARGIN)


def _spread(layout: SugiyamaLayout) -> None:
    """Move apart what shares a layer closer than its room. grandalf places
    each vertex at a mean of four alignments, which can put two of them (a
    box, or the bend of a long edge crossing the layer) on one spot; each
    layer's left-to-right order is kept, and the edges are routed again
    through the places moved."""
    for layer in layout.layers:
        previous = None
        for vertex in layer:
            if previous is not None:
                x, y = vertex.view.xy
                least = (previous.view.xy[0] + (previous.view.w + vertex.view.w) / 2
                         + layout.xspace)
                if x < least:
                    vertex.view.xy = (least, y)
            previous = vertex
    layout.draw_edges()


def _line(parent: Hashable, child: Hashable, centres: list[tuple[float, float]]) -> Line:
    """From the bottom of the parent's box to the top of the child's, through
    the points between (a feedback edge of a cycle runs upwards: then from
    the top of the one to the bottom of the other)."""
    (x0, y0), (x1, y1) = centres[0], centres[-1]
    down = 1 if y1 >= y0 else -1
    start = (x0, y0 + down * NODE_HEIGHT / 2)
    end = (x1, y1 - down * NODE_HEIGHT / 2)
    return Line(parent, child, (start, *centres[1:-1], end))


#: The key of the box that stands for a workflow's steps not drawn.
NOT_DRAWN = "not drawn"
#: Steps with the same parents and the same children (a fan-out's) drawn
#: side by side at most; more of them are folded into the NOT_DRAWN box,
#: all but the first SIBLINGS_KEPT, lest one layer run for metres.
MOST_SIBLINGS = 10
SIBLINGS_KEPT = 8


def lay_out_steps(ids: Sequence[int], edges: Sequence[tuple[int | None, int | None]],
                  steps_in_all: int) -> Drawing:
    """lay_out for a workflow of ``steps_in_all`` steps, of which ``ids``
    (job ids, in order) may be drawn, with the edges between them, an end
    None being a step not among them. The steps left out, and the siblings
    folded beyond MOST_SIBLINGS, are one box, NOT_DRAWN, with their edges."""
    parents: dict[Hashable, set[Hashable]] = {key: set() for key in ids}
    children: dict[Hashable, set[Hashable]] = {key: set() for key in ids}
    for parent, child in edges:
        if child is not None:
            parents[child].add(NOT_DRAWN if parent is None else parent)
        if parent is not None:
            children[parent].add(NOT_DRAWN if child is None else child)
    siblings: dict[tuple[frozenset, frozenset], list[Hashable]] = {}
    for key in ids:
        siblings.setdefault((frozenset(parents[key]), frozenset(children[key])), []).append(key)
    folded = {key for group in siblings.values() if len(group) > MOST_SIBLINGS
              for key in group[SIBLINGS_KEPT:]}
    keys: list[Hashable] = [key for key in ids if key not in folded]
    if len(keys) < steps_in_all:
        keys.append(NOT_DRAWN)
    pairs = dict.fromkeys(
        (NOT_DRAWN if parent in folded else parent, NOT_DRAWN if child in folded else child)
        for child in ids for parent in parents[child])
    pairs.update(dict.fromkeys((parent, NOT_DRAWN) for parent in ids
                               if NOT_DRAWN in children[parent] and parent not in folded))
    return lay_out(keys, [pair for pair in pairs if pair[0] != pair[1]])
