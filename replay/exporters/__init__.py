"""What a replay writes for other tools: Chakra execution traces (:mod:`.chakra`) and timelines
for trace viewers and analysis tools (:mod:`.timeline`)."""
