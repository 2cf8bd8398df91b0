"""Architecture studies (``replay sweep``, ``replay sensitivity``, ``replay plot``), one concept per module.

Data flows one way: :mod:`~replay.frontend.study.spec` (what to run) -> :mod:`~replay.frontend.study.points`
(keyed points, study fingerprint) -> :mod:`~replay.frontend.study.executors` running
:mod:`~replay.frontend.study.worker` batches -> :mod:`~replay.frontend.study.store` (resumable parts, compacted
table). The commands: :mod:`~replay.frontend.study.sweep` ties those together (``replay sweep``),
:mod:`~replay.frontend.study.sensitivity` perturbs one parameter at a time on the same executors
(``replay sensitivity``), and :mod:`~replay.frontend.study.plot` draws a study's table (``replay plot``).
"""
