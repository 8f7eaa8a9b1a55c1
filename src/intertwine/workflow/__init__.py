"""The workflow layer: what workflow/Snakefile runs around the library. The plan (``plan``, its
core, and each stage's part in :mod:`intertwine.workflow.stages`), the command line (``cli``), the
config and its schema (``config``, ``settings``, ``config.schema.yaml``), the tables, the claims
and their decision rule (``claims``, ``verdicts``, ``scorecard_page``), the papers' numbers
(``paper``), checkpoints (``zoo``), cluster resources (``cluster``), reruns (``code_identity``) and
the deviations from the papers (``deviations``); a folder per stage under ``stages``. The library
(every other module of ``intertwine``) never imports it (``tests/test_layout.py``)."""
