"""Orchestration of grids: suite files (suite), the planned cells (plan), what each cell does (cells), and the
executor that runs them (runner: here, one cell after another; ray_executor: as Ray tasks)."""
