"""``fastrack`` and its single-fix ablations (each on top of the baseline, see :mod:`.cc`).

* ``fastrack:direct``: direct GPU TEE communication: transfers whose data arrived already
  encrypted (the model's ``direct_eligible``, the ``[direct]`` preset table of the H100 model)
  skip both CPU passes (decrypt the client's ciphertext, re-encrypt) and the bounce buffers;
* ``fastrack:auth``: parallel authentication: each secure copy's AES-GCM and tag are spread over
  every copy engine (partial tags combined) instead of one engine of one channel;
* ``fastrack:overlap``: page-grained pipelining of CPU crypto, PCIe and the CE operation instead
  of 2 MiB-chunk-grained;
* ``fastrack``: all three.
"""

from .cc import CCProtocol

FASTRACK = CCProtocol("fastrack", "Fastrack: direct GPU TEE communication + parallel authentication (crypto split "
                      "over copy engines) + page-grained pipelining", direct=True, parallel_auth=True, overlap=True)
FASTRACK_DIRECT = CCProtocol("fastrack:direct", "baseline + direct GPU TEE communication (no CPU decryption and "
                             "re-encryption of data that arrived encrypted)", direct=True)
FASTRACK_AUTH = CCProtocol("fastrack:auth", "baseline + parallel authentication (each secure copy's crypto split "
                           "over every copy engine)", parallel_auth=True)
FASTRACK_OVERLAP = CCProtocol("fastrack:overlap", "baseline + page-grained pipelining of CPU crypto, PCIe and CE",
                              overlap=True)
