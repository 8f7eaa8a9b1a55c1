"""The workflow layer: what the Snakefile runs around the library (plans, jobs, tables, figures, the
scorecard). It is moving here from the package's top level stage by stage (issue 35); so far each
stage's figures live in its folder under :mod:`intertwine.workflow.stages`, and what they share in
:mod:`intertwine.workflow.plotting`. The library (``intertwine.measures``, ``models``, ``kernels``,
...) never imports it."""
