"""Architecture studies (``replay sweep``, ``replay sensitivity``, ``replay plot``), one concept per module.

Data flows one way: :mod:`~replay.study.spec` (what to run) -> :mod:`~replay.study.points`
(keyed points, study fingerprint) -> :mod:`~replay.study.executors` running
:mod:`~replay.study.worker` batches -> :mod:`~replay.study.store` (resumable parts, compacted
table). The commands: :mod:`~replay.study.sweep` ties those together (``replay sweep``),
:mod:`~replay.study.sensitivity` perturbs one parameter at a time on the same executors
(``replay sensitivity``), and :mod:`~replay.study.plot` draws a study's table (``replay plot``).
"""
