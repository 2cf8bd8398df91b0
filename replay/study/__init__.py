"""Architecture studies (``replay sweep``, ``replay sensitivity``), one concept per module.

Data flows one way: :mod:`~replay.study.spec` (what to run) -> :mod:`~replay.study.points`
(keyed points, study fingerprint) -> :mod:`~replay.study.executors` running
:mod:`~replay.study.worker` batches -> :mod:`~replay.study.store` (resumable parts, compacted
table). :mod:`replay.sweep` ties them together and holds the ``replay sweep`` command.
"""
