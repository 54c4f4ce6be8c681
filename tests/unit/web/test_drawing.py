"""The workflow page's drawing: layers that point down, boxes that never
overlap, edges from a parent's box to its child's."""

import itertools
import os
import random
import subprocess
import sys

import pytest

from motir_supervisor.web.dashboard.drawing import (
    MOST_SIBLINGS, NOT_DRAWN, SIBLINGS_KEPT, lay_out, lay_out_steps)


def overlap(a, b):
    return (a.x < b.x + b.width and b.x < a.x + a.width
            and a.y < b.y + b.height and b.y < a.y + a.height)


def inside(point, box):
    x, y = point
    return box.x < x < box.x + box.width and box.y < y < box.y + box.height


def check(drawing, keys, edges):
    assert set(drawing.boxes) == set(keys)
    for a, b in itertools.combinations(drawing.boxes.values(), 2):
        assert not overlap(a, b), (a, b)
    for box in drawing.boxes.values():
        assert 0 <= box.x and box.x + box.width <= drawing.width
        assert 0 <= box.y and box.y + box.height <= drawing.height
    assert sorted([(line.parent, line.child) for line in drawing.lines], key=str) == sorted(
        edges, key=str)
    for line in drawing.lines:
        parent, child = drawing.boxes[line.parent], drawing.boxes[line.child]
        # A child is in a lower layer than each of its parents, and its
        # edge runs from the bottom of the one to the top of the other,
        # bending only outside every box.
        assert child.y >= parent.y + parent.height
        assert line.points[0] == (parent.cx, parent.y + parent.height)
        assert line.points[-1] == (child.cx, child.y)
        for point in line.points[1:-1]:
            assert not any(inside(point, box) for box in drawing.boxes.values())
        assert line.path.startswith("M ") and line.path.count(" L ") == len(line.points) - 1


def test_a_diamond_with_a_long_edge_and_a_step_of_its_own():
    keys = ["fetch", "embed", "index", "publish", "alone"]
    edges = [("fetch", "embed"), ("fetch", "index"), ("embed", "publish"),
             ("index", "publish"), ("fetch", "publish")]
    drawing = lay_out(keys, edges)
    check(drawing, keys, edges)
    boxes = drawing.boxes
    assert boxes["fetch"].y < boxes["embed"].y == boxes["index"].y < boxes["publish"].y
    # The step without edges stands beside the diamond, not on it.
    assert boxes["alone"].x > max(boxes[k].x + boxes[k].width for k in keys[:4])
    long_edge = next(line for line in drawing.lines if line.child == "publish"
                     and line.parent == "fetch")
    assert len(long_edge.points) == 3  # it bends in the layer it crosses


@pytest.mark.parametrize("seed", range(12))
def test_a_random_dag_of_a_hundred_and_twenty_steps(seed):
    # grandalf's mean of four alignments can put two things of a layer on
    # one spot: a dozen graphs meet such layers (three of them do).
    rng = random.Random(seed)
    keys = list(range(120))
    edges = sorted({(rng.randrange(max(0, child - 15), child), child)
                    for child in keys[1:] for _ in range(2)})
    check(lay_out(keys, edges), keys, edges)


DRAW_A_RANDOM_DAG = """
import random, sys
from motir_supervisor.web.dashboard.drawing import lay_out
ballast = [object() for _ in range(int(sys.argv[1]))]  # moves what is allocated next
rng = random.Random(7)
keys = list(range(120))
edges = sorted({(rng.randrange(max(0, c - 15), c), c) for c in keys[1:] for _ in range(2)})
drawing = lay_out(keys, edges)
print(sorted((k, b.x, b.y) for k, b in drawing.boxes.items()))
print(sorted((line.parent, line.child, line.points) for line in drawing.lines))
"""


def test_a_graph_is_drawn_the_same_in_every_process():
    # grandalf keeps vertices in sets: ordered by their addresses, the
    # layers would come out differently from one process (or reload of the
    # page) to the next.
    drawings = {subprocess.run([sys.executable, "-c", DRAW_A_RANDOM_DAG, str(ballast)],
                               env={**os.environ, "PYTHONHASHSEED": str(ballast)},
                               capture_output=True, text=True, check=True).stdout
                for ballast in (0, 1000, 5000)}
    assert len(drawings) == 1


def test_a_fan_out_and_in_lays_the_children_side_by_side():
    keys = list(range(52))
    edges = [(0, c) for c in range(1, 51)] + [(c, 51) for c in range(1, 51)]
    drawing = lay_out(keys, edges)
    check(drawing, keys, edges)
    assert len({drawing.boxes[c].y for c in range(1, 51)}) == 1


def test_the_steps_not_drawn_are_one_box_with_their_edges():
    # A chain of which the middle is not drawn: 1 -> 2 -> (others) -> 9 -> 10.
    drawing = lay_out_steps([1, 2, 9, 10], [(1, 2), (2, None), (None, 9), (9, 10)], 6)
    check(drawing, [1, 2, NOT_DRAWN, 9, 10],
          [(1, 2), (2, NOT_DRAWN), (NOT_DRAWN, 9), (9, 10)])
    assert drawing.boxes[2].y < drawing.boxes[NOT_DRAWN].y < drawing.boxes[9].y
    everything = lay_out_steps([1, 2], [(1, 2)], 0)
    assert NOT_DRAWN not in everything.boxes


def test_nothing_to_draw():
    drawing = lay_out([], [])
    assert drawing.boxes == {} and drawing.lines == [] and drawing.width > 0


def test_a_wide_fan_out_is_folded_into_the_box_of_the_steps_not_drawn():
    parts = list(range(2, 2 + MOST_SIBLINGS + 1))
    join = parts[-1] + 1
    edges = [(1, p) for p in parts] + [(p, join) for p in parts]
    drawing = lay_out_steps([1, *parts, join], edges, len(parts) + 2)
    kept = parts[:SIBLINGS_KEPT]
    check(drawing, [1, *kept, NOT_DRAWN, join],
          [(1, p) for p in kept] + [(p, join) for p in kept] + [(1, NOT_DRAWN), (NOT_DRAWN, join)])
    # As many as fit are all drawn.
    fewer = parts[:MOST_SIBLINGS]
    drawing = lay_out_steps([1, *fewer, join], [(1, p) for p in fewer] + [(p, join) for p in fewer],
                            len(fewer) + 2)
    assert set(drawing.boxes) == {1, *fewer, join}
