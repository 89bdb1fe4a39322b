"""Trinity-RFT 0.6's package of environment helpers (``trinity.common.workflows.envs``).

Only the Sudoku helpers are here (:mod:`.sudoku`); the environments ship in trinity-workflows
(``trinity.workflows.envs``) and resolve from these paths on first use.
"""
