"""Neighbor aggregation (seed 000's third control): out[i] = sum of x[j] over j in N(i).

The graph is a fixed seeded random graph in CSR form, seeded by the node count alone, so
every pattern and every run of a shape sees the same graph. Degrees are uniform in
0..2*AVERAGE_DEGREE: some nodes have no neighbours, and their all-zero output must still be
written (the sentinel check fails an unwritten zero).

Layouts: `gather` (the seed's: a thread per output element, each walking its node's edges)
and `warp_vec` (kernel `neighbor_warp_vec`): a warp per node, its edge indices read once per
32 edges in one coalesced load and broadcast by shuffles, each lane owning a 16-byte quad of
features, so every gather of a neighbour row is one 512-byte contiguous read for 128
features, with four rows in flight before they are added. The indices are read once per node
instead of once per feature. Controls aimed at `warp_vec`: the fourth row of each unrolled
group of four left out, the last edge of every 32-edge batch left out.

`warp_hint` (kernel `neighbor_warp_hint`) keeps warp_vec's mapping (the degrees are uniform in
0..32, so one 32-index batch covers every node and a warp per node wastes no lanes: 128 features
are 32 quads) and works on what bounds it, the L2: the gathers issue 537 MiB at the default
shape against 68 MiB of compulsory traffic, at about 8.5 TB/s. `unroll` rows (2, 4 or 8) are
loaded before they are added, the 1..unroll-1 rows left at a batch's end as one predicated group
(warp_vec fetches up to three of them one after another), and the occupancy follows the unroll
(8, 6 or 4 blocks of 256 threads a multiprocessor: 32, 40 or 64 registers, no spills), so 128,
192 or 256 rows are in flight per multiprocessor. With `hint` 1 the gathers of x carry an L2
evict_last policy, the edge indices are read and out written evict-first: x (32 MiB) is re-read
~16 times a launch, out (32 MiB) and the indices (4 MiB) once, and together they overflow the L2.
Default unroll 4, hint 1, chosen by reasoning; on the H200 (run h200-limits1) it was also the
sweep's fastest point, 65.5 us at the default shape (Triton 63.2). Controls
aimed at `warp_hint`: the predicated group at a batch's end dropped, the last quad (or float) of
every output row never written.

`node_split` (kernel `neighbor_node_split`) answers what the H200 counters said of warp_hint
(65.5 us, Triton 63.1): blocks of 8 warps, 8 nodes of uniform 0..32 edges, hold their finished
warps until the block's slowest node is done (53% achieved occupancy at 40 registers), while
Triton's program per node (64 threads, 28 registers) reaches 88%. Here a block of `lanes`
threads (32, 64 or 128: 1, 2 or 4 warps) serves one node and ends with it; the row is split
between the warps, each owning a contiguous chunk of ceil(vectors / warps) vectors of 128 / lanes
floats per lane (default 64 lanes: a float2 per lane, each warp gathering one 256-byte half of
every neighbour row), so twice as many warps gather as in a warp per node. Each warp reads its
node's edge indices itself (32 per coalesced load, broadcast by shuffles: no shared memory, no
barrier), loads `unroll` rows (2 or 4) before adding them, and predicates every group on the
batch's count (the remainder is one zero-padded group). <= 32 registers at 64 and 128 lanes
(32 or 16 blocks a multiprocessor: 64 warps, the most it holds), no spills; at 32 lanes (a
float4 per lane) the 32-block limit allows only 32 warps. `hint` as in warp_hint (default 1,
which measured 1% faster there). The ceil split gives the second warp work at the correctness
widths too (64 features: 16 float2 each; 5 features: 3 and 2 floats). Default 64 lanes, unroll 4
(chosen by reasoning; on the H200, run h200-limits1, 62.3 us, and the sweep's fastest point,
32 lanes with unroll 4, 62.0 us). Controls aimed at `node_split`: the
chunk rounded down (the last vectors of odd widths never written), the last row of every batch
of 32 edges left out.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array, rng_for
from kernelkit import KitError, library
from kernelkit.spec import Baseline, KernelSpec, Launch, Mutation, Shape, Tolerance

THREADS = 256
AVERAGE_DEGREE = 16


def graph(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = rng_for("neighbor-graph", nodes)
    degrees = rng.integers(0, 2 * AVERAGE_DEGREE + 1, size=nodes)
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int32)
    indices = rng.integers(0, nodes, size=int(indptr[-1])).astype(np.int32)
    return indptr, indices


def make_inputs(shape: Shape, pattern: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    nodes, features = shape
    indptr, indices = graph(nodes)
    return {"x": pattern_array(pattern, (nodes, features), rng), "indptr": indptr, "indices": indices}


def _gather_sum(x: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Each node's sum of its neighbours' rows, as differences of a running sum over the gathered
    rows (CSR keeps a node's edges together). NumPy or CuPy arrays alike, so the timed shape's
    float64 reference runs on the GPU (kernelkit.verify); in float64 the running sum's rounding
    (about 1e-16 of its size) stays far below the tolerance."""
    xp = library.array_module(x)
    gathered = x[indices]
    running = xp.concatenate([xp.zeros((1, x.shape[1]), dtype=gathered.dtype), xp.cumsum(gathered, axis=0)])
    return running[indptr[1:]] - running[indptr[:-1]]


def reference(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return _gather_sum(inputs["x"].astype(np.float64), inputs["indptr"], inputs["indices"])


def error_scale(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return _gather_sum(np.abs(inputs["x"].astype(np.float64)), inputs["indptr"], inputs["indices"])


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    nodes, features = shape
    if layout.get("entry") == "neighbor_node_split":
        lanes, unroll = int(layout["lanes"]), int(layout["unroll"])
        if lanes not in (32, 64, 128) or unroll not in (2, 4):
            raise KitError(f"neighbor node_split takes 32, 64 or 128 lanes and unroll 2 or 4, not lanes={lanes}, "
                           f"unroll={unroll}")
        return Launch(grid=(nodes,), block=(lanes,))
    threads = int(layout["threads"])
    if layout.get("entry") == "neighbor_warp_hint" and threads != 256:
        raise KitError(f"neighbor warp_hint is compiled for 256 threads a block (its __launch_bounds__), not {threads}")
    if layout.get("entry") in ("neighbor_warp_vec", "neighbor_warp_hint"):
        return Launch(grid=(-(-nodes // (threads // 32)),), block=(threads,))
    return Launch(grid=(-(-nodes * features // threads),), block=(threads,))


def layout_options(layout: Mapping[str, Any]) -> tuple[str, ...]:
    """warp_hint's unroll and hint; node_split's lanes, unroll and hint (its NB_HINT is warp_hint's switch)."""
    if layout.get("entry") == "neighbor_warp_hint":
        return (f"-DNB_UNROLL={int(layout['unroll'])}", f"-DNB_HINT={int(layout['hint'])}")
    if layout.get("entry") == "neighbor_node_split":
        return (f"-DNS_LANES={int(layout['lanes'])}", f"-DNS_UNROLL={int(layout['unroll'])}",
                f"-DNB_HINT={int(layout['hint'])}")
    return ()


def arguments(buffers: Mapping[str, Any], out: Any, shape: Shape) -> tuple:
    nodes, features = shape
    return (buffers["x"], buffers["indptr"], buffers["indices"], out, np.int32(nodes), np.int32(features))


def bytes_moved(shape: Shape) -> int:
    """Compulsory traffic: x, the CSR arrays and out, each once."""
    nodes, features = shape
    edges = int(graph(nodes)[0][-1])
    return 4 * (nodes * features + edges + nodes + 1 + nodes * features)


def bytes_issued(shape: Shape) -> int:
    """What the gathers ask for: one row of x per edge, the CSR arrays once, out once."""
    nodes, features = shape
    edges = int(graph(nodes)[0][-1])
    return 4 * (edges * features + edges + nodes + 1 + nodes * features)


def weighted_adjacency(buffers: Mapping[str, Any], nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The graph as CSR on the host with each repeated edge stored once, weighted by its count.

    cuSPARSE refuses more stored entries than the matrix has cells (one node with seven
    self-loops), so the library baselines get this equivalent matrix; A @ x is unchanged.
    """
    indptr, indices = (np.asarray(a.get() if hasattr(a, "get") else a) for a in (buffers["indptr"], buffers["indices"]))
    rows = np.repeat(np.arange(nodes, dtype=np.int64), np.diff(indptr))
    cells, counts = np.unique(rows * nodes + indices, return_counts=True)
    row_counts = np.bincount(cells // nodes, minlength=nodes)
    return (np.concatenate([[0], np.cumsum(row_counts)]).astype(np.int32), (cells % nodes).astype(np.int32),
            counts.astype(np.float32))


def cupy_call(buffers: Mapping[str, Any], shape: Shape):
    xp = library.array_module(buffers["x"])
    nodes = shape[0]
    indptr, columns, weights = (xp.asarray(a) for a in weighted_adjacency(buffers, nodes))
    adjacency = library.sparse_module(buffers["x"]).csr_matrix((weights, columns, indptr), shape=(nodes, nodes))
    return lambda: adjacency @ buffers["x"]


def torch_call(buffers: Mapping[str, Any], shape: Shape):
    import torch

    t = library.torch_views(buffers)
    nodes = shape[0]
    indptr, columns, weights = (torch.from_numpy(a).to(t["x"].device) for a in weighted_adjacency(buffers, nodes))
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        adjacency = torch.sparse_csr_tensor(indptr, columns, weights, size=(nodes, nodes))
    return lambda: torch.sparse.mm(adjacency, t["x"])


def triton_call(buffers: Mapping[str, Any], shape: Shape):
    kernels = library.kernel_module(__file__, "triton_neighbor.py")
    t = library.torch_views(buffers)
    return lambda: kernels.neighbor_sum(t["x"], t["indptr"], t["indices"])


SPEC = KernelSpec(
    name="neighbor",
    source="neighbor.cu",
    entry="neighbor_sum",
    dims=("nodes", "features"),
    layouts={"gather": {"threads": THREADS}, "warp_vec": {"entry": "neighbor_warp_vec", "threads": THREADS},
             "warp_hint": {"entry": "neighbor_warp_hint", "threads": 256, "unroll": 4, "hint": 1},
             "node_split": {"entry": "neighbor_node_split", "lanes": 64, "unroll": 4, "hint": 1}},
    correctness_shapes=((1, 1), (7, 3), (33, 5), (100, 64)),
    tolerance=Tolerance(abs=1e-6, rel=1e-5),
    mutations={
        "last_edge": Mutation(
            find="e < indptr[node + 1]; ++e",
            replace="e < indptr[node + 1] - 1; ++e",
            why="the last neighbour of every node is left out",
        ),
        "self": Mutation(
            find="float sum = 0.0f;",
            replace="float sum = x[index];",
            why="each node's own features are added to its neighbours'",
        ),
        "warp_unrolled": Mutation(
            find="plus(plus(a, b), plus(c, d))",
            replace="plus(plus(a, b), c)",
            why="warp_vec leaves out the fourth neighbour row of every unrolled group of four",
        ),
        "warp_batch_end": Mutation(
            find="const int count = min(32, end - e0);",
            replace="const int count = min(32, end - e0) - 1;",
            why="warp_vec leaves out the last edge of every batch of 32 edge indices",
        ),
        "hint_remainder": Mutation(
            find="if (j < count) {  // the batch's last",
            replace="if (false) {  // the batch's last",
            why="warp_hint drops the predicated group of the last count % unroll rows of every batch",
        ),
        "hint_last_quad": Mutation(
            find="if (active) nb_store(out_row + f, acc);",
            replace="if (active && f + 1 < row_len) nb_store(out_row + f, acc);",
            why="warp_hint never writes the last quad (or float, on the scalar path) of an output row",
        ),
        "split_chunk": Mutation(
            find="const int chunk = (row_len + NS_WARPS - 1) / NS_WARPS;",
            replace="const int chunk = row_len / NS_WARPS;",
            why="node_split rounds each warp's chunk down: the last row_len % warps vectors of a row are never written",
        ),
        "split_batch_end": Mutation(
            find="active && g + k < count ?",
            replace="active && g + k + 1 < count ?",
            why="node_split leaves out the last edge of every batch of 32 edge indices",
        ),
    },
    make_inputs=make_inputs,
    reference=reference,
    launch=launch,
    arguments=arguments,
    bytes_moved=bytes_moved,
    bytes_issued=bytes_issued,
    flops=lambda shape: int(graph(shape[0])[0][-1]) * shape[1],
    error_scale=error_scale,
    layout_options=layout_options,
    # Rows in flight (unroll 2, 4, 8 with 8, 6, 4 blocks a multiprocessor) x the L2 hints off or on;
    # node_split: warps per node (1, 2, 4: a float4, float2 or float per lane) x rows in flight per warp.
    sweeps={"warp_hint": {"unroll": [2, 4, 8], "hint": [0, 1]}, "node_split": {"lanes": [32, 64, 128], "unroll": [2, 4]}},
    baselines={
        "cupy": Baseline("cupy", "cupyx.scipy.sparse CSR adjacency (repeated edges as weights) @ x (cuSPARSE SpMM)",
                         cupy_call),
        "torch": Baseline("torch", "torch.sparse.mm(CSR adjacency with repeated edges as weights, x) (cuSPARSE)", torch_call),
        "triton": Baseline("triton", "triton_neighbor.py: a program per (node, 128 features), walking its edges", triton_call),
    },
)
