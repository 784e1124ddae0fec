"""The graphical-model engine: Private-PGM estimation and inference, numpy/scipy only.

Nothing here imports web, database or privacy code; it can be used as a library.

- `domain` — the attributes of a table and their sizes.
- `junction_tree` — the cliques and tree built from measured attribute sets.
- `belief_propagation` — exact sum-product on a junction tree (the marginal oracle).
- `measurement` — a noisy released marginal, its noise variance, the loss, N̂.
- `problem` — measurements compiled against one tree, for the estimators.
- `estimators` — one module per fitting algorithm behind one interface.
- `estimation` — `fit`: the fitting loop that picks an estimator and records the run.
- `cgm`, `cgm_map` — CGM-EM (`fit(..., estimator="cgm-em")`): EM with the true marginals
  latent, its E-step the collective-graphical-model MAP solved through its dual;
  `cgm_starts` runs it from other starts, for the benchmark and tests.
- `model` — `GraphicalModel`, the fitted model: serialised, queried, sampled.
- `elimination` — generic variable elimination compiled to einsum/matmul plans.
- `calibrated_tree` — a model's clique marginals answering queries by elimination.
- `queries` — factored linear queries (Private-PGM's Kronecker-product queries).
- `sampling` — exact sampling of synthetic records along the tree.
- `rounding` — synthetic records whose clique marginals are the model's, rounded.
"""
