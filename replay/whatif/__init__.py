"""What-if transforms applied to a graph before a protocol: duration scaling (:mod:`.scale`) and
data parallelism (:mod:`.dataparallel`). Pure graph functions, like protocols."""
