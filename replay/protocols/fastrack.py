"""``fastrack`` and its single-fix ablations (each on top of the baseline, see :mod:`.cc`).

* ``fastrack:direct``: direct GPU TEE communication: transfers whose data is already encrypted
  end to end (the model's ``direct_eligible``, the ``[direct]`` preset table of the H100 model)
  skip CPU re-encryption/decryption and the bounce buffers;
* ``fastrack:auth``: parallel GPU authentication;
* ``fastrack:overlap``: decryption (and the other stages) pipelined with PCIe chunk by chunk;
* ``fastrack``: all three.
"""

from .cc import CCProtocol

FASTRACK = CCProtocol("fastrack", "Fastrack: direct GPU TEE communication + parallel authentication + "
                      "decryption overlapped with PCIe", direct=True, parallel_auth=True, overlap=True)
FASTRACK_DIRECT = CCProtocol("fastrack:direct", "baseline + direct GPU TEE communication (no CPU re-encryption "
                             "of data already encrypted end to end)", direct=True)
FASTRACK_AUTH = CCProtocol("fastrack:auth", "baseline + parallel GPU authentication", parallel_auth=True)
FASTRACK_OVERLAP = CCProtocol("fastrack:overlap", "baseline + decryption overlapped with PCIe, chunk by chunk",
                              overlap=True)
