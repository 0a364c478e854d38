"""eagle3: from chat data to a trained EAGLE-3 draft on the patched speculators stack.

Steps (``eagle3 COMMAND --help`` for each; ``eagle3 run`` chains them):

* :mod:`.prepare`  chat rows -> token rows with an assistant-token loss mask (+ frequencies)
* :mod:`.extract`  token rows -> ``data_{i}.pt`` hidden-state samples (speculators' v1 format),
  through a backend of :mod:`.backends` (``vllm``: speculators' patched generator, checked by
  :mod:`.preflight`; ``hf``: transformers with hooks); capture convention in :mod:`.layers`
* :mod:`.vocab`    frequencies -> ``d2t.npy`` / ``t2d.npy``
* :mod:`.train`    samples + vocab -> a draft checkpoint via speculators' ``Trainer``
  (:mod:`.launch` for torchrun, :mod:`.cpu_attention` for CPU training)
* :mod:`.run`      the TOML pipeline, ``--tiny`` (models from :mod:`.tiny`), ``--example-config``

Library modules log (``logging``) and show progress (``tqdm``); only :mod:`.cli` prints.
Exit codes: :mod:`.errors`.
"""

__version__ = "0.1.0"
